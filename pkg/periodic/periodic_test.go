package periodic

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// rig is a Runnable on a fake clock whose task reports each pass's number on passes.
type rig struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	r      *Runnable
	passes chan int
}

// newRig returns a rig of period whose task does during (if not nil) and then fails with err.
func newRig(t *testing.T, period time.Duration, during func(*clocktesting.FakeClock), err error) *rig {
	g := &rig{t: t, clk: clocktesting.NewFakeClock(time.Unix(1000, 0)), passes: make(chan int, 10)}
	n := 0
	r, e := New("test", period, func(context.Context) error {
		n++
		if during != nil {
			during(g.clk)
		}
		g.passes <- n
		return err
	}, g.clk, logr.Discard())
	if e != nil {
		t.Fatal(e)
	}
	g.r = r
	return g
}

// start starts the runnable and stops it, waiting for Start to return, when the test ends.
func (g *rig) start() {
	ctx, cancel := context.WithCancel(g.t.Context())
	done := make(chan error, 1)
	go func() { done <- g.r.Start(ctx) }()
	g.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				g.t.Errorf("Start = %v, want nil when its context ends", err)
			}
		case <-time.After(10 * time.Second):
			g.t.Error("Start did not return when its context ended")
		}
	})
}

// next waits for the next pass and checks its number.
func (g *rig) next(want int) {
	g.t.Helper()
	select {
	case n := <-g.passes:
		if n != want {
			g.t.Fatalf("pass %d, want %d", n, want)
		}
	case <-time.After(10 * time.Second):
		g.t.Fatalf("pass %d never ran", want)
	}
}

// waiting waits until the runnable waits on its clock.
func (g *rig) waiting() {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !g.clk.HasWaiters() {
		if time.Now().After(deadline) {
			g.t.Fatal("the runnable never waited on its clock")
		}
		time.Sleep(time.Millisecond)
	}
}

// none asserts that, once the runnable waits on its clock, no pass ran.
func (g *rig) none() {
	g.t.Helper()
	g.waiting()
	select {
	case n := <-g.passes:
		g.t.Fatalf("pass %d ran before its period", n)
	default:
	}
}

// step moves the clock by d once the runnable waits on it.
func (g *rig) step(d time.Duration) {
	g.t.Helper()
	g.waiting()
	g.clk.Step(d)
}

func TestRunnableRunsAtStartThenEveryPeriod(t *testing.T) {
	g := newRig(t, time.Minute, nil, nil)
	g.start()
	g.next(1)
	g.step(59 * time.Second)
	g.none()
	g.step(time.Second)
	g.next(2)
	g.step(time.Minute)
	g.next(3)
}

// The period runs from the end of a pass: a pass longer than the period is not followed by
// another at once, and passes never overlap.
func TestRunnablePeriodFromTheEndOfAPass(t *testing.T) {
	g := newRig(t, time.Minute, func(clk *clocktesting.FakeClock) { clk.Step(5 * time.Minute) }, nil)
	g.start()
	g.next(1)
	g.none()
	g.step(time.Minute)
	g.next(2)
}

func TestRunnableFirstAfterPeriod(t *testing.T) {
	g := newRig(t, time.Minute, nil, nil)
	g.r.FirstAfterPeriod = true
	g.start()
	g.none()
	g.step(time.Minute)
	g.next(1)
}

// A failed pass is retried at the next period, not at once and not never.
func TestRunnableRetriesAFailedPassAtTheNextPeriod(t *testing.T) {
	g := newRig(t, time.Minute, nil, errors.New("backend down"))
	g.start()
	g.next(1)
	g.none()
	g.step(time.Minute)
	g.next(2)
}

// Start returns once its context ends, also while it waits for the next period (start's
// cleanup checks it).
func TestRunnableStopsWithItsContext(t *testing.T) {
	g := newRig(t, time.Hour, nil, nil)
	g.start()
	g.next(1)
	g.none()
}

func TestRunnableNeedsTheLease(t *testing.T) {
	var r manager.LeaderElectionRunnable = &Runnable{}
	if !r.NeedLeaderElection() {
		t.Error("NeedLeaderElection = false, want true: periodic tasks run on the leader only")
	}
	if r = (&Runnable{AllReplicas: true}); r.NeedLeaderElection() {
		t.Error("NeedLeaderElection with AllReplicas = true, want false")
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	task := func(context.Context) error { return nil }
	var clk clock.Clock = clocktesting.NewFakeClock(time.Now())
	for name, tc := range map[string]struct {
		period time.Duration
		task   Task
		clk    clock.Clock
	}{
		"no task":     {time.Minute, nil, clk},
		"no clock":    {time.Minute, task, nil},
		"zero period": {0, task, clk},
		"negative":    {-time.Second, task, clk},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New("test", tc.period, tc.task, tc.clk, logr.Discard()); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

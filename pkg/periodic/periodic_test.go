package periodic

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// run starts r in the background and returns a stop that ends it and waits for Start to return.
func run(t *testing.T, r *Runnable) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start = %v, want nil when its context ends", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Start did not return when its context ended")
		}
	}
}

// next waits for the next pass, failing if none comes.
func next(t *testing.T, passes <-chan int) int {
	t.Helper()
	select {
	case n := <-passes:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no pass")
		return 0
	}
}

// none asserts that no pass comes while the clock stands still: it waits until the runnable is
// back waiting on the clock, then checks that nothing was sent.
func none(t *testing.T, clk *clocktesting.FakeClock, passes <-chan int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the runnable never waited on its clock")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case n := <-passes:
		t.Fatalf("pass %d ran before its period", n)
	default:
	}
}

// step waits until the runnable waits on the clock, then moves the clock by d.
func step(t *testing.T, clk *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the runnable never waited on its clock")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(d)
}

func TestRunnableRunsAtStartThenEveryPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	passes := make(chan int, 10)
	n := 0
	r := &Runnable{Name: "test", Period: time.Minute, Clock: clk, Log: logr.Discard(), Task: func(context.Context) error {
		n++
		passes <- n
		return nil
	}}
	stop := run(t, r)
	defer stop()
	if got := next(t, passes); got != 1 {
		t.Fatalf("first pass = %d, want 1 at start", got)
	}
	step(t, clk, 59*time.Second)
	none(t, clk, passes)
	clk.Step(time.Second)
	if got := next(t, passes); got != 2 {
		t.Fatalf("pass after one period = %d, want 2", got)
	}
	step(t, clk, time.Minute)
	if got := next(t, passes); got != 3 {
		t.Fatalf("pass after two periods = %d, want 3", got)
	}
}

// The period runs from the end of a pass: a pass longer than the period is not followed by
// another at once, and passes never overlap.
func TestRunnablePeriodFromTheEndOfAPass(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	passes := make(chan int, 10)
	n := 0
	r := &Runnable{Name: "test", Period: time.Minute, Clock: clk, Log: logr.Discard(), Task: func(context.Context) error {
		n++
		clk.Step(5 * time.Minute) // a slow pass: five periods
		passes <- n
		return nil
	}}
	stop := run(t, r)
	defer stop()
	next(t, passes)
	none(t, clk, passes)
	step(t, clk, time.Minute)
	if got := next(t, passes); got != 2 {
		t.Fatalf("pass = %d, want 2", got)
	}
}

func TestRunnableFirstAfterPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	passes := make(chan int, 10)
	r := &Runnable{Name: "test", Period: time.Minute, FirstAfterPeriod: true, Clock: clk, Log: logr.Discard(), Task: func(context.Context) error {
		passes <- 1
		return nil
	}}
	stop := run(t, r)
	defer stop()
	none(t, clk, passes)
	clk.Step(time.Minute)
	next(t, passes)
}

// A failed pass is retried at the next period, not at once and not never.
func TestRunnableRetriesAFailedPassAtTheNextPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	passes := make(chan int, 10)
	n := 0
	r := &Runnable{Name: "test", Period: time.Minute, Clock: clk, Log: logr.Discard(), Task: func(context.Context) error {
		n++
		passes <- n
		return errors.New("backend down")
	}}
	stop := run(t, r)
	defer stop()
	next(t, passes)
	none(t, clk, passes)
	clk.Step(time.Minute)
	if got := next(t, passes); got != 2 {
		t.Fatalf("pass = %d, want 2", got)
	}
}

// Start returns once its context ends, also while waiting for the next period.
func TestRunnableStopsWithItsContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	passes := make(chan int, 10)
	r := &Runnable{Name: "test", Period: time.Hour, Clock: clk, Log: logr.Discard(), Task: func(context.Context) error {
		passes <- 1
		return nil
	}}
	stop := run(t, r)
	next(t, passes)
	none(t, clk, passes)
	stop()
}

func TestRunnableNeedsTheLease(t *testing.T) {
	var r manager.LeaderElectionRunnable = &Runnable{}
	if !r.NeedLeaderElection() {
		t.Error("NeedLeaderElection = false, want true: periodic tasks run on the leader only")
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	task := func(context.Context) error { return nil }
	for name, tc := range map[string]struct {
		period time.Duration
		task   func(context.Context) error
	}{
		"no task":     {time.Minute, nil},
		"zero period": {0, task},
		"negative":    {-time.Second, task},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New("test", tc.period, tc.task, clocktesting.NewFakeClock(time.Now()), logr.Discard()); err == nil {
				t.Error("New accepted it")
			}
		})
	}
	if _, err := New("test", time.Minute, task, nil, logr.Discard()); err == nil {
		t.Error("New accepted a nil clock")
	}
}

package capture

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// managerRig runs a started Manager whose captures record when they start and run until the test
// lets them end (end) or the manager stops them (preemption, shutdown).
type managerRig struct {
	t *testing.T
	m *Manager

	mu            sync.Mutex
	order         []string // captures in the order they started
	running, peak int
	release       map[string]chan struct{}
	stopped       map[string]bool // captures that returned because their context ended
}

func newManagerRig(t *testing.T, slots int) *managerRig {
	r := &managerRig{t: t, m: NewManager(slots), release: map[string]chan struct{}{}, stopped: map[string]bool{}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-r.m.started
	return r
}

// run asks for the capture of key in namespace ns.
func (r *managerRig) run(ns, key string, ended bool) {
	r.t.Helper()
	r.mu.Lock()
	ch := r.release[key]
	if ch == nil {
		ch = make(chan struct{})
		r.release[key] = ch
	}
	r.mu.Unlock()
	pod := types.NamespacedName{Namespace: ns, Name: key}
	if !r.m.Ensure(key, pod, ended, func(ctx context.Context) { r.capture(ctx, key, ch) }) {
		r.t.Fatalf("Ensure(%s) = false on a started manager", key)
	}
}

func (r *managerRig) capture(ctx context.Context, key string, release chan struct{}) {
	r.mu.Lock()
	r.order = append(r.order, key)
	r.running++
	r.peak = max(r.peak, r.running)
	r.mu.Unlock()
	select {
	case <-release:
	case <-ctx.Done():
		r.mu.Lock()
		r.stopped[key] = true
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
}

// started waits until n captures have started.
func (r *managerRig) started(n int) {
	r.t.Helper()
	r.waitFor(fmt.Sprintf("%d captures started", n), func() bool { return len(r.order) >= n })
}

// waitFor polls cond, under the rig's lock, for up to 10 s.
func (r *managerRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.t.Fatalf("not so after 10 s: %s (captures started: %v)", what, r.order)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// end lets a running capture return, and waits for its pod on Events.
func (r *managerRig) end(key string) {
	r.t.Helper()
	r.mu.Lock()
	close(r.release[key])
	r.mu.Unlock()
	r.event(key)
}

// event waits for key's pod on Events.
func (r *managerRig) event(key string) {
	r.t.Helper()
	select {
	case e := <-r.m.Events():
		if e.Object.GetName() != key {
			r.t.Fatalf("event for %s, want %s", e.Object.GetName(), key)
		}
	case <-time.After(10 * time.Second):
		r.t.Fatalf("no event after %s ended", key)
	}
}

func (r *managerRig) wantOrder(want ...string) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.order, want) {
		r.t.Fatalf("captures ran in order %v, want %v", r.order, want)
	}
}

// TestManagerEndedFirst: with every slot taken, captures of ended containers get the freed slots
// before those of running containers, each kind in arrival order, and a waiting capture whose
// container ends meanwhile moves forward. The bound holds throughout, and every capture's pod is
// sent on Events when it ends.
func TestManagerEndedFirst(t *testing.T) {
	r := newManagerRig(t, 2)
	const ns = "ns"
	r.run(ns, "live-1", false)
	r.started(1)
	r.run(ns, "live-2", false)
	r.started(2)
	r.run(ns, "live-3", false) // waits
	r.run(ns, "ended-1", true) // waits, but goes first
	r.run(ns, "live-4", false) // waits
	r.run(ns, "ended-2", true) // waits, after ended-1
	r.run(ns, "live-2", false) // already running: nothing new
	r.run(ns, "live-4", true)  // live-4's container ended meanwhile: it moves forward
	for i, key := range []string{"live-1", "live-2", "ended-1", "ended-2"} {
		r.end(key)
		r.started(3 + i)
	}
	r.end("live-4")
	r.end("live-3")

	r.wantOrder("live-1", "live-2", "ended-1", "ended-2", "live-4", "live-3")
	if r.peak > 2 {
		t.Errorf("%d captures ran at once, want at most 2", r.peak)
	}
	if r.m.Active("live-3") {
		t.Error("Active(live-3) after it ended")
	}
}

// TestManagerSharesSlotsBetweenNamespaces: one namespace's running containers hold every slot
// and more of them wait; a capture of another namespace gets a slot at once all the same: the
// newest capture of the namespace above its share is stopped (its pod sent on Events, so that its
// reconciler queues it again) and the slot goes to the namespace below its share. The bound holds.
func TestManagerSharesSlotsBetweenNamespaces(t *testing.T) {
	r := newManagerRig(t, 4)
	for i := range 10 {
		r.run("hostile", fmt.Sprintf("hostile-%d", i), false)
	}
	r.started(4)
	r.run("victim", "victim-0", false)
	r.waitFor("the victim's capture started", func() bool { return slices.Contains(r.order, "victim-0") })
	r.event("hostile-3") // the newest of the hostile namespace's captures, stopped
	r.mu.Lock()
	defer r.mu.Unlock()
	if want := map[string]bool{"hostile-3": true}; !maps.Equal(r.stopped, want) {
		t.Errorf("captures stopped: %v, want %v", r.stopped, want)
	}
	if r.peak > 4 {
		t.Errorf("%d captures ran at once, want at most 4", r.peak)
	}
}

// TestManagerRoundRobin: freed slots go round the waiting namespaces, each namespace's captures in
// arrival order, not in the order of arrival across namespaces: a namespace that queued many
// captures first does not make the others wait for all of them.
func TestManagerRoundRobin(t *testing.T) {
	r := newManagerRig(t, 1)
	r.run("x", "x-1", false)
	r.started(1)
	for _, key := range []string{"a-1", "a-2", "a-3", "b-1", "b-2", "c-1"} {
		r.run(key[:1], key, false)
	}
	want := []string{"x-1", "a-1", "b-1", "c-1", "a-2", "b-2", "a-3"}
	for i := 1; i < len(want); i++ {
		r.end(want[i-1])
		r.started(i + 1)
		r.wantOrder(want[:i+1]...)
	}
	r.end("a-3")
}

// TestManagerWaitersAreRecords: 10,000 captures waiting for a slot cost no goroutine each (a
// queue entry, with what their pod's event needs, not a copy of the pod).
func TestManagerWaitersAreRecords(t *testing.T) {
	r := newManagerRig(t, 1)
	r.run("ns", "holder", false)
	r.started(1)
	before := runtime.NumGoroutine()
	for i := range 10_000 {
		r.run(fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("waiter-%d", i), false)
	}
	if after := runtime.NumGoroutine(); after-before > 10 {
		t.Errorf("%d goroutines after queueing 10,000 captures, %d before: want no goroutine per waiting capture", after, before)
	}
	if !r.m.Active("waiter-9999") {
		t.Error("Active(waiter-9999) = false while it waits")
	}
}

// TestPreemptedCaptureStoresWhatItHolds: a capture of a running container, stopped to give its
// slot to another namespace, stores the segment it holds in memory before it returns: its next
// capture resumes from there, and needs the node to hold none of it any more (a rotation in
// between loses nothing).
func TestPreemptedCaptureStoresWhatItHolds(t *testing.T) {
	mr := newManagerRig(t, 2)
	mr.run("busy", "filler", false)
	mr.started(1)
	r := newRig(t)
	r.cfg.SegmentBytes, r.cfg.SegmentAge = 1<<20, time.Hour // what is read stays in memory
	var mu sync.Mutex
	read := 0
	r.cfg.ObserveLag = func(time.Duration) { mu.Lock(); read++; mu.Unlock() }
	done := make(chan error, 1)
	if !mr.m.Ensure("victim", types.NamespacedName{Namespace: "busy", Name: "victim"}, false, func(ctx context.Context) {
		_, err := Capture(ctx, r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, r.over, nil)
		done <- err
	}) {
		t.Fatal("Ensure(victim) = false on a started manager")
	}
	for i := range 5 {
		r.write(fmt.Sprintf("line %d\n", i), false)
	}
	waitFor(t, "read", func() bool { mu.Lock(); defer mu.Unlock(); return read == 5 })
	mr.run("quiet", "other", false) // below its share: the busy namespace gives up its slot
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the capture was not stopped for the other namespace")
	}
	r.node.rotate() // the node no longer holds what was read
	if n := r.segments(); n != 1 {
		t.Fatalf("stored %d segments when stopped, want the 1 it held", n)
	}
	r.check(t)
}

// TestManagerStopStopsAndWaits: Stop cancels the matching captures that run (their context's
// cause ErrSealed), drops the matching ones that wait for a slot, leaves the others alone, and
// returns only once the stopped ones have returned: the seal of a job reads its rows after them.
func TestManagerStopStopsAndWaits(t *testing.T) {
	mr := newManagerRig(t, 2)
	mr.run("a", "job1/running", false)
	mr.run("a", "job2/running", false)
	mr.started(2)
	mr.run("a", "job1/waiting", false)
	if err := mr.m.Stop(t.Context(), func(key string) bool { return strings.HasPrefix(key, "job1/") }); err != nil {
		t.Fatal(err)
	}
	mr.mu.Lock()
	stopped := mr.stopped["job1/running"] && mr.running == 1
	mr.mu.Unlock()
	if !stopped || mr.m.Active("job1/running") || mr.m.Active("job1/waiting") || !mr.m.Active("job2/running") {
		t.Errorf("after Stop: job1's running capture stopped and returned %t, active: job1/running %t, job1/waiting %t, job2/running %t; want only job2's active",
			stopped, mr.m.Active("job1/running"), mr.m.Active("job1/waiting"), mr.m.Active("job2/running"))
	}
	mr.event("job1/running") // its pod is sent on Events, as any ended capture's
	mr.end("job2/running")
}

package capture

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestCaptureReadsTheRestWhenItsPodChanges: a capture run by the Manager looks at its run's status
// when the reconciler calls Ensure again for its pod, not at its next Poll (a minute here). The
// node removes a deleted pod's logs within a second of its containers' end, so the rest of the run
// must be read at once (before: at the next Poll, a second by default, and the testbed's "deleted
// while running" job was released with a "collected before read" gap under load).
func TestCaptureReadsTheRestWhenItsPodChanges(t *testing.T) {
	r := newRig(t)
	r.cfg.Poll = time.Minute
	m := newManagerRig(t, 1).m
	var (
		mu         sync.Mutex
		terminated bool
		over       bool
	)
	end := func(context.Context) (End, error) {
		mu.Lock()
		defer mu.Unlock()
		return End{Terminated: terminated, Over: over, Final: true}, nil
	}
	done := make(chan error, 1)
	key, pod := "ns/p/main/0/uid", types.NamespacedName{Namespace: "ns", Name: "p"}
	ensure := func() {
		t.Helper()
		if !m.Ensure(key, pod, false, func(ctx context.Context) {
			_, err := Capture(ctx, r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, end, nil)
			done <- err
		}) {
			t.Fatal("Ensure = false on a started manager")
		}
	}
	ensure()
	for i := range 20 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d\n", i))
	}
	waitFor(t, "followed", func() bool { r.node.mu.Lock(); defer r.node.mu.Unlock(); return r.node.opens > 0 })
	r.writeAt(r.t0.Add(time.Second), "the last line\n")
	mu.Lock()
	terminated = true
	mu.Unlock()
	// The follow stream stays open (KWOK's never ends): only the status tells the run ended.
	ensure()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.node.mu.Lock()
		opens := r.node.opens
		r.node.mu.Unlock()
		if opens >= 2 {
			break // the read of the rest, without follow
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rest of the run not read 5 s after its pod changed (Poll is a minute): %d opens", opens)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	over = true
	mu.Unlock()
	ensure()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Capture: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the capture did not end 5 s after its pod changed again")
	}
	r.check(t)
}

// TestCaptureReadsTheRestWhenItsPodChangesDuringBackOff: on a real kubelet a follow stream ends at
// once when its container no longer runs, before the kubelet reports the run's end: the capture
// reopens it, later and later (up to Retry, a minute here). The status that tells the end must cut
// that wait short: the node removes the deleted pod's logs 0.6 s after it (before: read at the end
// of the wait, and the logs were gone).
func TestCaptureReadsTheRestWhenItsPodChangesDuringBackOff(t *testing.T) {
	r := newRig(t)
	r.cfg.Poll, r.cfg.Retry = time.Minute, time.Minute
	node := &stoppingNode{fakeNode: r.node}
	m := newManagerRig(t, 1).m
	var (
		mu         sync.Mutex
		terminated bool
		over       bool
		finished   time.Time
	)
	end := func(context.Context) (End, error) {
		mu.Lock()
		defer mu.Unlock()
		return End{Terminated: terminated, Over: over, FinishedAt: finished, Final: true}, nil
	}
	done := make(chan error, 1)
	key, pod := "ns/p/main/0/uid", types.NamespacedName{Namespace: "ns", Name: "p"}
	ensure := func() {
		t.Helper()
		if !m.Ensure(key, pod, false, func(ctx context.Context) {
			_, err := Capture(ctx, r.cfg, node, r.recs, r.store, r.segKey, r.ref, end, nil)
			done <- err
		}) {
			t.Fatal("Ensure = false on a started manager")
		}
	}
	ensure()
	for i := range 20 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d\n", i))
	}
	waitFor(t, "followed", func() bool { r.node.mu.Lock(); defer r.node.mu.Unlock(); return r.node.opens > 0 })
	r.writeAt(r.t0.Add(time.Second), "the last line, written as the container stopped\n")
	node.mu.Lock()
	node.stopped = true
	node.mu.Unlock()
	r.node.breakStreams()
	// The follows reopened after the stop end at once: the capture waits longer before each.
	waitFor(t, "three follow streams after the stop", func() bool {
		node.mu.Lock()
		defer node.mu.Unlock()
		return len(node.followsAt) >= 3
	})
	// A change that does not end the run keeps the back-off: no stream is reopened for it.
	node.mu.Lock()
	follows := len(node.followsAt)
	node.mu.Unlock()
	for range 20 {
		ensure()
		time.Sleep(10 * time.Millisecond)
	}
	node.mu.Lock()
	if n := len(node.followsAt); n > follows+1 {
		t.Errorf("%d follow streams reopened for 20 changes of a pod whose run still runs, want at most 1", n-follows)
	}
	node.mu.Unlock()
	mu.Lock()
	terminated, finished = true, time.Now().Truncate(time.Second)
	mu.Unlock()
	ensure()
	time.Sleep(600 * time.Millisecond) // the kubelet's container GC
	node.mu.Lock()
	node.removed = true
	node.mu.Unlock()
	mu.Lock()
	over = true
	mu.Unlock()
	ensure()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Capture: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the capture did not end 5 s after its pod changed again")
	}
	r.check(t)
}

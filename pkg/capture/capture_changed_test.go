package capture

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ensureCapture returns a function that asks m for the rig's capture from src with the status
// over, under key in namespace ns, as the reconciler does at each change of the pod, and the
// channel each run of the capture returns on.
func (r *rig) ensureCapture(t *testing.T, m *Manager, ns, key string, src Source, over func(context.Context) (End, error)) (func(), chan error) {
	done := make(chan error, 2)
	return func() {
		t.Helper()
		if !m.Ensure(key, types.NamespacedName{Namespace: ns, Name: key}, false, func(ctx context.Context) {
			_, err := Capture(ctx, r.cfg, src, r.recs, r.store, r.segKey, r.ref, over, nil)
			done <- err
		}) {
			t.Fatal("Ensure = false on a started manager")
		}
	}, done
}

// waitEnded waits until the capture returned on done, 5 s at most after its pod changed.
func waitEnded(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Capture: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the capture did not end 5 s after its pod changed again")
	}
}

// waitOpens waits until the rig's node has had n streams opened.
func (r *rig) waitOpens(t *testing.T, what string, n int) {
	t.Helper()
	waitFor(t, what, func() bool { return r.node.openCount() >= n })
}

func (n *fakeNode) openCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.opens
}

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
	ensure, done := r.ensureCapture(t, m, "ns", "ns/p/main/0/uid", r.node, end)
	ensure()
	for i := range 20 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d\n", i))
	}
	r.waitOpens(t, "followed", 1)
	r.writeAt(r.t0.Add(time.Second), "the last line\n")
	mu.Lock()
	terminated = true
	mu.Unlock()
	// The follow stream stays open (KWOK's never ends): only the status tells the run ended.
	ensure()
	r.waitOpens(t, "the rest of the run read after its pod changed (Poll is a minute)", 2)
	mu.Lock()
	over = true
	mu.Unlock()
	ensure()
	waitEnded(t, done)
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
	ensure, done := r.ensureCapture(t, m, "ns", "ns/p/main/0/uid", node, end)
	ensure()
	for i := range 20 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d\n", i))
	}
	r.waitOpens(t, "followed", 1)
	r.writeAt(r.t0.Add(time.Second), "the last line, written as the container stopped\n")
	node.stop()
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
	node.remove()
	mu.Lock()
	over = true
	mu.Unlock()
	ensure()
	waitEnded(t, done)
	r.check(t)
}

// eofNode ends every follow stream at once after one new line, as a node's reader that fails its
// follow streams does; it records when the rest is read without follow.
type eofNode struct {
	mu      sync.Mutex
	follows int
	reads   []time.Time
}

func (n *eofNode) Open(_ context.Context, _ Ref, opts OpenOptions) (io.ReadCloser, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !opts.Follow {
		n.reads = append(n.reads, time.Now())
		return io.NopCloser(strings.NewReader("")), nil
	}
	n.follows++
	return io.NopCloser(strings.NewReader(time.Now().UTC().Format(time.RFC3339Nano) + fmt.Sprintf(" line %d\n", n.follows))), nil
}

// TestCaptureTakesAChangeSeenWhileSettling: the pod change that tells the run's end arrives while
// settle waits for the status that binds an ended stream's lines. settle takes the signal; the
// reopen back-off after it still reads the status first (before: it waited its whole back-off).
func TestCaptureTakesAChangeSeenWhileSettling(t *testing.T) {
	r := newRig(t)
	r.cfg.Poll, r.cfg.Retry, r.cfg.Settle = time.Minute, time.Minute, 300*time.Millisecond
	n := &eofNode{}
	m := newManagerRig(t, 1).m
	var mu sync.Mutex
	terminated := false
	end := func(context.Context) (End, error) {
		mu.Lock()
		defer mu.Unlock()
		return End{Terminated: terminated}, nil
	}
	key, pod := "ns/p/main/0/uid", types.NamespacedName{Namespace: "ns", Name: "p"}
	ensure := func() {
		m.Ensure(key, pod, false, func(ctx context.Context) { _, _ = Capture(ctx, r.cfg, n, r.recs, r.store, r.segKey, r.ref, end, nil) })
	}
	ensure()
	waitFor(t, "five follow streams", func() bool { n.mu.Lock(); defer n.mu.Unlock(); return n.follows >= 5 })
	time.Sleep(50 * time.Millisecond) // the 5th stream ended: settle waits for its lines' status
	mu.Lock()
	terminated = true
	mu.Unlock()
	changed := time.Now()
	ensure()
	waitFor(t, "the rest read", func() bool { n.mu.Lock(); defer n.mu.Unlock(); return len(n.reads) > 0 })
	n.mu.Lock()
	defer n.mu.Unlock()
	if d := n.reads[0].Sub(changed); d > time.Second {
		t.Errorf("the rest was read %s after the pod change that told the run's end, want at once", d)
	}
}

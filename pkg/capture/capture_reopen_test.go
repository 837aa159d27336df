package capture

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// endingNode is a node whose follow streams end at once, cleanly, as the kubelet's do for a
// container that is not running: it serves the log written so far and closes the stream.
type endingNode struct {
	mu             sync.Mutex
	follows, reads int
	log            string
}

func (n *endingNode) Open(_ context.Context, _ Ref, opts OpenOptions) (io.ReadCloser, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if opts.Follow {
		n.follows++
	} else {
		n.reads++
	}
	if !opts.Since.IsZero() {
		return io.NopCloser(strings.NewReader("")), nil // the fixed log holds nothing newer
	}
	return io.NopCloser(strings.NewReader(n.log)), nil
}

func (n *endingNode) opens() (follows, reads int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.follows, n.reads
}

// TestCaptureBacksOffStreamsThatEndAtOnce: a follow stream the node ends at once, without error,
// is reopened later and later, up to Retry, never in a tight loop (before: thousands of opens a
// second against the API server and the node).
func TestCaptureBacksOffStreamsThatEndAtOnce(t *testing.T) {
	r := newRig(t)
	r.cfg.Retry = 400 * time.Millisecond
	n := &endingNode{log: "2026-11-22T10:00:00Z a line\n"}
	ctx, stop := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer stop()
	_, _ = Capture(ctx, r.cfg, n, r.recs, r.store, r.segKey, r.ref, func(context.Context) (End, error) { return End{}, nil }, nil)
	// 100 ms then doubling up to 400 ms: opens at 0, 0.2, 0.6, 1.0 and 1.4 s.
	if follows, _ := n.opens(); follows > 6 {
		t.Errorf("%d follow streams opened in 1.5 s (%.0f a second), want at most 6", follows, float64(follows)/1.5)
	}
}

// TestCaptureDrainsATerminatedRunOnce: a run whose container terminated while its pod runs (an
// init container, an exited sidecar, a finished ephemeral container) is not over: it may restart,
// which names its log "previous". Its log is read once without follow, and the capture then waits
// for the run to be over without opening a stream again; the log is stored whole.
func TestCaptureDrainsATerminatedRunOnce(t *testing.T) {
	r := newRig(t)
	r.cfg.SegmentAge = time.Minute // what was read stays in memory until the run is named
	n := &endingNode{log: "2026-11-22T10:00:00Z init: done\n2026-11-22T10:00:01Z init: bye\n"}
	overAt := time.Now().Add(700 * time.Millisecond)
	over := func(context.Context) (End, error) {
		if time.Now().After(overAt) {
			return End{Over: true}, nil
		}
		return End{Terminated: true}, nil
	}
	a, err := Capture(t.Context(), r.cfg, n, r.recs, r.store, r.segKey, r.ref, over, func(bool) (string, time.Time) { return "whole.log.gz", time.Time{} })
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	follows, reads := n.opens()
	if follows != 0 || reads != 1 {
		t.Errorf("%d follow streams and %d reads opened, want the log read once", follows, reads)
	}
	if a == nil || a.Bytes != int64(len("init: done\ninit: bye\n")) {
		t.Errorf("stored %+v, want the whole log", a)
	}
}

// TestCaptureLeavesTheFollowOfARunThatTerminated: a run followed while it ran terminates while its
// pod runs on, and the node keeps its follow stream open (KWOK's does): the capture leaves the
// stream, reads the rest once, and holds no stream while it waits for the run to be over.
func TestCaptureLeavesTheFollowOfARunThatTerminated(t *testing.T) {
	r := newRig(t)
	r.cfg.SegmentAge = time.Minute
	terminated, over := false, false
	end := func(context.Context) (End, error) {
		r.node.mu.Lock()
		defer r.node.mu.Unlock()
		return End{Terminated: terminated && !over, Over: over}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := Capture(t.Context(), r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, end, nil)
		done <- err
	}()
	r.write("running\n", false)
	waitFor(t, "followed", func() bool { r.node.mu.Lock(); defer r.node.mu.Unlock(); return r.node.opens == 1 })
	r.write("last words\n", false)
	r.node.mu.Lock()
	terminated = true
	r.node.mu.Unlock()
	waitFor(t, "read once more", func() bool { r.node.mu.Lock(); defer r.node.mu.Unlock(); return r.node.opens == 2 })
	time.Sleep(200 * time.Millisecond) // 20 polls: no stream opened again
	r.node.mu.Lock()
	opens := r.node.opens
	over = true
	r.node.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if opens != 2 {
		t.Errorf("%d streams opened, want the follow and one read", opens)
	}
	r.check(t)
}

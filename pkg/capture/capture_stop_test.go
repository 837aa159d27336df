package capture

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCaptureTakesAFollowAcrossTheStopAsTheRead: a follow stream open while the container ran,
// which the node ended cleanly when the container stopped, read the run to its end (the node's
// reader ends a follow only once it sees the container stopped, and reads the file to its end
// first). The logs are collected before the capture sees the run over, as a kubelet does 0.4 to
// 0.8 s after a deleted pod's containers stop, and as happens to most of a thousand pods deleted
// at once (BenchmarkFollow1000): the capture needs no further read, and records no gap.
func TestCaptureTakesAFollowAcrossTheStopAsTheRead(t *testing.T) {
	r := newRig(t)
	node := &stoppingNode{fakeNode: r.node}
	var (
		mu                sync.Mutex
		over              bool
		started, finished time.Time
	)
	end := func(context.Context) (End, error) {
		mu.Lock()
		defer mu.Unlock()
		return End{Over: over, Final: true, StartedAt: started, FinishedAt: finished}, nil
	}
	// A status has whole seconds: it started in the second before the capture began.
	mu.Lock()
	started = time.Now().Add(-time.Second).Truncate(time.Second)
	mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := Capture(t.Context(), r.cfg, node, r.recs, r.store, r.segKey, r.ref, end, nil)
		done <- err
	}()
	for i := range 20 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d\n", i))
	}
	r.writeAt(r.t0.Add(time.Second), "the last line, written as the container stopped\n")
	// Every line is stored from the follow stream before the container stops.
	waitFor(t, "every line stored", func() bool {
		segs, _ := r.recs.Segments(t.Context(), r.ref.PodUID, r.ref.Container, r.ref.Run)
		return len(segs) > 0 && segs[len(segs)-1].TotalBytes == int64(r.want.Len())
	})
	mu.Lock()
	finished = time.Now().Truncate(time.Second)
	mu.Unlock()
	node.mu.Lock()
	node.stopped, node.removed = true, true // collected before the capture sees the run over
	node.mu.Unlock()
	r.node.breakStreams() // the node ends the follow cleanly at the end of the file
	mu.Lock()
	over = true
	mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.check(t)
}

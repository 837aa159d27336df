package capture

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// stopStatus is a container's status as the archiver reads it in the stop tests: its last run,
// started in the second before the capture began (a status has whole seconds), over once the
// test says so.
type stopStatus struct {
	mu                sync.Mutex
	over              bool
	reads             int
	started, finished time.Time
}

func (s *stopStatus) end(context.Context) (End, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return End{Over: s.over, Final: true, StartedAt: s.started, FinishedAt: s.finished}, nil
}

func (s *stopStatus) read() int { s.mu.Lock(); defer s.mu.Unlock(); return s.reads }

// ended has the status show the run over, finished now.
func (s *stopStatus) ended() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.over, s.finished = true, time.Now().Truncate(time.Second)
}

// followUntilStored starts a capture on a stopping node whose container wrote 20 lines, and waits
// until the follow stream has stored them all. It returns the capture's result.
func followUntilStored(t *testing.T, r *rig, node *stoppingNode, status *stopStatus) chan error {
	t.Helper()
	status.started = time.Now().Add(-time.Second).Truncate(time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := Capture(t.Context(), r.cfg, node, r.recs, r.store, r.segKey, r.ref, status.end, nil)
		done <- err
	}()
	for i := range 20 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d\n", i))
	}
	waitFor(t, "every line stored", func() bool {
		segs, _ := r.recs.Segments(t.Context(), r.ref.PodUID, r.ref.Container, r.ref.Run)
		return len(segs) > 0 && segs[len(segs)-1].TotalBytes == int64(r.want.Len())
	})
	return done
}

// collect has the node stop the container and remove its logs: every read is refused after.
func (s *stoppingNode) collect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped, s.removed = true, true
}

// TestCaptureTakesAFollowAcrossTheStopAsTheRead: a follow stream open while the container ran,
// which the node ended cleanly when the container stopped, read the run to its end (the node's
// reader ends a follow only once it sees the container stopped, and reads the file to its end
// first). The logs are collected before the capture sees the run over, as a kubelet does 0.4 to
// 0.8 s after a deleted pod's containers stop, and as happens to most of a thousand pods deleted
// at once (BenchmarkFollow1000): the capture needs no further read, and records no gap.
func TestCaptureTakesAFollowAcrossTheStopAsTheRead(t *testing.T) {
	r := newRig(t)
	node, status := &stoppingNode{fakeNode: r.node}, &stopStatus{}
	done := followUntilStored(t, r, node, status)
	r.writeAt(r.t0.Add(time.Second), "the last line, written as the container stopped\n")
	waitFor(t, "the last line stored", func() bool {
		segs, _ := r.recs.Segments(t.Context(), r.ref.PodUID, r.ref.Container, r.ref.Run)
		return segs[len(segs)-1].TotalBytes == int64(r.want.Len())
	})
	node.collect()
	r.node.breakStreams() // the node ends the follow cleanly at the end of the file
	status.ended()
	if err := <-done; err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.check(t)
}

// TestCaptureDrainsTheFollowOfAnEndedRun: the status shows the run ended while its follow stream
// is still open, the node's reader yet to read the rest of the file and see the container
// stopped (it looks every second), and the logs are collected: every further read is refused, but
// the open stream reads on (the reader holds the file open). The capture reads that stream to its
// clean end, with the run's last line, rather than leave it for a read the node refuses (before:
// ended the stream at the status and recorded the rest as collected).
func TestCaptureDrainsTheFollowOfAnEndedRun(t *testing.T) {
	r := newRig(t)
	node, status := &stoppingNode{fakeNode: r.node}, &stopStatus{}
	done := followUntilStored(t, r, node, status)
	node.collect()
	status.ended()
	n := status.read()
	waitFor(t, "the status read as ended", func() bool { return status.read() > n+1 })
	// The node's reader reads the rest of the file and ends the stream.
	r.writeAt(r.t0.Add(time.Second), "the last line, written as the container stopped\n")
	r.node.breakStreams()
	if err := <-done; err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.check(t)
}

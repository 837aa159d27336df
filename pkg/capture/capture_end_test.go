package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// stoppingNode is the fake node as a real kubelet is once the container stopped: a follow stream
// ends at the end of the file, and once the container is removed (seconds after a deleted pod's
// containers stop) every read is refused.
type stoppingNode struct {
	*fakeNode
	mu        sync.Mutex
	stopped   bool
	removed   bool
	followsAt []time.Time // when each follow stream was opened after the stop
}

// stop stops the container: its follow streams end at the end of the file from now on.
func (s *stoppingNode) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.breakStreams()
}

// remove removes the container, and its logs with it.
func (s *stoppingNode) remove() {
	s.mu.Lock()
	s.removed = true
	s.mu.Unlock()
}

func (s *stoppingNode) Open(ctx context.Context, ref Ref, opts OpenOptions) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return nil, errors.New(`unable to retrieve container logs for containerd://0b99`)
	}
	if s.stopped && opts.Follow {
		s.followsAt = append(s.followsAt, time.Now())
		opts.Follow = false
	}
	return s.fakeNode.Open(ctx, ref, opts)
}

// TestCaptureTakesAFollowAfterTheEndAsTheRead: a follow stream opened after the container finished,
// which the node ended cleanly at the end of the file, read all of it: the capture does not depend
// on one more read, which a kubelet refuses once it removed the container.
func TestCaptureTakesAFollowAfterTheEndAsTheRead(t *testing.T) {
	r := newRig(t)
	node := &stoppingNode{fakeNode: r.node}
	var (
		mu       sync.Mutex
		over     bool
		finished time.Time
	)
	end := func(context.Context) (End, error) {
		mu.Lock()
		defer mu.Unlock()
		return End{Over: over, FinishedAt: finished}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := Capture(t.Context(), r.cfg, node, r.recs, r.store, r.segKey, r.ref, end, nil)
		done <- err
	}()
	for i := range 20 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d\n", i))
	}
	r.waitOpens(t, "followed", 1)
	r.writeAt(r.t0.Add(time.Second), "the last line, written as the container stopped\n")
	stop := time.Now()
	mu.Lock()
	finished = stop.Truncate(time.Second) // a status has whole seconds
	mu.Unlock()
	node.stop()
	// Two follows opened a second after the finish: the first ended, and was taken, before the
	// second opened.
	waitFor(t, "two follow streams opened a second after the finish", func() bool {
		node.mu.Lock()
		defer node.mu.Unlock()
		n := 0
		for _, at := range node.followsAt {
			if at.After(finished.Add(time.Second)) {
				n++
			}
		}
		return n >= 2
	})
	node.remove()
	mu.Lock()
	over = true
	mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.check(t)
}

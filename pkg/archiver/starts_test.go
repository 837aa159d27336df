package archiver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
)

// batchRecords answers StartRuns, recording each call's runs; block, while open, holds the calls.
type batchRecords struct {
	Records
	mu      sync.Mutex
	batches [][]string
	block   chan struct{}
	fail    bool
}

func (b *batchRecords) StartRuns(_ context.Context, runs []db.RunToStart, _ time.Duration) ([]db.RunStart, error) {
	b.mu.Lock()
	var names []string
	out := make([]db.RunStart, len(runs))
	for i, r := range runs {
		names = append(names, r.Pod)
		out[i] = db.RunStart{Owner: r.Pod}        // tells which run an answer is for
		if strings.HasSuffix(r.Pod, "-resumed") { // a run with a segment stored already
			out[i].Segments = []record.Segment{{PodUID: r.PodUID, ObjectKey: "segment"}}
		}
	}
	b.batches = append(b.batches, names)
	block, fail := b.block, b.fail
	b.mu.Unlock()
	if block != nil {
		<-block
	}
	if fail {
		return nil, errors.New("database down")
	}
	return out, nil
}

func (b *batchRecords) calls() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.batches
}

func newStart(pod string) *startedRun {
	return &startedRun{run: db.RunToStart{RunClaim: db.RunClaim{Pod: pod}}, done: make(chan struct{})}
}

// TestJobStartsGoTogether: the starts of a job's runs that come while one of its transactions
// runs wait, and go together in the next one, run by the first of them; another job's start does
// not wait for them. Each gets its own run's answer.
func TestJobStartsGoTogether(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			recs := &batchRecords{block: make(chan struct{}), fail: fail}
			r := &PodReconciler{Deps: Deps{Records: recs}}
			ctx := t.Context()
			var wg sync.WaitGroup
			start := func(job string, s *startedRun, siblings ...*startedRun) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.startWithJob(ctx, job, s, func() []*startedRun { return siblings })
				}()
			}
			first, sibling := newStart("a-0"), newStart("a-sibling")
			start("a", first, sibling)
			waitFor(t, func() bool { return len(recs.calls()) == 1 })
			queued := []*startedRun{newStart("a-1"), newStart("a-2"), newStart("a-3")}
			for _, s := range queued {
				start("a", s)
			}
			waitFor(t, func() bool { r.starts.mu.Lock(); defer r.starts.mu.Unlock(); return len(r.starts.queued["a"]) == 3 })
			other := newStart("b-0")
			start("b", other) // not held back by job a's: a transaction of its own, now
			waitFor(t, func() bool { return len(recs.calls()) == 2 })
			close(recs.block)
			wg.Wait()
			<-sibling.done

			calls := recs.calls()
			for _, c := range calls {
				slices.Sort(c) // the queued come in any order
			}
			got := fmt.Sprint(calls)
			if want := "[[a-0 a-sibling] [b-0] [a-1 a-2 a-3]]"; got != want {
				t.Errorf("StartRuns calls %s, want %s", got, want)
			}
			for _, s := range append([]*startedRun{first, sibling, other}, queued...) {
				switch {
				case s.ok == fail:
					t.Errorf("start of %s: ok %v with the database failing %v", s.run.Pod, s.ok, fail)
				case s.ok && s.start.Owner != s.run.Pod:
					t.Errorf("start of %s got the answer for %s", s.run.Pod, s.start.Owner)
				}
			}
			if n := len(r.starts.queued); n != 0 {
				t.Errorf("%d jobs left queued, want none", n)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// TestQueuedStartLeavesWhenStopped: a capture stopped while its start waits behind its job's
// transaction (preempted for another tenant, its job sealed) leaves the queue at once, unread, and
// the job's next transaction goes on without it.
func TestQueuedStartLeavesWhenStopped(t *testing.T) {
	recs := &batchRecords{block: make(chan struct{})}
	r := &PodReconciler{Deps: Deps{Records: recs}}
	first := newStart("a-0")
	go r.startWithJob(t.Context(), "a", first, func() []*startedRun { return nil })
	waitFor(t, func() bool { return len(recs.calls()) == 1 })

	stopped, later := newStart("a-stopped"), newStart("a-later")
	ctx, stop := context.WithCancel(t.Context())
	left := make(chan struct{})
	go func() { r.startWithJob(ctx, "a", stopped, nil); close(left) }()
	waitFor(t, func() bool { r.starts.mu.Lock(); defer r.starts.mu.Unlock(); return len(r.starts.queued["a"]) == 1 })
	done := make(chan struct{})
	go func() { r.startWithJob(t.Context(), "a", later, nil); close(done) }()
	waitFor(t, func() bool { r.starts.mu.Lock(); defer r.starts.mu.Unlock(); return len(r.starts.queued["a"]) == 2 })
	stop()
	select {
	case <-left:
	case <-time.After(5 * time.Second):
		t.Fatal("a stopped capture's start still waits for its job's transaction")
	}
	if stopped.ok {
		t.Error("the stopped start was read")
	}
	close(recs.block)
	<-done
	if got, want := fmt.Sprint(recs.calls()), "[[a-0] [a-later]]"; got != want {
		t.Errorf("StartRuns calls %s, want %s", got, want)
	}
	if !later.ok {
		t.Error("the start queued after the stopped one was not read")
	}
}

// TestSiblingKeepsOnlyASmallStart: a sibling's start waits with its capture for a slot, so it is
// kept only when it holds nothing of the run's size; a sibling whose run has segments stored
// reads its own start when its capture runs. The caller's own start is kept either way.
func TestSiblingKeepsOnlyASmallStart(t *testing.T) {
	recs := &batchRecords{}
	r := &PodReconciler{Deps: Deps{Records: recs}}
	self, fresh, resumed := newStart("a-0-resumed"), newStart("a-1"), newStart("a-2-resumed")
	fresh.sibling, resumed.sibling = true, true
	r.startWithJob(t.Context(), "a", self, func() []*startedRun { return []*startedRun{fresh, resumed} })
	<-fresh.done
	<-resumed.done
	if !self.ok || len(self.start.Segments) != 1 {
		t.Errorf("own start ok %v with %d segments, want kept with its 1", self.ok, len(self.start.Segments))
	}
	if !fresh.ok {
		t.Error("a sibling with nothing stored was not given its start")
	}
	if resumed.ok || len(resumed.start.Segments) != 0 {
		t.Errorf("a sibling with segments stored was given its start (ok %v, %d segments held): it may wait long for a slot", resumed.ok, len(resumed.start.Segments))
	}
}

package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// TestCaptureKeepsWhatItReadOfALostRun: a crash loop faster than the capture: the run's lines
// reached the capture through its follow stream, then the container restarted twice before the
// run was read to its end (the node keeps only the last dead run's log). The lines read are kept
// (stored, the rest a gap), never thrown away.
func TestCaptureKeepsWhatItReadOfALostRun(t *testing.T) {
	r := newRig(t)
	r.cfg.SegmentBytes, r.cfg.SegmentAge = 1<<20, time.Hour // what was read is in memory only
	var mu sync.Mutex
	read := 0
	r.cfg.ObserveLag = func(time.Duration) { mu.Lock(); read++; mu.Unlock() }
	lost := false
	over := func(context.Context) (End, error) {
		r.node.mu.Lock()
		defer r.node.mu.Unlock()
		if lost {
			return End{Over: true, Lost: record.GapRestarted}, nil
		}
		return End{}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := Capture(t.Context(), r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, over, nil)
		done <- err
	}()
	for i := range 5 {
		r.write(fmt.Sprintf("run 0 line %d\n", i), false)
	}
	waitFor(t, "read", func() bool { mu.Lock(); defer mu.Unlock(); return read == 5 })
	r.node.mu.Lock()
	lost = true
	r.node.mu.Unlock()
	var le *LostError
	if err := <-done; !errors.As(err, &le) {
		t.Fatalf("Capture: %v, want a LostError", err)
	}
	r.check(t)
}

// twoRuns is a node whose log, read as the run's, holds the next run's lines as well: a read
// issued on a status that was stale (the container restarted again in between).
type twoRuns struct{ t0 time.Time }

func (n twoRuns) Open(context.Context, Ref, OpenOptions) (io.ReadCloser, error) {
	var b strings.Builder
	for i := range 3 {
		fmt.Fprintf(&b, "%s run 1 line %d\n", n.t0.Add(time.Duration(2*i)*time.Second).Format(time.RFC3339Nano), i)
	}
	return io.NopCloser(strings.NewReader(b.String())), nil
}

// TestCaptureRefusesLinesOfAnotherRun: a run that finished at t0+0.5 s, read with previous=true
// after the container restarted again, is served the next run's lines (t0+2 s and later): they are
// not stored as this run's; a gap says the run's log was not read.
func TestCaptureRefusesLinesOfAnotherRun(t *testing.T) {
	r := newRig(t)
	n := twoRuns{t0: r.t0}
	over := func(context.Context) (End, error) {
		return End{Over: true, Previous: true, StartedAt: r.t0.Add(-time.Minute), FinishedAt: r.t0.Add(500 * time.Millisecond)}, nil
	}
	if _, err := Capture(t.Context(), r.cfg, n, r.recs, r.store, r.segKey, r.ref, over, nil); err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.want.WriteString("run 1 line 0\n")
	r.check(t)
	if len(r.recs.gaps) != 1 || r.recs.gaps[0].Reason != record.GapOtherRun {
		t.Errorf("gaps %+v, want one: %q", r.recs.gaps, record.GapOtherRun)
	}
}

// crashLoopNode serves a run's first follow stream run 0's two lines, ended as run 0 stops; every
// stream after it is served run 1 (the status the capture reopens from is stale), stamped half a
// second after run 0's lines, and stays open; a previous read, run 0 again.
type crashLoopNode struct {
	mu    sync.Mutex
	opens int
	t0    time.Time
}

func (n *crashLoopNode) Open(ctx context.Context, _ Ref, opts OpenOptions) (io.ReadCloser, error) {
	n.mu.Lock()
	n.opens++
	first := n.opens == 1
	n.mu.Unlock()
	if first || opts.Previous { // with previous: run 0, the container's previous run now
		return io.NopCloser(strings.NewReader(n.t0.Format(time.RFC3339Nano) + " run 0 line 0\n" +
			n.t0.Add(time.Millisecond).Format(time.RFC3339Nano) + " run 0 line 1\n")), nil
	}
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, n.t0.Add(500*time.Millisecond).Format(time.RFC3339Nano)+" run 1 line 0\n")
		<-ctx.Done()
		pw.CloseWithError(ctx.Err())
	}()
	return pr, nil
}

// TestCaptureNeverStoresTheNextRunFromAStaleFollow (issue 23, item 5b, and the review's probes): a
// container crash-loops faster than its status. The run's own follow stream gives its lines and
// ends as it stops; the stream reopened from the stale status is served the next run. Whatever
// forces a segment out meanwhile (here its size), the next run's line is held until the status
// places it (after the run's finish second: another run's) and never stored as the run's; the run's
// own lines, read before, are kept, with an another-run gap.
func TestCaptureNeverStoresTheNextRunFromAStaleFollow(t *testing.T) {
	r := newRig(t)
	r.t0 = time.Now().Truncate(time.Second).Add(-3 * time.Second)
	r.cfg.SegmentBytes, r.cfg.SegmentAge, r.cfg.Settle = 20, time.Hour, time.Second
	n := &crashLoopNode{t0: r.t0}
	polls := 0
	over := func(context.Context) (End, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.opens < 2 {
			return End{StartedAt: r.t0, ContainerID: "c0"}, nil
		}
		if polls++; polls < 5 {
			return End{StartedAt: r.t0, ContainerID: "c0"}, nil // stale a while: the next run's line arrives
		}
		// Run 0 finished in t0's second, run 1 started at once.
		return End{Over: true, Previous: true, StartedAt: r.t0, FinishedAt: r.t0, ContainerID: "c0", Limit: r.t0}, nil
	}
	if _, err := Capture(t.Context(), r.cfg, n, r.recs, r.store, r.segKey, r.ref, over, nil); err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.want.WriteString("run 0 line 0\nrun 0 line 1\n")
	r.check(t)
	if len(r.recs.gaps) != 1 || r.recs.gaps[0].Reason != record.GapOtherRun {
		t.Errorf("gaps %+v, want one: %q", r.recs.gaps, record.GapOtherRun)
	}
}

// runsNode serves the container's runs by number, run k's lines stamped from t0 + k s: the
// current one, or with previous the one before.
type runsNode struct {
	mu      sync.Mutex
	runs    [][]string
	current int
	opens   int
	t0      time.Time
}

func (n *runsNode) Open(_ context.Context, _ Ref, opts OpenOptions) (io.ReadCloser, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opens++
	run := n.current
	if opts.Previous {
		run--
	}
	var b strings.Builder
	for i, l := range n.runs[run] {
		fmt.Fprintf(&b, "%s %s", n.t0.Add(time.Duration(run)*time.Second+time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), l)
	}
	return io.NopCloser(strings.NewReader(b.String())), nil
}

// TestCapturePreemptedNeverStoresAnotherRunsRead (from the review's probes): the run terminated,
// and its read, issued on a status that did not show the restart yet, is served the next run.
// The capture is then stopped for another namespace: what it stores on the way out is never that
// read's lines. Run again once the status shows the restart, it reads the run from its own
// container (previous) and stores its lines.
func TestCapturePreemptedNeverStoresAnotherRunsRead(t *testing.T) {
	r := newRig(t)
	r.cfg.Settle = time.Hour
	n := &runsNode{runs: [][]string{{"run 0 line 0\n", "run 0 line 1\n"}, {"run 1 line 0\n"}}, current: 1, t0: r.t0}
	stale := func(context.Context) (End, error) {
		return End{Terminated: true, ContainerID: "c0", StartedAt: r.t0, FinishedAt: r.t0.Add(500 * time.Millisecond), Limit: r.t0}, nil
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error, 1)
	go func() { _, err := Capture(ctx, r.cfg, n, r.recs, r.store, r.segKey, r.ref, stale, nil); done <- err }()
	waitFor(t, "read", func() bool { n.mu.Lock(); defer n.mu.Unlock(); return n.opens == 1 })
	cancel(ErrPreempted)
	<-done
	if s := r.segments(); s != 0 {
		t.Errorf("%d segments stored when stopped, want none: the read held was the next run's", s)
	}
	next := time.Now().Truncate(time.Second).Add(-time.Second)
	fresh := func(context.Context) (End, error) {
		return End{Over: true, Previous: true, ContainerID: "c0", StartedAt: r.t0, FinishedAt: r.t0.Add(500 * time.Millisecond), Limit: next.Add(-time.Second)}, nil
	}
	if _, err := Capture(t.Context(), r.cfg, n, r.recs, r.store, r.segKey, r.ref, fresh, nil); err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.want.WriteString("run 0 line 0\nrun 0 line 1\n")
	r.check(t)
}

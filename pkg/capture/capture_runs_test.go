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

package capture

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/jobvault/jobvault/pkg/record"
)

// TestCaptureMarksAnUnprovenStart: a run starts writing fast at its start; its capture opens only
// later (the status said Running late, the archiver was down, the capture queued), after the node
// rotated the first file away. The first line read is not the run's first: an "unknown start" gap
// is recorded before it, also when the run's burst in the current file was followed by a pause
// (which dilutes its average rate). A burst rotated away whole before a quiet start leaves no
// trace that pods/log can show: only the node agent sees it. A run whose capture
// opened before it could have filled half a rotation file at the rate it writes gets none.
func TestCaptureMarksAnUnprovenStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rotated bool // lines written and rotated away before the capture opened
		// burst: the current file's lines came in one burst, then one more line after a pause.
		burst bool
		gap   bool
	}{
		{name: "rotated before the capture opened", rotated: true, gap: true},
		{name: "opened at the start"},
		{name: "a burst in the current file, then quiet", rotated: true, burst: true, gap: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.cfg.NodeLogMaxSize = 4000
			started := time.Now().UTC().Truncate(time.Second).Add(-4 * time.Second) // whole seconds, as the API has it
			r.t0 = started.Add(10 * time.Millisecond)                               // the run's first line
			if tc.rotated {
				for i := range 120 { // 40 bytes each in the file, in 0.3 s
					r.node.write(r.t0.Add(time.Duration(i)*2500*time.Microsecond), fmt.Sprintf("early %03d\n", i))
				}
				r.node.rotate()
				r.t0 = r.t0.Add(300 * time.Millisecond)
			}
			switch {
			case tc.burst:
				for i := range 20 {
					r.writeAt(r.t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("kept %03d\n", i))
				}
				r.writeAt(r.t0.Add(1500*time.Millisecond), "kept after a pause\n")
			default:
				for i := range 20 {
					r.writeAt(r.t0.Add(time.Duration(i)*2500*time.Microsecond), fmt.Sprintf("kept %03d\n", i))
				}
			}
			over := r.started(started, false)
			done := r.run(t.Context(), over)
			time.Sleep(100 * time.Millisecond)
			r.end(t, done)
			r.check(t)
			unknown := r.unknownStarts()
			if got := len(unknown) == 1 && unknown[0].After.IsZero() && unknown[0].Before.Equal(r.t0); got != tc.gap || len(unknown) > 1 {
				t.Errorf("gaps %+v, want an %q gap before the first line read (%s): %v", r.recs.gaps, record.GapUnknownStart, r.t0, tc.gap)
			}
		})
	}
}

// TestCaptureJudgesALateStreamWithNothingBefore: the node's file holds no line written before the
// stream opened. For a stream answered long after the run's start second, that does not show the
// run wrote nothing before: the node may have rotated the file while the request was on its way
// (before: taken as the run's first line, and its first seconds were lost with no gap). The rate
// of the lines read after judges it. A stream opened for the run's start takes its file as the
// run's first, whatever the rate.
func TestCaptureJudgesALateStreamWithNothingBefore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		late    bool          // the run started 6 s before the stream opened, not as it opened
		rotated bool          // lines written and rotated away before the capture opened
		every   time.Duration // between the lines read, of about 50 bytes each in the node's file
		gap     bool
	}{
		// 20 kB/s: a 20 kB rotation file in a second.
		{name: "late, just after a rotation", late: true, rotated: true, every: 2500 * time.Microsecond, gap: true},
		{name: "late, a fast writer", late: true, every: 2500 * time.Microsecond, gap: true},
		// 500 bytes/s at its peak (one line in the first 100 ms): twice that is 6 kB in 6 s.
		{name: "late, a slow writer", late: true, every: 400 * time.Millisecond},
		{name: "opened for the run's start, a fast writer", every: 2500 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.cfg.NodeLogMaxSize = 20000
			started := time.Now().UTC().Truncate(time.Second) // whole seconds, as the API has it
			if tc.late {
				started = started.Add(-6 * time.Second)
			}
			if tc.rotated {
				for i := range 120 {
					r.node.write(started.Add(time.Duration(i)*10*time.Millisecond), fmt.Sprintf("early %03d\n", i))
				}
				r.node.rotate()
			}
			over := r.started(started, false)
			done := r.run(t.Context(), over)
			r.waitOpens(t, "the stream opened", 1)
			first := time.Now().Add(time.Millisecond).Round(0) // after the open; no monotonic reading
			for i := range 20 {
				r.writeAt(first.Add(time.Duration(i)*tc.every), fmt.Sprintf("kept %02d\n", i))
			}
			time.Sleep(100 * time.Millisecond)
			r.end(t, done)
			r.check(t)
			unknown := r.unknownStarts()
			if got := len(unknown) == 1 && unknown[0].After.IsZero() && unknown[0].Before.Equal(first); got != tc.gap || len(unknown) > 1 {
				t.Errorf("gaps %+v, want an %q gap before the first line read (%s): %v", r.recs.gaps, record.GapUnknownStart, first, tc.gap)
			}
		})
	}
}

// TestCaptureJudgesALateStreamPastItsOpen: a late stream's file holds a line or two written just
// before it opened (the node rotated the file just before the request, not while it was on its
// way), or the node's clock runs ahead of the archiver's (its stamps and the run's start are
// later than the archiver's clock says). Either way the rotated output gets its gap: a late
// stream is judged by every line it reads, and its lateness on the node's clock (before: judged at
// its first line after the open, by the one or two lines before it, and no gap).
func TestCaptureJudgesALateStreamPastItsOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before int           // lines stamped just before the open
		ahead  time.Duration // the node's clock ahead of the archiver's
	}{
		{name: "nothing before the open"},
		{name: "two lines just before the open", before: 2},
		{name: "the node's clock 3 s ahead", before: 20, ahead: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.cfg.NodeLogMaxSize = 20000
			now := time.Now().Round(0) // no monotonic reading: compared with timestamps read back
			started := now.Add(tc.ahead - 6*time.Second).UTC().Truncate(time.Second)
			for i := range 500 { // 25 kB rotated away
				r.node.write(started.Add(time.Duration(i)*10*time.Millisecond), fmt.Sprintf("early %03d\n", i))
			}
			r.node.rotate()
			for i := range tc.before {
				r.writeAt(now.Add(tc.ahead-time.Duration(tc.before-i)*2500*time.Microsecond), fmt.Sprintf("just before %02d\n", i))
			}
			over := r.started(started, false)
			done := r.run(t.Context(), over)
			r.waitOpens(t, "the stream opened", 1)
			after := time.Now().Add(tc.ahead + time.Millisecond).Round(0)
			for i := range 20 { // 20 kB/s
				r.writeAt(after.Add(time.Duration(i)*2500*time.Microsecond), fmt.Sprintf("kept %02d\n", i))
			}
			time.Sleep(100 * time.Millisecond)
			r.end(t, done)
			r.check(t)
			unknown := r.unknownStarts()
			if len(unknown) != 1 || !unknown[0].After.IsZero() {
				t.Errorf("gaps %+v: 25 kB were rotated away before the open, want one %q gap before the first line read", r.recs.gaps, record.GapUnknownStart)
			}
		})
	}
}

// TestCaptureQuietMarkOutlivesAPreemption: a run's capture, opened in time, follows it quietly for
// 4 s; the Manager then stops it to give its slot to another namespace, and starts it again once
// the slot is free. The new stream, answered more than timelyOpen after the run's start second, is
// not late: the run was followed, and wrote nothing, until the stop (before: its first output got
// an "unknown start" gap it did not need). A stream reset is the same within one capture.
func TestCaptureQuietMarkOutlivesAPreemption(t *testing.T) {
	r := newRig(t)
	r.cfg.NodeLogMaxSize = 20000
	m := newManagerRig(t, 2).m
	started := time.Now().UTC().Truncate(time.Second)
	over := r.started(started, false)
	quiet, done := r.ensureCapture(t, m, "a", "a/quiet", r.node, over)
	hold := func(ns, key string, release <-chan struct{}) {
		t.Helper()
		if !m.Ensure(key, types.NamespacedName{Namespace: ns, Name: key}, false, func(ctx context.Context) {
			select {
			case <-ctx.Done():
			case <-release:
			}
		}) {
			t.Fatal("Ensure = false on a started manager")
		}
	}
	other := make(chan struct{})
	hold("a", "a/other", other) // namespace a holds both slots, the quiet capture the newer
	quiet()
	r.waitOpens(t, "the stream opened", 1)
	time.Sleep(time.Until(started.Add(4500 * time.Millisecond))) // followed, quiet
	b := make(chan struct{})
	hold("b", "b/one", b) // b waits below its share: a's newest capture gives its slot up
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the stopped capture returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the quiet capture was not stopped for namespace b")
	}
	close(b)
	time.Sleep(200 * time.Millisecond) // a later start: its stream is answered past timelyOpen
	quiet()
	r.waitOpens(t, "the stream opened again", 2)
	first := time.Now().Add(time.Millisecond).Round(0)
	for i := range 20 { // 20 kB/s: a rotation file in a second
		r.writeAt(first.Add(time.Duration(i)*2500*time.Microsecond), fmt.Sprintf("kept %02d\n", i))
	}
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	close(other)
	r.check(t)
	for _, g := range r.unknownStarts() {
		t.Errorf("gap %+v for a run followed, quiet, until its capture was stopped", g)
	}
}

// TestCaptureFollowedQuietRunResetIsNotLate: a capture follows its run from its start second; the
// run writes nothing for 4.5 s, the stream is reset (an API server restart, say) and reopened,
// then the run writes fast. Nothing was lost: no gap (before the quiet mark: "unknown start").
func TestCaptureFollowedQuietRunResetIsNotLate(t *testing.T) {
	r := newRig(t)
	r.cfg.NodeLogMaxSize = 20000
	started := time.Now().UTC().Truncate(time.Second)
	over := r.started(started, false)
	done := r.run(t.Context(), over)
	r.waitOpens(t, "the stream opened", 1)
	time.Sleep(time.Until(started.Add(4500 * time.Millisecond)))
	r.node.breakStreams()
	r.waitOpens(t, "the stream reopened", 2)
	first := time.Now().Add(time.Millisecond).Round(0)
	for i := range 20 {
		r.writeAt(first.Add(time.Duration(i)*2500*time.Microsecond), fmt.Sprintf("kept %02d\n", i))
	}
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	r.check(t)
	for _, g := range r.unknownStarts() {
		t.Errorf("gap %+v for a run followed, quiet, until its stream was reset", g)
	}
}

// TestCaptureQuietMarkWaitsForHeldLines: a stream opened in time finds the run's first file
// rotated away; the current file's lines, written fast before the open, show it. When the run may
// restart, those lines wait for the next status before they count (bind.go): the quiet mark must
// not pass them meanwhile (before: it did, the window went negative, and no gap was recorded).
func TestCaptureQuietMarkWaitsForHeldLines(t *testing.T) {
	for _, final := range []bool{true, false} {
		t.Run(fmt.Sprintf("final=%v", final), func(t *testing.T) {
			r := newRig(t)
			r.cfg.NodeLogMaxSize = 4000
			started := time.Now().UTC().Truncate(time.Second).Add(-time.Second) // opened 1-2 s in: in time
			r.t0 = started.Add(10 * time.Millisecond)
			for i := range 120 {
				r.node.write(r.t0.Add(time.Duration(i)*2500*time.Microsecond), fmt.Sprintf("early %03d\n", i))
			}
			r.node.rotate()
			r.t0 = r.t0.Add(300 * time.Millisecond)
			for i := range 20 {
				r.writeAt(r.t0.Add(time.Duration(i)*2500*time.Microsecond), fmt.Sprintf("kept %03d\n", i))
			}
			over := r.started(started, final)
			done := r.run(t.Context(), over)
			time.Sleep(100 * time.Millisecond)
			r.end(t, done)
			r.check(t)
			if len(r.unknownStarts()) != 1 {
				t.Errorf("gaps %+v: want one %q gap", r.recs.gaps, record.GapUnknownStart)
			}
		})
	}
}

// started is the status of a run started at started (whole seconds, as the API has it), over once
// the rig's node says so.
func (r *rig) started(started time.Time, final bool) func(context.Context) (End, error) {
	return func(context.Context) (End, error) {
		r.node.mu.Lock()
		defer r.node.mu.Unlock()
		return End{Over: r.node.over, StartedAt: started, Final: final}, nil
	}
}

// unknownStarts are the "unknown start" gaps recorded.
func (r *rig) unknownStarts() []record.Gap {
	r.recs.mu.Lock()
	defer r.recs.mu.Unlock()
	var u []record.Gap
	for _, g := range r.recs.gaps {
		if g.Reason == record.GapUnknownStart {
			u = append(u, g)
		}
	}
	return u
}

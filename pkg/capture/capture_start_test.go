package capture

import (
	"context"
	"fmt"
	"testing"
	"time"

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
			over := func(context.Context) (End, error) {
				r.node.mu.Lock()
				defer r.node.mu.Unlock()
				return End{Over: r.node.over, StartedAt: started}, nil
			}
			done := make(chan error, 1)
			go func() {
				_, err := Capture(t.Context(), r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, over, nil)
				done <- err
			}()
			time.Sleep(100 * time.Millisecond)
			r.end(t, done)
			r.check(t)
			var unknown []record.Gap
			for _, g := range r.recs.gaps {
				if g.Reason == record.GapUnknownStart {
					unknown = append(unknown, g)
				}
			}
			if got := len(unknown) == 1 && unknown[0].After.IsZero() && unknown[0].Before.Equal(r.t0); got != tc.gap || len(unknown) > 1 {
				t.Errorf("gaps %+v, want an %q gap before the first line read (%s): %v", r.recs.gaps, record.GapUnknownStart, r.t0, tc.gap)
			}
		})
	}
}

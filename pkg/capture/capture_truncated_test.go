package capture

import (
	"context"
	"testing"

	"github.com/jobvault/jobvault/pkg/record"
)

// TestCaptureMarksARunReadWhileRunning: a run is over only by the archiver's decision (its pod
// passed its termination margin, or its node is lost while its kubelet still serves logs) while
// its status shows it running: what is read is stored, and a gap says the end may be missing; it
// is never taken for complete.
func TestCaptureMarksARunReadWhileRunning(t *testing.T) {
	r := newRig(t)
	r.write("still writing\n", false)
	over := func(context.Context) (End, error) { return End{Over: true, StillRunning: true}, nil }
	if _, err := Capture(t.Context(), r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, over, nil); err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.check(t)
	if len(r.recs.gaps) != 1 || r.recs.gaps[0].Reason != record.GapStillRunning || !r.recs.gaps[0].Before.IsZero() {
		t.Errorf("gaps %+v, want one %q to the end", r.recs.gaps, record.GapStillRunning)
	}
}

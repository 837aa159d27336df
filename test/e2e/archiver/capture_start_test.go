package archiver

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestCaptureMarksALateStartUnknown: the archiver is down while a container starts and writes
// through several rotations of 64 KiB; it comes back while the container runs. Its capture begins
// with the node's current file, whose first line is not the run's first: the archive holds the end
// of what was written, an "start unknown" gap precedes it, and the job is released with that
// reason, never archived (before: archived with its first part missing and no gap).
func TestCaptureMarksALateStartUnknown(t *testing.T) {
	// Not parallel: its follow must keep up with 64 KiB rotations. Beside other tests it fell
	// behind once and recorded 9 "possibly rotated" gaps, honestly, which its suffix check excludes.
	s := stack.NewRig(t, objstore.BackendFS, "--node-log-max-size=65536")
	s.Proc.Stop()
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{MaxSize: 64 << 10, MaxFiles: 2})
	out := stack.SteadyOutput("late", 100, 8<<10)
	job, pod := writingJob(t, s, rt, "late", "12s", out, 100*time.Millisecond)
	waitWritten(t, s, rt, pod, 300<<10) // rotated several times before the capture starts
	s.Start(t)
	j := s.WaitArchived(t, job, 3*time.Minute)
	written := wroteAll(t, s, rt, pod, out)
	got, _ := s.ReadLog(t, logRow(t, s, string(j.UID), "main", record.InstanceCurrent).ObjectKey)
	if !bytes.HasSuffix(written, got) || len(got) >= len(written)-(200<<10) {
		t.Errorf("archived %d of %d bytes written, want the end of them, without the first 200 KiB or more", len(got), len(written))
	}
	var unknown []record.Gap
	for _, g := range s.Gaps(t, string(j.UID)) {
		if g.Reason == record.GapUnknownStart {
			unknown = append(unknown, g)
		}
	}
	if len(unknown) != 1 || !unknown[0].After.IsZero() || unknown[0].Before.IsZero() {
		t.Errorf("gaps %+v, want one %q gap before the first line read", s.Gaps(t, string(j.UID)), record.GapUnknownStart)
	}
	jr, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || jr.ArchiveState != record.ArchiveReleased || !strings.Contains(jr.ReleaseReason, string(record.GapUnknownStart)) {
		t.Errorf("job row %s %q (%v), want released with the unknown start as reason", jr.ArchiveState, jr.ReleaseReason, err)
	}
}

package realnode

import (
	"bytes"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeGCWhileArchiverDown: the archiver is stopped while a job runs; the job and its pod
// are deleted, its container writes a SIGTERM tail and ends, and the kubelet's container GC (every minute)
// removes the deleted pod's containers and logs, finalizer or not. Restarted, the archiver
// cannot read the tail: it records a gap with its reason, and the job is released, never
// archived; what it had captured before is kept, a prefix of what was written.
func TestRealNodeGCWhileArchiverDown(t *testing.T) {
	s, rn := rig(t, "--log-deadline=20s")
	job := testbed.Job(s.NS, "collected").Task("w", 1, []string{"main"}, testbed.GracePeriod(5),
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: 20 << 10, Hold: time.Hour, TermBytes: 10 << 10, TermFor: time.Second}})).Obj()
	name := testbed.PodName(job.Name, "w", 0)
	stack.CreateAs(t, s.Env, "erin", job)
	p := waitWritten(t, s, rn, name, 20<<10)
	uid := string(p.UID)
	// Whatever the follow stream carried before the stop is kept; the rest is the gap.
	s.Proc.Stop()
	// The job is deleted, and its pod with it: the archiver deletes a deleted job's pods (its
	// finalizer holds the job from the garbage collector), but it is down, so the user does.
	if err := s.Env.Client.Delete(t.Context(), stack.GetJob(t, s.Env, job)); err != nil {
		t.Fatal(err)
	}
	if err := s.Env.Client.Delete(t.Context(), &p); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for !rn.Collected(s.NS, name, uid) {
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("the kubelet did not collect the deleted pod's logs within 3 minutes")
		}
		time.Sleep(time.Second)
	}
	t.Logf("the kubelet collected the deleted pod's logs %s after its deletion", time.Since(start).Round(time.Second))
	written := rn.Written(s.NS, uid, "main", 0)
	if !bytes.Contains(written, []byte(" term ")) {
		t.Fatalf("the container wrote no SIGTERM tail (%d bytes)", len(written))
	}
	s.Start(t)
	jobUID := string(p.OwnerReferences[0].UID)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if jr, err := s.Records.Job(t.Context(), jobUID); err == nil && jr.ArchiveState != record.ArchivePending {
			if jr.ArchiveState != record.ArchiveReleased {
				t.Errorf("job row %s, want released: its tail was collected before it was read", jr.ArchiveState)
			}
			t.Logf("job %s: %s", jr.ArchiveState, jr.ReleaseReason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not finalized within 3 minutes of the archiver's restart")
		}
	}
	// The loss is on record: a gap over the tail of a stored log, or the whole log unavailable
	// with its reason.
	g := s.Gaps(t, jobUID)
	for _, gap := range g {
		if gap.Run != 0 || gap.Container != "main" || (gap.Reason != record.GapCollected && gap.Reason != record.GapUnreadable) {
			t.Errorf("gap %+v, want one of run 0 of main, collected or unreadable", gap)
		}
	}
	row, ok := logRows(t, s, jobUID)["main/"+record.InstanceCurrent]
	switch {
	case !ok:
		t.Errorf("no log row for the container")
	case row.State == record.LogStored:
		got, _ := s.ReadLog(t, row.ObjectKey)
		if !bytes.HasPrefix(written, got) || len(got) == len(written) {
			t.Errorf("archived %d bytes, want a strict prefix of the %d written", len(got), len(written))
		}
		if len(g) == 0 {
			t.Errorf("%d of %d bytes archived and no gap recorded for the collected tail", len(got), len(written))
		}
	case row.Reason == "":
		t.Errorf("log row %s without a reason", row.State)
	default:
		t.Logf("log row %s: %s; gaps %+v (the %d bytes followed before the stop are not in the archive)", row.State, row.Reason, g, 20<<10)
	}
}

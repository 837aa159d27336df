package realnode

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// restartOnFailure makes the kubelet restart the task's failed containers in place.
func restartOnFailure(p *corev1.PodTemplateSpec) {
	p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
}

// TestRealNodeCrashLoop: a container fails four times under CrashLoopBackOff, then succeeds. The
// kubelet keeps only the last dead run's log. Every run is archived under its own instance
// (previous-1 … previous-4, then current), byte-exact, or has a recorded gap; no instance holds
// another run's bytes. When a run ends, the kubelet removes the dead container before it
// (--maximum-dead-containers-per-container=1) and its log with it: a previous run's log not read
// by then is gone, and pods/log says "previous terminated container … not found". The log
// deadline is short so that such a run ends as a gap within the test, not after the default 24 h.
func TestRealNodeCrashLoop(t *testing.T) {
	t.Parallel()
	s, rn := rig(t, "--log-deadline=30s")
	const failures = 4
	job := testbed.Job(s.NS, "crashloop").Task("w", 1, []string{"main"}, restartOnFailure,
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: 40 << 10, For: time.Second, Exit: 1, ExitRuns: failures}})).Obj()
	stack.CreateAs(t, s.Env, "erin", job)
	j := s.WaitArchived(t, job, 4*time.Minute)
	uid := podUID(t, s, string(j.UID), testbed.PodName(job.Name, "w", 0))
	if n := rn.Runs(s.NS, uid, "main"); n != failures+1 {
		t.Fatalf("the container ran %d times, want %d", n, failures+1)
	}
	rows := logRows(t, s, string(j.UID))
	gapped := map[int32]record.Gap{}
	for _, g := range s.Gaps(t, string(j.UID)) {
		gapped[g.Run] = g
	}
	for run := int32(0); run <= failures; run++ {
		instance := record.InstanceCurrent
		if run < failures {
			instance = record.PreviousInstance(run + 1)
		}
		row, ok := rows["main/"+instance]
		written := rn.Written(s.NS, uid, "main", run)
		switch {
		case !ok:
			t.Errorf("run %d: no log row %s", run, instance)
		case gapped[run].Reason != "":
			// Whatever was stored must be this run's own lines.
			var got []byte
			if row.State == record.LogStored {
				got, _ = s.ReadLog(t, row.ObjectKey)
			}
			if foreign := foreignLines(got, run); foreign != "" {
				t.Errorf("run %d (%s, gap %q): holds another run's line %q", run, instance, gapped[run].Reason, foreign)
			}
			t.Logf("run %d (%s): %s (%s), gap %q %s; %d of %d bytes stored", run, instance, row.State, row.Reason, gapped[run].Reason, gapped[run].Detail, len(got), len(written))
		default:
			s.CheckLog(t, row, written)
		}
	}
	if len(gapped) > 0 {
		if jr, err := s.Records.Job(t.Context(), string(j.UID)); err != nil || jr.ArchiveState != record.ArchiveReleased {
			t.Errorf("job row %s (%v): with gaps, want released", jr.ArchiveState, err)
		}
	}
}

// foreignLines returns the first line of log that another run than run wrote ("" if none).
func foreignLines(log []byte, run int32) string {
	own := []byte(fmt.Sprintf(" run=%d ", run))
	for _, line := range bytes.SplitAfter(log, []byte("\n")) {
		if len(line) > 0 && !bytes.Contains(line, own) {
			return string(line[:min(len(line), 80)])
		}
	}
	return ""
}

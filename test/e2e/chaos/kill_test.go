package chaos

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Issue 23, item 16: the archiver is killed (SIGKILL, by its test hook JOBVAULT_TEST_KILL_AT)
// between the two steps of a segment's write: after its object is stored and before it is
// recorded, and after it is recorded, before the run is assembled and its job sealed. Restarted,
// it loses nothing (each log is exactly what its container wrote, without a gap), duplicates
// nothing (one row per log, no line twice) and leaves no object behind (no segment, and
// `archiver audit verify` finds nothing extra).
func TestArchiverKilledBetweenSegmentSteps(t *testing.T) {
	for _, point := range []string{"segment-stored", "segment-recorded"} {
		t.Run(point, func(t *testing.T) {
			s := stack.NewRig(t, objstore.BackendFS, "--capture-segment-age=1s", "--cluster-name=testbed")
			s.Proc.Stop()
			s.Environ = append(s.Environ, "JOBVAULT_TEST_KILL_AT="+point+":"+filepath.Join(t.TempDir(), "killed"))
			s.Start(t)
			rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
			names := []string{"c0", "c1"}
			// 5 s of output, a line every 100 ms, in pods that end 7 s after they start.
			job := testbed.Job(s.NS, "killed-"+point).Task("w", 1, names, testbed.RunsFor("7s")).Obj()
			pod := testbed.PodName(job.Name, "w", 0)
			outputs := map[string]testbed.Output{}
			for _, c := range names {
				outputs[c] = testbed.Output{Runs: [][]testbed.Chunk{stack.SteadyOutput(pod+"/"+c, 50, 100)}, Every: 100 * time.Millisecond}
			}
			rt.Run(t, s.NS, pod, outputs)
			stack.CreateAs(t, s.Env, "oscar", job)

			deadline := time.Now().Add(2 * time.Minute)
			for !s.Proc.Exited() {
				if time.Now().After(deadline) {
					t.Fatalf("the archiver did not kill itself at %s within 2 minutes; its log: %s", point, s.Proc.LogPath)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("killed at %s with %d segment objects stored", point, len(segmentKeys(t, s)))
			// Back once the pod ended: its runs are then read at their end, and written whole when
			// nothing of them is recorded, so a segment stored but never recorded is left over.
			for !podSucceeded(t, s, job) {
				if time.Now().After(deadline) {
					t.Fatalf("pod %s not succeeded within 2 minutes", pod)
				}
				time.Sleep(100 * time.Millisecond)
			}
			s.Start(t)
			j := s.WaitArchived(t, job, 3*time.Minute)
			if gaps := s.Gaps(t, string(j.UID)); len(gaps) > 0 {
				t.Errorf("gaps %v, want none: nothing was lost", gaps)
			}
			logs, err := s.Records.LogObjects(t.Context(), string(j.UID))
			if err != nil {
				t.Fatal(err)
			}
			if len(logs) != len(names) {
				t.Errorf("%d log rows, want %d: %v", len(logs), len(names), logs)
			}
			for _, l := range logs {
				want := rt.Written(s.NS, pod, l.Container, 0)
				got, _ := s.ReadLog(t, l.ObjectKey)
				if l.State != record.LogStored || !bytes.Equal(got, want) {
					t.Errorf("log %s (%s): %d bytes archived, want the %d written (%s)", l.Container, l.State, len(got), len(want), firstDiff(got, want))
				}
			}
			if left := segmentKeys(t, s); len(left) > 0 {
				t.Errorf("segment objects left after the job was archived:\n%s", strings.Join(left, "\n"))
			}
			s.AuditVerify(t)
		})
	}
}

// podSucceeded reports whether the job's pods all succeeded.
func podSucceeded(t *testing.T, s *stack.Rig, job *batchv1alpha1.Job) bool {
	pods := jobPods(t, s, job)
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded {
			return false
		}
	}
	return len(pods) > 0
}

// firstDiff says where got and want first differ.
func firstDiff(got, want []byte) string {
	n := 0
	for n < len(got) && n < len(want) && got[n] == want[n] {
		n++
	}
	return fmt.Sprintf("first difference at byte %d: got %.40q, want %.40q", n, got[n:], want[n:])
}

package archiver

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestSealStopsTheCapturesOfItsPods: an operator releases a running job whose containers write on.
// The seal stops every capture of the job's pods, and waits for them, before it seals: after it,
// no capture stores a segment or records a row of the sealed job (audit verify finds nothing:
// no row added to the sealed record, no segment object left beside it), and no segment object
// of the job is deleted under a capture that still writes it.
func TestSealStopsTheCapturesOfItsPods(t *testing.T) {
	// Not parallel: audit verify sets the environment (t.Setenv).
	s := stack.NewRig(t, objstore.BackendS3, "--capture-segment-age=1s")
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	job := testbed.Job(s.NS, "let-go-live").Task("w", 2, []string{"main", "side"}, testbed.RunsFor("1h")).Obj()
	for i := range 2 {
		pod := testbed.PodName(job.Name, "w", i)
		out := testbed.Output{Runs: [][]testbed.Chunk{stack.SteadyOutput(pod, 4000, 512)}, Every: 20 * time.Millisecond}
		rt.Run(t, s.NS, pod, map[string]testbed.Output{"main": out, "side": out})
	}
	stack.CreateAs(t, s.Env, "gina", job)
	j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Running, 2*time.Minute)
	// Captures are under way: segments are being stored.
	deadline := time.Now().Add(time.Minute)
	for len(segmentKeys(t, s)) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("no segments stored within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	patch := client.MergeFrom(j.DeepCopy())
	metav1.SetMetaDataAnnotation(&j.ObjectMeta, tracking.ReleaseAnnotation, "uninstalling")
	if err := s.Env.Client.Patch(t.Context(), j, patch); err != nil {
		t.Fatal(err)
	}
	s.WaitArchived(t, j, time.Minute)
	// The containers write on for a while after the seal: a capture still running would store a
	// segment, or record a row, within its segment age.
	time.Sleep(3 * time.Second)
	if left := segmentKeys(t, s); len(left) > 0 {
		t.Errorf("segment objects beside the sealed job: %v", left)
	}
	s.AuditVerify(t)
}

// segmentKeys are the segment objects in the rig's store.
func segmentKeys(t *testing.T, s *stack.Rig) []string {
	t.Helper()
	var segs []string
	for _, k := range s.Keys(t, "") {
		if strings.Contains(k, ".seg-") {
			segs = append(segs, k)
		}
	}
	return segs
}

package archiver

import (
	"encoding/json"
	"testing"
	"time"

	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// While the VcJob webhook cannot be reached (it fails open), a tenant creates jobs stamped by
// hand: a submitter, groups and an admission time of its choosing. One without the finalizer is
// backstopped by the archiver; the other carries the finalizer too, as the webhook would have
// added it, with an admission time years before its creation. Neither record trusts the
// annotations: the jobs row and job.json say tracking.UnknownSubmitter, with no groups and no
// admission time.
func TestForgedSubmitterWhileWebhookDown(t *testing.T) {
	// Not parallel: it takes the cluster-wide VcJob webhook down.
	s := stack.NewRig(t, objstore.BackendFS)
	forged := map[string]string{tracking.SubmitterAnnotation: "mallory", tracking.SubmitterGroupsAnnotation: `["system:masters"]`,
		tracking.AdmittedAtAnnotation: "2020-01-01T00:00:00Z", tracking.SubmittedForAnnotation: "v1 ConfigMap ceo 1 controller"}
	backstopped := testbed.Job(s.NS, "forged-backstopped").Task("worker", 1, []string{"main"}).Obj()
	finalized := testbed.Job(s.NS, "forged-with-finalizer").Task("worker", 1, []string{"main"}).Obj()
	finalized.Finalizers = []string{tracking.JobFinalizer}
	for _, job := range []*batchv1alpha1.Job{backstopped, finalized} {
		job.Annotations = map[string]string{}
		for k, v := range forged {
			job.Annotations[k] = v
		}
		stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
		stack.CreateWhileJobWebhookDown(t, s.Env, "kim", job)
		if job.Annotations[tracking.SubmitterAnnotation] != "mallory" {
			t.Fatalf("job %s admitted with annotations %v: the webhook was not down", job.Name, job.Annotations)
		}
	}
	for _, job := range []*batchv1alpha1.Job{backstopped, finalized} {
		j := s.WaitArchived(t, job, 2*time.Minute)
		if job == backstopped && j.Annotations[tracking.BackstoppedAtAnnotation] == "" {
			t.Errorf("the backstopped job does not say it was backstopped: %v", j.Annotations)
		}
		row, err := s.Records.Job(t.Context(), string(j.UID))
		if err != nil {
			t.Fatal(err)
		}
		if row.Submitter != tracking.UnknownSubmitter || row.SubmitterGroups != nil || row.AdmittedAt != nil {
			t.Errorf("job %s recorded with submitter %q groups %v admitted at %v, want %q and no groups or time",
				j.Name, row.Submitter, row.SubmitterGroups, row.AdmittedAt, tracking.UnknownSubmitter)
		}
		var stored batchv1alpha1.Job
		if err := json.Unmarshal([]byte(readObject(t, s, "archive/"+j.Namespace+"/"+j.Name+"/"+string(j.UID)+"/job.json")), &stored); err != nil {
			t.Fatal(err)
		}
		for _, k := range tracking.SubmitterAnnotations() {
			want := ""
			if k == tracking.SubmitterAnnotation {
				want = tracking.UnknownSubmitter
			}
			if got := stored.Annotations[k]; got != want {
				t.Errorf("job.json of %s: %s = %q, want %q", j.Name, k, got, want)
			}
		}
	}
}

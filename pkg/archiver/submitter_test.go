package archiver

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// The submitter recorded for a job is the webhook's stamp only where the archiver can tell it is
// the webhook's: the job was not backstopped, it holds (or held) the job finalizer, and its
// admission time is the API server's creation time within tracking.AdmissionSkew. Anywhere else
// the record says tracking.UnknownSubmitter, with no groups, admission time or custody.
func TestRecordedSubmitter(t *testing.T) {
	created := time.Date(2026, 3, 14, 15, 9, 27, 0, time.UTC)
	stamped := func() *batchv1alpha1.Job {
		return &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "uid-1",
			CreationTimestamp: metav1.NewTime(created), Finalizers: []string{tracking.JobFinalizer},
			Annotations: map[string]string{tracking.SubmitterAnnotation: "alice", tracking.SubmitterGroupsAnnotation: `["team-a"]`,
				tracking.AdmittedAtAnnotation: "2026-03-14T15:09:26Z", tracking.SubmittedForAnnotation: "v1 ConfigMap c 1 controller",
				tracking.SubmitterExtras[0].Annotation: "JTI=1", "note": "kept"}}}
	}
	admitted := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	cases := []struct {
		name      string
		change    func(*batchv1alpha1.Job)
		submitter string
		groups    []string
		at        *time.Time
	}{
		{"stamped by the webhook", func(*batchv1alpha1.Job) {}, "alice", []string{"team-a"}, &admitted},
		{"archived: finalizer released", func(j *batchv1alpha1.Job) {
			j.Finalizers = nil
			j.Annotations[tracking.ArchivedAtAnnotation] = "2026-03-14T16:00:00Z"
		}, "alice", []string{"team-a"}, &admitted},
		{"backstopped, with self-stamped annotations", func(j *batchv1alpha1.Job) {
			j.Annotations[tracking.BackstoppedAtAnnotation] = "2026-03-14T15:09:28Z"
		}, tracking.UnknownSubmitter, nil, nil},
		{"not tracked yet (no finalizer)", func(j *batchv1alpha1.Job) { j.Finalizers = nil }, tracking.UnknownSubmitter, nil, nil},
		{"forged admission time, finalizer added by the creator", func(j *batchv1alpha1.Job) {
			j.Annotations[tracking.AdmittedAtAnnotation] = "2020-01-01T00:00:00Z"
		}, tracking.UnknownSubmitter, nil, nil},
		{"admission time after creation by more than the skew", func(j *batchv1alpha1.Job) {
			j.Annotations[tracking.AdmittedAtAnnotation] = created.Add(tracking.AdmissionSkew + time.Second).Format(time.RFC3339)
		}, tracking.UnknownSubmitter, nil, nil},
		{"no admission time", func(j *batchv1alpha1.Job) { delete(j.Annotations, tracking.AdmittedAtAnnotation) }, tracking.UnknownSubmitter, nil, nil},
		{"no submitter", func(j *batchv1alpha1.Job) { delete(j.Annotations, tracking.SubmitterAnnotation) }, tracking.UnknownSubmitter, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := stamped()
			tc.change(job)
			rec := DefaultOptions().recordable(job)
			row, err := jobRow(rec, "c")
			if err != nil {
				t.Fatal(err)
			}
			if row.Submitter != tc.submitter || !cmp.Equal(row.SubmitterGroups, tc.groups) || !cmp.Equal(row.AdmittedAt, tc.at) {
				t.Errorf("recorded submitter %q groups %v admitted at %v, want %q %v %v", row.Submitter, row.SubmitterGroups, row.AdmittedAt, tc.submitter, tc.groups, tc.at)
			}
			// The marker of "kept": its sha256 (pkg/record/redact).
			if rec.Annotations["note"] != "redacted:sha256:79f076abdd19a752db7267bfff2f9022161d120dea919fdaca2ffdfc24ca8c96" {
				t.Errorf("other annotations: %v", rec.Annotations)
			}
			if tc.submitter != tracking.UnknownSubmitter {
				return
			}
			for _, k := range tracking.SubmitterAnnotations() {
				if v, ok := rec.Annotations[k]; ok && !(k == tracking.SubmitterAnnotation && v == tracking.UnknownSubmitter) {
					t.Errorf("recorded job keeps %s=%q, which the webhook cannot be shown to have written", k, v)
				}
			}
			if job.Annotations[tracking.SubmitterAnnotation] == tracking.UnknownSubmitter {
				t.Error("recordable changed the job it was given")
			}
		})
	}
}

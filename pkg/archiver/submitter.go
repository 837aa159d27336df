package archiver

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// unprovedSubmitter replaces, in place, the submitter annotations of a job whose stamp cannot be
// shown to be the webhook's by tracking.UnknownSubmitter alone (no groups, admission time or
// custody), so that neither its row nor job.json repeats what its creator may have written.
func unprovedSubmitter(job *batchv1alpha1.Job) {
	if stampedByWebhook(job) {
		return
	}
	for _, k := range tracking.SubmitterAnnotations() {
		delete(job.Annotations, k)
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[tracking.SubmitterAnnotation] = tracking.UnknownSubmitter
}

// stampedByWebhook reports whether the job's submitter annotations are the webhook's, as far as
// the API can tell. The policies (config/policy/submitter.yaml) hold every one of them to the
// CREATE request, so whoever wrote them could only write the truth, but for the admission time;
// the webhook always adds the job finalizer with them. So they are the webhook's unless:
//   - the archiver's backstop added the finalizer (tracking.BackstoppedAtAnnotation): the webhook
//     did not admit the job, and the annotations, if any, are its creator's;
//   - the job does not hold the finalizer and was not archived (its finalizer released): the
//     webhook did not admit it, and the backstop has not run yet;
//   - the submitter or admission time is missing, or the admission time is further than
//     tracking.AdmissionSkew from the creation time the API server set: a time the webhook
//     cannot have written.
func stampedByWebhook(job *batchv1alpha1.Job) bool {
	a := job.Annotations
	if a[tracking.BackstoppedAtAnnotation] != "" || a[tracking.SubmitterAnnotation] == "" {
		return false
	}
	if !controllerutil.ContainsFinalizer(job, tracking.JobFinalizer) && a[tracking.ArchivedAtAnnotation] == "" {
		return false
	}
	at, err := time.Parse(time.RFC3339, a[tracking.AdmittedAtAnnotation])
	if err != nil {
		return false
	}
	skew := at.Sub(job.CreationTimestamp.Time)
	return skew <= tracking.AdmissionSkew && skew >= -tracking.AdmissionSkew
}

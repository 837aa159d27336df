// Package tracking is the contract between the jobvault webhook and the archiver: the names of the
// finalizers, labels and annotations they stamp and read, and the phase rules both rely on. Nothing
// else in jobvault spells these names out.
package tracking

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
)

const (
	// Prefix is the API group-like prefix of every name jobvault puts on an object.
	Prefix = "jobvault.io/"

	// JobFinalizer holds a tracked VcJob until its record, its final object and the logs of all its
	// pods are durable.
	JobFinalizer = Prefix + "archive"
	// PodFinalizer holds a pod of a tracked VcJob until the logs of all its containers are durable.
	PodFinalizer = Prefix + "logs"

	// TrackedLabel marks a VcJob as tracked, for people and tools that list tracked jobs. jobvault
	// itself goes by JobFinalizer on jobs and by JobOf on pods, never by this label.
	TrackedLabel = Prefix + "tracked"
	// TrackedValue is the value of TrackedLabel.
	TrackedValue = "true"

	// SubmitterAnnotation holds the username of the request that created the VcJob, from the
	// admission request's userInfo (never from the object). An annotation, not a label: usernames
	// hold ':' and can exceed 63 characters.
	SubmitterAnnotation = Prefix + "submitter"
	// SubmitterGroupsAnnotation holds the submitter's groups as a JSON array of strings.
	SubmitterGroupsAnnotation = Prefix + "submitter-groups"
	// AdmittedAtAnnotation holds the admission time in RFC 3339 with UTC.
	AdmittedAtAnnotation = Prefix + "admitted-at"

	// ArchivedAtAnnotation is set on a VcJob, in the same patch that removes JobFinalizer, to the
	// time its archive became complete (RFC 3339, UTC).
	ArchivedAtAnnotation = Prefix + "archived-at"
	// ArchiveLocationAnnotation is set with ArchivedAtAnnotation to the URL of the job's archive.
	ArchiveLocationAnnotation = Prefix + "archive-location"
	// ArchivedAsAnnotation is set with ArchivedAtAnnotation to how the job was finalized: "archived"
	// (every log complete) or "released" (not: see ArchivedReasonAnnotation), as in its record.
	ArchivedAsAnnotation = Prefix + "archived-as"
	// ArchivedReasonAnnotation says why a released job's archive is incomplete.
	ArchivedReasonAnnotation = Prefix + "archived-reason"

	// JobPodLabel is set by Volcano's job controller on every pod it creates for a VcJob, to the
	// job's name, over any value the pod template has. The pod webhook's objectSelector and the
	// archiver's pod cache select on it (JobPodSelector), as neither can select by owner.
	JobPodLabel = batchv1alpha1.JobNameKey

	// ReleaseAnnotation is the operator's escape hatch: set on a VcJob or pod (any non-empty value,
	// best a reason), it makes the archiver record what it has and release the finalizer at once.
	ReleaseAnnotation = Prefix + "release"
	// RetentionAnnotation on a namespace overrides the archiver's --retention for the jobs and
	// pods of that namespace: a positive Go duration, e.g. "2160h" (90 days). A value that does
	// not parse is logged and ignored (--retention applies).
	RetentionAnnotation = Prefix + "retention"
	// LegalHoldAnnotation on a VcJob or a namespace holds the job's (or every job of the
	// namespace's) rows and objects: the pruner never deletes them, whatever their retain-until
	// date. Any value but "" and "false" holds; a reason ("case 2026-117") is the recommended value.
	LegalHoldAnnotation = Prefix + "legal-hold"
)

// IsTerminal reports whether a VcJob phase is final. Aborted is not: Volcano can resume an aborted
// job, so it is recorded but not finalized unless the job is being deleted.
func IsTerminal(phase batchv1alpha1.JobPhase) bool {
	switch phase {
	case batchv1alpha1.Completed, batchv1alpha1.Failed, batchv1alpha1.Terminated:
		return true
	}
	return false
}

// IsTracked reports whether a VcJob's labels mark it as tracked by jobvault.
func IsTracked(labels map[string]string) bool {
	return labels[TrackedLabel] == TrackedValue
}

// JobPodSelector selects the pods that may belong to a VcJob: those carrying JobPodLabel. JobOf
// decides. config/webhook's pod objectSelector is this selector (pkg/admission's TestManifests
// checks it).
func JobPodSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: JobPodLabel, Operator: metav1.LabelSelectorOpExists}}}
}

// JobOf returns the VcJob a pod claims to belong to, as its controlling ownerReference, if it is a
// pod of a VcJob: it carries JobPodLabel and a VcJob (any version of batch.volcano.sh Job) controls
// it. It is a claim, not a fact: the API server checks only that the reference's name and UID are
// not empty, so anyone who may write a pod can name any job, of any namespace, by any string. It
// is good for selecting and routing; before a pod is recorded or archived under the job, the
// archiver confirms that a VcJob of the pod's namespace has exactly that name and UID, and the
// archive layout refuses any name that is not one path segment.
// Every VcJob is tracked, so every such pod is too, outside the excluded namespaces. Never decide
// this by a label of ours: a job admitted while the webhook was down has none on its pod
// templates, and Volcano's webhook refuses to let one be added to a job's spec afterwards.
func JobOf(pod metav1.Object) (metav1.OwnerReference, bool) {
	if _, ok := pod.GetLabels()[JobPodLabel]; !ok {
		return metav1.OwnerReference{}, false
	}
	return ControllingJob(pod)
}

// ControllingJob returns the object's controlling ownerReference if it is a VcJob (any version of
// batch.volcano.sh Job), whatever its labels: for pods outside JobOf's view (their JobPodLabel
// removed) that still need a home, such as the shard that lets them go. A claim, as JobOf's.
func ControllingJob(obj metav1.Object) (metav1.OwnerReference, bool) {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != "Job" {
		return metav1.OwnerReference{}, false
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != batchv1alpha1.GroupName {
		return metav1.OwnerReference{}, false
	}
	return *ref, true
}

// PointerEscape escapes key as one reference token of a JSON pointer (RFC 6901), for the JSON
// patches that add tracking's annotations and finalizers: label and annotation keys contain "/".
func PointerEscape(key string) string { return pointerEscaper.Replace(key) }

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

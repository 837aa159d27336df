// Package tracking is the contract between the jobvault webhook and the archiver: the names of the
// finalizers, labels and annotations they stamp and read, and the phase rules both rely on. Nothing
// else in jobvault spells these names out.
package tracking

import (
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

	// TrackedLabel marks a VcJob, its tasks' pod templates and so the pods Volcano creates from them.
	// The webhook's pod objectSelector and the archiver's caches select on it.
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

	// ReleaseAnnotation is the operator's escape hatch: set on a VcJob or pod (any non-empty value,
	// best a reason), it makes the archiver record what it has and release the finalizer at once.
	ReleaseAnnotation = Prefix + "release"
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

// IsTracked reports whether an object's labels mark it as tracked by jobvault.
func IsTracked(labels map[string]string) bool {
	return labels[TrackedLabel] == TrackedValue
}

// Package v1alpha1 holds the types of the archive.jobvault.io/v1alpha1 API: the record of every
// VcJob jobvault archived, served read-only by the archive API server (package apiserver) as an
// aggregated API. Clients such as kubectl-jobvault import it.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=archive.jobvault.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ArchivedJob is the record of one VcJob as jobvault keeps it, whether the job still exists or
// not: who submitted it, every phase it went through, its pods, their containers and each
// container run's log (stored, or a gap, or unavailable, with the reasons), and where the archive
// lies. Its name and namespace are the job's; its UID is the job's UID, which tells apart jobs
// that had the same name over time (a get by name returns the latest).
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ArchivedJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ArchivedJobSpec   `json:"spec"`
	Status ArchivedJobStatus `json:"status"`
}

// ArchivedJobSpec is what the job was submitted as.
type ArchivedJobSpec struct {
	// Cluster is the cluster the job ran on, for databases shared by several clusters.
	Cluster string `json:"cluster,omitempty"`
	// Queue is the Volcano queue of the job.
	Queue string `json:"queue,omitempty"`
	// Submitter is the user who created the job, as the admission webhook recorded it; empty when
	// unknown (the job was admitted while the webhook was down).
	Submitter string `json:"submitter,omitempty"`
	// SubmitterGroups are the submitter's groups at admission.
	SubmitterGroups []string `json:"submitterGroups,omitempty"`
	// AdmittedAt is when the webhook admitted the job.
	AdmittedAt *metav1.Time `json:"admittedAt,omitempty"`
}

// ArchivedJobStatus is how the job ran and how far its archive came.
type ArchivedJobStatus struct {
	// Phase is the job's latest recorded phase (its final phase once finished).
	Phase string `json:"phase,omitempty"`
	// RetryCount is the job's status.retryCount.
	RetryCount int32 `json:"retryCount,omitempty"`
	// FinishedAt is when the job reached a terminal phase.
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// ArchiveState is pending (not finalized yet), archived (everything durable) or released
	// (finalized without a complete archive: see ReleaseReason).
	ArchiveState string `json:"archiveState,omitempty"`
	// ArchiveLocation is the URL of the job's archive prefix in object storage.
	ArchiveLocation string `json:"archiveLocation,omitempty"`
	// ArchivedAt is when the job was finalized.
	ArchivedAt *metav1.Time `json:"archivedAt,omitempty"`
	// ReleaseReason says why a released job has no complete archive.
	ReleaseReason string `json:"releaseReason,omitempty"`
	// Transitions are the job's phase changes, oldest first. Only a get fills them.
	Transitions []PhaseTransition `json:"transitions,omitempty"`
	// Pods are the job's recorded pods, oldest first. Only a get fills them.
	Pods []ArchivedPod `json:"pods,omitempty"`
}

// PhaseTransition is one phase change of the job.
type PhaseTransition struct {
	Phase   string      `json:"phase"`
	Time    metav1.Time `json:"time"`
	Reason  string      `json:"reason,omitempty"`
	Message string      `json:"message,omitempty"`
}

// ArchivedPod is one pod of the job (Volcano recreates pods under the same name: the UID tells
// them apart).
type ArchivedPod struct {
	Name       string       `json:"name"`
	UID        string       `json:"uid"`
	Task       string       `json:"task,omitempty"`
	Node       string       `json:"node,omitempty"`
	Phase      string       `json:"phase,omitempty"`
	CreatedAt  metav1.Time  `json:"createdAt"`
	StartedAt  *metav1.Time `json:"startedAt,omitempty"`
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// DeletedBeforeTerminal: the pod was being deleted before it succeeded or failed.
	DeletedBeforeTerminal bool `json:"deletedBeforeTerminal,omitempty"`
	// ArchiveState and ReleaseReason are the pod's, as for the job.
	ArchiveState  string `json:"archiveState,omitempty"`
	ReleaseReason string `json:"releaseReason,omitempty"`
	// Containers are the pod's containers whose logs are recorded: init, regular, then ephemeral.
	Containers []ArchivedContainer `json:"containers,omitempty"`
}

// ArchivedContainer is one container of a pod with the log of each of its runs.
type ArchivedContainer struct {
	Name string `json:"name"`
	// Type is init, regular or ephemeral.
	Type string `json:"type"`
	// Instances are the container's runs: previous-1, previous-2, …, then current (its last run).
	Instances []LogInstance `json:"instances,omitempty"`
	// Gaps are the parts of the container's output that could not be captured, by run.
	Gaps []LogGap `json:"gaps,omitempty"`
}

// LogInstance is the archived log of one container run.
type LogInstance struct {
	// Name is current (the container's last run) or previous-N (the run that ended when its
	// restart count reached N): the log subresource's instance option.
	Name string `json:"name"`
	// State is stored (the object holds it) or unavailable (see Reason).
	State string `json:"state"`
	// Bytes and SHA256 describe the uncompressed log, StoredBytes the stored (gzip) object.
	Bytes       int64  `json:"bytes"`
	StoredBytes int64  `json:"storedBytes,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
	// Reason says why an unavailable log could not be archived.
	Reason string `json:"reason,omitempty"`
}

// LogGap is output of a container run that could not be captured: between After (the last line
// captured before it; unset: the run's start) and Before (the first after it; unset: the run's
// end).
type LogGap struct {
	// Run is the container's restart count during the run (0 for its first run).
	Run    int32        `json:"run"`
	After  *metav1.Time `json:"after,omitempty"`
	Before *metav1.Time `json:"before,omitempty"`
	Reason string       `json:"reason"`
	Detail string       `json:"detail,omitempty"`
}

// ArchivedJobList is a page of archived jobs, oldest first.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ArchivedJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []ArchivedJob `json:"items"`
}

// ArchivedJobLogOptions are the query parameters of the log subresource, named as pods/log names
// them where they mean the same.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ArchivedJobLogOptions struct {
	metav1.TypeMeta `json:",inline"`

	// Pod is the pod's name or UID; may be empty when the job had one pod.
	Pod string `json:"pod,omitempty"`
	// Container is the container's name; may be empty when the pod had one container.
	Container string `json:"container,omitempty"`
	// Instance is the run: current (the default) or previous-N (see LogInstance).
	Instance string `json:"instance,omitempty"`
	// Previous selects the run before the last one (the highest previous-N), as pods/log's does.
	Previous bool `json:"previous,omitempty"`
	// TailLines, if set, returns only the last lines of the log.
	TailLines *int64 `json:"tailLines,omitempty"`
	// LimitBytes, if set, returns at most that many bytes (after TailLines).
	LimitBytes *int64 `json:"limitBytes,omitempty"`
	// Timestamps asks for each line's time, as pods/log's does. The archive holds the bytes the
	// container wrote, not the runtime's times: the log is returned without them, with a
	// warning saying so.
	Timestamps bool `json:"timestamps,omitempty"`
}

// ArchivedJobVerification is what the verify subresource returns: the job's archive re-read from
// the store and compared with the database on request, by the same verifier as `archiver logs
// verify` (package verify), with the same findings. Nothing is stored: each get verifies anew.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ArchivedJobVerification struct {
	metav1.TypeMeta `json:",inline"`
	// ObjectMeta names the job verified (name, namespace, UID).
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ArchiveState is the job's archive state when verified; a pending job's job.json and
	// manifest.json are not checked yet.
	ArchiveState string `json:"archiveState,omitempty"`
	// Location is the job's archive directory, as recorded.
	Location string `json:"location,omitempty"`
	// Logs counts the log records; Stored those re-read, Unavailable those recorded unavailable.
	Logs        int32 `json:"logs"`
	Stored      int32 `json:"stored"`
	Unavailable int32 `json:"unavailable"`
	// Findings are everything found wrong; none: the archive is what the database says.
	Findings []VerificationFinding `json:"findings,omitempty"`
	// Unreferenced are objects under the job's directory no record names: worth a look, not a
	// failure.
	Unreferenced []string `json:"unreferenced,omitempty"`
	// Gaps are the output the records say is missing, with the reasons: not a failure.
	Gaps []VerificationGap `json:"gaps,omitempty"`
}

// VerificationFinding is one thing found wrong with the archive.
type VerificationFinding struct {
	// Kind is missing, mismatch, corrupt, unreadable, manifest or record.
	Kind string `json:"kind"`
	// Item names what is concerned, for people (job.json, a log, …).
	Item string `json:"item"`
	// Key is the object concerned, when Item does not name it.
	Key    string `json:"key,omitempty"`
	Detail string `json:"detail"`
}

// VerificationGap is output of a container run the records say is missing.
type VerificationGap struct {
	PodUID    string       `json:"podUID"`
	Container string       `json:"container"`
	Run       int32        `json:"run"`
	After     *metav1.Time `json:"after,omitempty"`
	Before    *metav1.Time `json:"before,omitempty"`
	Reason    string       `json:"reason"`
	Detail    string       `json:"detail,omitempty"`
}

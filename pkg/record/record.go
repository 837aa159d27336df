// Package record holds the value types of jobvault's record of a job: the job, its phase
// transitions, its pods and their container logs, and the states they move through. The database
// (pkg/db) stores them and the archive (pkg/archive) lays them out as objects; neither needs the
// other to name them.
package record

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// ArchiveState is how far the archiving of a job or pod has come. It only moves forward: from
// ArchivePending to ArchiveArchived or ArchiveReleased, never back.
type ArchiveState string

const (
	// ArchivePending: the object is not finalized yet.
	ArchivePending ArchiveState = "pending"
	// ArchiveArchived: everything is durable (job: the row, the final object and all pod logs; pod:
	// the logs of all its containers).
	ArchiveArchived ArchiveState = "archived"
	// ArchiveReleased: the finalizer was released without a complete archive, by the deadline or the
	// operator's escape hatch; the release reason says which and why.
	ArchiveReleased ArchiveState = "released"
)

// Valid reports whether s is one of the defined states.
func (s ArchiveState) Valid() bool {
	switch s {
	case ArchivePending, ArchiveArchived, ArchiveReleased:
		return true
	}
	return false
}

// TransitionSource says where a recorded phase transition was read from.
type TransitionSource string

const (
	// SourceCondition: read back from the VcJob's status.conditions, which Volcano appends on every
	// phase change; this is how transitions that happened while the archiver was down are recovered.
	SourceCondition TransitionSource = "condition"
	// SourceObserved: seen live in status.state.
	SourceObserved TransitionSource = "observed"
)

// ContainerType is the kind of container a log belongs to.
type ContainerType string

const (
	// ContainerInit is an init container (spec.initContainers).
	ContainerInit ContainerType = "init"
	// ContainerRegular is an ordinary container (spec.containers).
	ContainerRegular ContainerType = "regular"
	// ContainerEphemeral is an ephemeral debug container (spec.ephemeralContainers).
	ContainerEphemeral ContainerType = "ephemeral"
)

// LogState is the outcome of archiving one container log.
type LogState string

const (
	// LogStored: the log is durable at its object key. Final: a stored log is never downgraded.
	LogStored LogState = "stored"
	// LogUnavailable: the log could not be fetched before the deadline (node gone, kubelet garbage
	// collected it, operator release); the reason says why. May later be upgraded to LogStored.
	LogUnavailable LogState = "unavailable"
)

// InstanceCurrent names the log of a container's last run, fetched (without previous=true) once the
// pod is terminal or being deleted.
const InstanceCurrent = "current"

// PreviousInstance names the log of the container run that ended when the container's restartCount
// reached restartCount, i.e. the run numbered restartCount-1 counting from 0. It is what the kubelet
// returns for previous=true while restartCount has that value. Instance names are
// "previous-<restartCount>" so that every restart of a container gets its own row and object.
func PreviousInstance(restartCount int32) string {
	return "previous-" + strconv.FormatInt(int64(restartCount), 10)
}

// Job is the record of one tracked VcJob, keyed by UID.
//
// On upsert, empty strings and nil pointers, slices and raw JSON mean "unknown": they never erase a
// value already recorded (labels and annotations excepted: they are replaced by the latest).
type Job struct {
	UID       string
	Cluster   string
	Namespace string
	Name      string
	Queue     string

	// Submitter, SubmitterGroups and AdmittedAt come from the webhook's annotations. The first
	// recorded value wins: anyone who may update the job can edit its annotations afterwards.
	Submitter       string
	SubmitterGroups []string
	AdmittedAt      *time.Time

	// CreatedAt is metadata.creationTimestamp; required.
	CreatedAt  time.Time
	FinishedAt *time.Time
	// Phase is status.state.phase. Once terminal (see tracking.IsTerminal) an upsert with a
	// non-terminal phase leaves Phase, Status and FinishedAt as they are: it can only come from a
	// stale cache.
	Phase      string
	RetryCount int32

	Labels      map[string]string
	Annotations map[string]string
	// Spec and Status are the VcJob's spec and status as JSON.
	Spec   json.RawMessage
	Status json.RawMessage

	// ArchiveState is ArchivePending when empty. Once archived or released, the archive fields
	// never change again.
	ArchiveState    ArchiveState
	ArchiveLocation string
	ArchivedAt      *time.Time
	ReleaseReason   string

	// RecordedAt (first write) and UpdatedAt (last change) are set by the database; ignored on upsert.
	RecordedAt time.Time
	UpdatedAt  time.Time
}

// Transition is one phase change of a job, unique per (job UID, Phase, Time).
type Transition struct {
	// ID is assigned by the database; ignored on insert.
	ID    int64
	Phase string
	// Time is the transition's lastTransitionTime; required. Stored with microsecond precision, so
	// pass the same value (e.g. the condition's time, whole seconds) every time.
	Time            time.Time
	Reason          string
	Message         string
	ResourceVersion string
	// ObservedAt is when the archiver saw the transition; the database's clock if zero.
	ObservedAt time.Time
	Source     TransitionSource
}

// Pod is the record of one pod of a tracked job, keyed by UID. The job row need not exist yet.
//
// On upsert, empty strings and nil pointers never erase a value already recorded; a terminal phase
// (Succeeded, Failed) is never replaced by a non-terminal one; DeletedBeforeTerminal is sticky.
type Pod struct {
	UID       string
	JobUID    string
	Namespace string
	Name      string
	Task      string
	Node      string
	Phase     string
	// CreatedAt is metadata.creationTimestamp; required.
	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	// DeletedBeforeTerminal: the pod was being deleted before it reached Succeeded or Failed.
	DeletedBeforeTerminal bool

	// ArchiveState is ArchivePending when empty; never moves back once archived or released.
	ArchiveState  ArchiveState
	ArchivedAt    *time.Time
	ReleaseReason string

	// RecordedAt and UpdatedAt are set by the database; ignored on upsert.
	RecordedAt time.Time
	UpdatedAt  time.Time
}

// LogObject is the record of one container log, unique per (PodUID, Container, Instance).
type LogObject struct {
	PodUID        string
	Container     string
	ContainerType ContainerType
	// Instance is InstanceCurrent or PreviousInstance(n).
	Instance string

	// ObjectKey, SHA256 (lower-case hex of the uncompressed bytes) are required when stored.
	ObjectKey string
	// Bytes is the uncompressed size, StoredBytes the size of the stored (gzip) object.
	Bytes       int64
	StoredBytes int64
	SHA256      string
	// StoredSHA256, when set, is the lower-case hex sha256 of the stored (gzip) object as the
	// store accepted it: the object was written whole by a Put the store checked against it
	// (objstore.PutOptions.Checksum), and the seal lists it without reading the object back. Empty
	// when no such write stands behind the row (a log assembled from segments, a Put that found
	// the object locked by an earlier pass, rows written before migration 0017): the seal reads
	// the object back. Not part of the record digest (pkg/audit), which predates it.
	StoredSHA256 string

	State LogState
	// Reason is required when unavailable.
	Reason string

	// CreatedAt and UpdatedAt are set by the database; ignored on write.
	CreatedAt time.Time
	UpdatedAt time.Time
}

func (l LogObject) String() string {
	return fmt.Sprintf("%s/%s/%s", l.PodUID, l.Container, l.Instance)
}

// Segment is one durable piece of a container run's log, captured while the container ran. A
// run's segments, in Seq order, concatenate to its log; each holds whole lines only, so that a
// capture resumed after a crash starts at a line boundary.
type Segment struct {
	PodUID    string
	Container string
	// Run is the container's restart count while the run lasted (0 for the first run).
	Run int32
	Seq int32
	// ObjectKey holds the segment, a gzip member; StoredBytes is its size.
	ObjectKey   string
	StoredBytes int64
	// Bytes is the uncompressed size of this segment, TotalBytes of the run's log up to and with it.
	Bytes, TotalBytes int64
	// LastTime is the timestamp of the last line captured, LastTimeLines how many lines captured
	// carry exactly that timestamp: where a resumed capture continues.
	LastTime      time.Time
	LastTimeLines int32
	// HashState is the run's sha256 state after this segment (encoding.BinaryMarshaler), so that
	// the hash of the whole log survives a restart of the archiver.
	HashState []byte
	// Source is the capture that stored the segment: CapturedByAgent or CapturedByAPI (empty:
	// CapturedByAPI).
	Source string
	// Streams, when known (read from the node's files), is the stream of each of the segment's
	// bytes, run-length encoded by the capture package; nil: unknown (read through pods/log).
	Streams []byte
	// SourcePosition is where in its source the segment ends (the node agent: the file and the
	// offset), opaque to everything but that source; nil: not recorded.
	SourcePosition []byte
}

// Captures of a container run's log, the values of Segment.Source and of a run's owner.
const (
	// CapturedByAgent: the node agent, from the log files on the node, held open until stored.
	CapturedByAgent = "agent"
	// CapturedByAPI: the archiver, through the API server's pods/log.
	CapturedByAPI = "api"
)

// SourceRange says which capture stored a byte range [From, To) of a container run's archived
// log. It outlives the segments, which are deleted once assembled.
type SourceRange struct {
	PodUID    string
	Container string
	Run       int32
	// Instance is the log object the run was recorded as (InstanceCurrent or PreviousInstance(n)).
	Instance string
	From, To int64
	Source   string
}

// SourceRanges are the byte ranges of a run's segments (in Seq order), by the capture that stored
// them: consecutive segments of one source make one range; empty segments none.
func SourceRanges(segs []Segment, instance string) []SourceRange {
	var out []SourceRange
	for _, s := range segs {
		if s.Bytes == 0 {
			continue
		}
		src := cmp.Or(s.Source, CapturedByAPI)
		from := s.TotalBytes - s.Bytes
		if n := len(out); n > 0 && out[n-1].Source == src && out[n-1].To == from {
			out[n-1].To = s.TotalBytes
			continue
		}
		out = append(out, SourceRange{PodUID: s.PodUID, Container: s.Container, Run: s.Run, Instance: instance,
			From: from, To: s.TotalBytes, Source: src})
	}
	return out
}

// GapReason says why part of a container's log could not be captured.
type GapReason string

const (
	// GapRotated: the node rotated the log file away before it was read.
	GapRotated GapReason = "rotated before read"
	// GapCollected: the node removed the container's logs (container GC) before they were read.
	GapCollected GapReason = "collected before read"
	// GapNodeLost: the pod's node is gone (deleted, or not Ready for long): the rest of the log,
	// on that node, cannot be read.
	GapNodeLost GapReason = "node lost"
	// GapUnreadable: the log could not be read until the deadline.
	GapUnreadable GapReason = "unreadable until the deadline"
	// GapRestarted: the container restarted again before this run's log was read; the node keeps
	// only the last run's.
	GapRestarted GapReason = "restarted again before read"
	// GapMaybeRotated: the log was read only after the container ended (the archiver was down
	// while it ran) and held about the node's rotation size: older output may have been rotated
	// away before it was read. What is missing, if anything, is unknown.
	GapMaybeRotated GapReason = "possibly rotated before read"
	// GapReleased: an operator released the pod before its log was complete.
	GapReleased GapReason = "released by operator"
	// GapUnknownStart: the run's capture began after the run did, with nothing of it stored, and
	// the first line read may not be the run's first: its earlier output may have been rotated
	// away before it was read (see the capture package's start rule).
	GapUnknownStart GapReason = "start unknown"
	// GapStillRunning: the run was read as ended while its status showed it running (its pod
	// passed the termination margin, or its node was lost while its kubelet still served logs):
	// its end may be missing.
	GapStillRunning GapReason = "truncated: still running at read"
	// GapOtherRun: a read of the run's log was served another run of the container (it
	// restarted again in between): those lines are not the run's and were not stored, and the
	// run's own output from there on was not read.
	GapOtherRun GapReason = "another run served"
	// GapAgentLetGo: the node agent let go of a rotated or deleted log file before reading all of
	// it, because the files it held had reached its held-bytes limit: the file's unread rest is
	// lost (the node's disk comes first).
	GapAgentLetGo GapReason = "released by agent: held-bytes limit"
	// GapTruncatedOnNode: a log file the node agent was reading was truncated in place (an
	// operator or a copytruncate rotation): what was written to it past the agent's position and
	// before the truncation is lost; the agent reads the file again from its start.
	GapTruncatedOnNode GapReason = "truncated on the node"
	// GapNameTaken: the run's log was read, but the object named for it holds another log
	// already (the run was named for another run's instance): that object was left as it is,
	// and what was read of the run is not in the archive.
	GapNameTaken GapReason = "name held by another log"
)

// Gap is a part of a container run's log that is missing from the archive: the output between
// After (the last line captured; zero if none) and Before (the next line captured; zero if none
// was), with the reason.
type Gap struct {
	PodUID    string
	Container string
	Run       int32
	After     time.Time
	Before    time.Time
	Reason    GapReason
	Detail    string
}

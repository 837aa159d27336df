package archive

import (
	"encoding/json"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// ManifestVersion is the version of the manifest.json format. Version 2 added the audit chain:
// cluster, seq, prevSHA256, objects, recordDigest and rows.
const ManifestVersion = 2

// Manifest is manifest.json: everything a reader needs to find and verify a job's archive without
// the database.
type Manifest struct {
	Version         int        `json:"version"`
	Job             JobRef     `json:"job"`
	Submitter       string     `json:"submitter,omitempty"`
	SubmitterGroups []string   `json:"submitterGroups,omitempty"`
	Phase           string     `json:"phase"`
	ArchivedAt      time.Time  `json:"archivedAt"`
	ReleaseReason   string     `json:"releaseReason,omitempty"`
	JobObject       string     `json:"jobObject"`
	Pods            []PodEntry `json:"pods"`
	// Gaps lists what is missing from the logs, and why; the job is then released, not archived.
	Gaps []GapEntry `json:"gaps"`

	// The audit chain (see pkg/audit). Cluster and Seq number the job's finalization, without
	// gaps per cluster; PrevSHA256 is the sha256 of the previous manifest in that sequence (empty
	// for the first): a hash chain.
	Cluster    string `json:"cluster"`
	Seq        int64  `json:"seq"`
	PrevSHA256 string `json:"prevSHA256"`
	// Objects lists every object of the archive but this manifest (job.json, each stored log and
	// each log's stream index) with the size and sha256 of its stored bytes, as read back when
	// the job was finalized.
	Objects []ObjectEntry `json:"objects"`
	// RecordDigest is the sha256 of the job's database rows, Rows the digest of each (see
	// audit.RecordDigest).
	RecordDigest string      `json:"recordDigest"`
	Rows         []RowDigest `json:"rows"`
}

// ObjectEntry is the size and sha256 of an object's stored bytes (compressed, for logs).
type ObjectEntry struct {
	Key    string `json:"key"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// RowDigest is the sha256 of one database row of a job's record, named for people (see
// audit.RecordDigest).
type RowDigest struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// Seal returns the manifest's bytes as the chain entry seq whose previous manifest's sha256 is
// prev.
func (m Manifest) Seal(seq int64, prev string) ([]byte, error) {
	m.Seq, m.PrevSHA256 = seq, prev
	return json.MarshalIndent(m, "", "  ")
}

// GapEntry is a missing part of a container run's log: the output after After (the last line
// archived before it) and before Before (the first after it), either unknown when empty.
type GapEntry struct {
	PodUID    string     `json:"podUID"`
	Container string     `json:"container"`
	Run       int32      `json:"run"`
	After     *time.Time `json:"after,omitempty"`
	Before    *time.Time `json:"before,omitempty"`
	Reason    string     `json:"reason"`
	Detail    string     `json:"detail,omitempty"`
}

// PodEntry lists a pod's archived logs.
type PodEntry struct {
	Name          string     `json:"name"`
	UID           string     `json:"uid"`
	Task          string     `json:"task,omitempty"`
	Node          string     `json:"node,omitempty"`
	Phase         string     `json:"phase,omitempty"`
	ReleaseReason string     `json:"releaseReason,omitempty"`
	Logs          []LogEntry `json:"logs"`
}

// LogEntry is one container log instance: where it is, its uncompressed size and sha256, or why
// it is unavailable.
type LogEntry struct {
	Container   string `json:"container"`
	Type        string `json:"type"`
	Instance    string `json:"instance"`
	State       string `json:"state"`
	Key         string `json:"key,omitempty"`
	Bytes       int64  `json:"bytes"`
	StoredBytes int64  `json:"storedBytes"`
	SHA256      string `json:"sha256,omitempty"`
	Reason      string `json:"reason,omitempty"`
	// Streams is the key of the log's stream index (the node agent's, beside it), if it has one;
	// Objects lists it with its size and sha256.
	Streams string `json:"streams,omitempty"`
}

// BuildManifest assembles a manifest from the database records of a job's pods and logs.
func BuildManifest(j JobRef, job record.Job, pods []record.Pod, logs []record.LogObject, gaps []record.Gap, jobObjectKey string, at time.Time) Manifest {
	m := Manifest{Version: ManifestVersion, Job: j, Submitter: job.Submitter, SubmitterGroups: job.SubmitterGroups,
		Phase: job.Phase, ArchivedAt: at.UTC(), ReleaseReason: job.ReleaseReason, JobObject: jobObjectKey, Pods: []PodEntry{}, Gaps: []GapEntry{}}
	for _, g := range gaps {
		e := GapEntry{PodUID: g.PodUID, Container: g.Container, Run: g.Run, Reason: string(g.Reason), Detail: g.Detail}
		if !g.After.IsZero() {
			t := g.After.UTC()
			e.After = &t
		}
		if !g.Before.IsZero() {
			t := g.Before.UTC()
			e.Before = &t
		}
		m.Gaps = append(m.Gaps, e)
	}
	byPod := map[string][]LogEntry{}
	for _, l := range logs {
		byPod[l.PodUID] = append(byPod[l.PodUID], LogEntry{Container: l.Container, Type: string(l.ContainerType),
			Instance: l.Instance, State: string(l.State), Key: l.ObjectKey, Bytes: l.Bytes, StoredBytes: l.StoredBytes,
			SHA256: l.SHA256, Reason: l.Reason})
	}
	for _, p := range pods {
		e := PodEntry{Name: p.Name, UID: p.UID, Task: p.Task, Node: p.Node, Phase: p.Phase, ReleaseReason: p.ReleaseReason, Logs: byPod[p.UID]}
		if e.Logs == nil {
			e.Logs = []LogEntry{}
		}
		m.Pods = append(m.Pods, e)
	}
	return m
}

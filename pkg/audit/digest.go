// Package audit is jobvault's evidence for auditors, written and read in one package so that the
// two cannot drift: the Sealer that appends a finalized job to the chain, the digest of a job's
// database rows that its chain entry and manifest record, the signed digests of the chain head,
// and the objects read back that verification (`archiver audit verify`) checks.
//
// The chain: every finalized job (archived or released) has an entry numbered without gaps per
// cluster (db.FinalizeJob); its manifest records its number, the size and sha256 of every object of
// the archive, the digest of its rows, and the sha256 of the previous entry's manifest. Changing,
// removing, adding or re-ordering anything breaks a hash that Verify recomputes; a signed digest of
// the head, written periodically, pins the chain's length and last hash to a time, so that even
// rewriting the whole chain consistently is caught by anyone holding the public key.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/record"
)

// Record is a job's database rows as its chain entry digests them.
type Record struct {
	Job         record.Job
	Transitions []record.Transition
	Pods        []record.Pod
	Logs        []record.LogObject
	Gaps        []record.Gap
}

// RecordDigest digests each row of a job's record and the whole. Each row is digested over the
// fields that are final once the job is (the database keeps them so, see migration 0004): for the
// job, all but its labels and annotations (the archiver's own annotations land there after) and
// the database's bookkeeping times; for transitions, pods, logs and gaps, all but database ids and
// bookkeeping times. Times are taken at the database's precision, microseconds, in UTC. Rows are
// named for people ("pod NAME (UID)"); the whole is the sha256 of "name<TAB>sha256<LF>" lines
// sorted by name.
func RecordDigest(r Record) (string, []archive.RowDigest) {
	var rows []archive.RowDigest
	add := func(name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("digest %s: %v", name, err)) // plain strings and numbers only
		}
		sum := sha256.Sum256(b)
		rows = append(rows, archive.RowDigest{Name: name, SHA256: hex.EncodeToString(sum[:])})
	}
	j := r.Job
	add("job "+j.UID, struct {
		UID, Cluster, Namespace, Name, Queue, Submitter string
		SubmitterGroups                                 []string
		AdmittedAt, CreatedAt, FinishedAt, Phase        string
		RetryCount                                      int32
		Spec, Status                                    string
		ArchiveState, ArchiveLocation, ArchivedAt       string
		ReleaseReason                                   string
	}{j.UID, j.Cluster, j.Namespace, j.Name, j.Queue, j.Submitter, j.SubmitterGroups, tsp(j.AdmittedAt), ts(j.CreatedAt), tsp(j.FinishedAt),
		j.Phase, j.RetryCount, string(j.Spec), string(j.Status), string(j.ArchiveState), j.ArchiveLocation, tsp(j.ArchivedAt), j.ReleaseReason})
	for _, t := range r.Transitions {
		add(fmt.Sprintf("transition %s at %s", t.Phase, ts(t.Time)), struct {
			Phase, Time, Reason, Message, ResourceVersion, ObservedAt, Source string
		}{t.Phase, ts(t.Time), t.Reason, t.Message, t.ResourceVersion, ts(t.ObservedAt), string(t.Source)})
	}
	podNames := map[string]string{}
	for _, p := range r.Pods {
		podNames[p.UID] = PodName(p.Name, p.UID)
		add(podNames[p.UID], struct {
			UID, JobUID, Namespace, Name, Task, Node, Phase, CreatedAt, StartedAt, FinishedAt string
			DeletedBeforeTerminal                                                             bool
			ArchiveState, ArchivedAt, ReleaseReason                                           string
		}{p.UID, p.JobUID, p.Namespace, p.Name, p.Task, p.Node, p.Phase, ts(p.CreatedAt), tsp(p.StartedAt), tsp(p.FinishedAt),
			p.DeletedBeforeTerminal, string(p.ArchiveState), tsp(p.ArchivedAt), p.ReleaseReason})
	}
	pod := func(uid string) string {
		if n, ok := podNames[uid]; ok {
			return n
		}
		return PodName("?", uid)
	}
	for _, l := range r.Logs {
		add(fmt.Sprintf("log %s/%s of %s", l.Container, l.Instance, pod(l.PodUID)), struct {
			PodUID, Container, ContainerType, Instance, ObjectKey string
			Bytes, StoredBytes                                    int64
			SHA256, State, Reason                                 string
		}{l.PodUID, l.Container, string(l.ContainerType), l.Instance, l.ObjectKey, l.Bytes, l.StoredBytes, l.SHA256, string(l.State), l.Reason})
	}
	gapNames := map[string]bool{}
	for _, g := range r.Gaps {
		// Gap times keep their nanoseconds: the database stores them exactly. Several gaps of a
		// run may start at the same time (migration 0011): the later ones are told apart by their
		// reason and end, in the order the database lists them.
		name := fmt.Sprintf("gap %s run %d after %s of %s", g.Container, g.Run, nanos(g.After), pod(g.PodUID))
		if gapNames[name] {
			name += fmt.Sprintf(" (%s, before %s)", g.Reason, nanos(g.Before))
		}
		gapNames[name] = true
		add(name, struct {
			PodUID, Container string
			Run               int32
			After, Before     string
			Reason, Detail    string
		}{g.PodUID, g.Container, g.Run, nanos(g.After), nanos(g.Before), string(g.Reason), g.Detail})
	}
	sort.Slice(rows, func(a, b int) bool { return rows[a].Name < rows[b].Name })
	return DigestRows(rows), rows
}

// DigestRows is the digest of a whole record from its rows' digests, sorted by name.
func DigestRows(rows []archive.RowDigest) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.Name + "\t" + r.SHA256 + "\n")
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// PodName names a pod's row in digests and findings.
func PodName(name, uid string) string { return fmt.Sprintf("pod %s (%s)", name, uid) }

// ts formats t at the database's precision (microseconds), in UTC; "" when zero.
func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Round(time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
}

func tsp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return ts(*t)
}

func nanos(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Package inspect reads a job's archive back for people: it lists the container logs the database
// records for a job and prints one of them decompressed (package verify checks them). It backs
// `archiver logs ls` and `archiver logs cat` (package cli), which auditors run against the
// production database and bucket, so it only ever reads.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// Records is what List reads from the database (implemented by *db.DB).
type Records interface {
	Job(ctx context.Context, uid string) (record.Job, error)
	Pods(ctx context.Context, jobUID string) ([]record.Pod, error)
	LogObjects(ctx context.Context, jobUID string) ([]record.LogObject, error)
}

// JobLister finds jobs by their attributes (implemented by *db.DB).
type JobLister interface {
	ListJobs(ctx context.Context, f db.JobFilter, after db.Cursor, limit int) ([]record.Job, db.Cursor, error)
}

// Log is one container log of a job as the database records it.
type Log struct {
	Pod       string               `json:"pod"`
	PodUID    string               `json:"podUID"`
	Container string               `json:"container"`
	Type      record.ContainerType `json:"type"`
	Instance  string               `json:"instance"`
	State     record.LogState      `json:"state"`
	// Bytes and SHA256 describe the uncompressed log, StoredBytes the (gzip) object under Key.
	Bytes       int64  `json:"bytes"`
	StoredBytes int64  `json:"storedBytes"`
	SHA256      string `json:"sha256,omitempty"`
	Key         string `json:"key,omitempty"`
	// Reason says why an unavailable log could not be archived.
	Reason string `json:"reason,omitempty"`
}

// List returns the recorded logs of a job's pods, by pod creation time, then init, regular and
// ephemeral containers, each container's runs in order. It fails with an error matching
// db.ErrNotFound when the database knows neither the job nor any pod of it.
func List(ctx context.Context, records Records, jobUID string) ([]Log, error) {
	if jobUID == "" {
		return nil, errors.New("list logs: empty job UID")
	}
	pods, err := records.Pods(ctx, jobUID)
	if err != nil {
		return nil, fmt.Errorf("list logs of job %s: %w", jobUID, err)
	}
	if len(pods) == 0 {
		// A job without pods is legitimate (it never started); an unknown UID is a typo.
		if _, err := records.Job(ctx, jobUID); err != nil {
			return nil, fmt.Errorf("list logs of job %s: %w", jobUID, err)
		}
		return []Log{}, nil
	}
	rows, err := records.LogObjects(ctx, jobUID)
	if err != nil {
		return nil, fmt.Errorf("list logs of job %s: %w", jobUID, err)
	}
	names := make(map[string]string, len(pods))
	for _, p := range pods {
		names[p.UID] = p.Name
	}
	logs := make([]Log, 0, len(rows))
	for _, r := range rows {
		logs = append(logs, Log{Pod: names[r.PodUID], PodUID: r.PodUID, Container: r.Container, Type: r.ContainerType,
			Instance: r.Instance, State: r.State, Bytes: r.Bytes, StoredBytes: r.StoredBytes, SHA256: r.SHA256,
			Key: r.ObjectKey, Reason: r.Reason})
	}
	return logs, nil
}

// WriteTable prints logs as an aligned table, one log per line, every value in full (sizes in
// bytes, whole sha256) so that an auditor can compare them with other tools' output.
func WriteTable(w io.Writer, logs []Log) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCONTAINER\tINSTANCE\tSTATE\tBYTES\tSHA256\tKEY\tREASON")
	for _, l := range logs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", l.Pod, l.Container, l.Instance, l.State, l.Bytes,
			orDash(l.SHA256), orDash(l.Key), orDash(oneLine(l.Reason)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a free-text reason from breaking the table.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Select picks one log from logs: the container's instance of the pod named pod (a pod name or
// UID). Volcano recreates pods under the same name, so a name that several recorded pods had is
// ambiguous and the error lists their UIDs.
func Select(logs []Log, pod, container, instance string) (Log, error) {
	if instance == "" {
		instance = record.InstanceCurrent
	}
	var (
		found   []Log
		podUIDs []string
	)
	for _, l := range logs {
		if l.Pod != pod && l.PodUID != pod {
			continue
		}
		if !slices.Contains(podUIDs, l.PodUID) {
			podUIDs = append(podUIDs, l.PodUID)
		}
		if l.Container == container && l.Instance == instance {
			found = append(found, l)
		}
	}
	switch {
	case len(podUIDs) == 0:
		return Log{}, fmt.Errorf("no pod %q recorded for the job: %w", pod, db.ErrNotFound)
	case len(podUIDs) > 1:
		return Log{}, fmt.Errorf("several pods were named %q (UIDs %s): name one by its UID", pod, strings.Join(podUIDs, ", "))
	case len(found) == 0:
		return Log{}, fmt.Errorf("no log of container %q (%s) recorded for pod %q: %w", container, instance, pod, db.ErrNotFound)
	}
	return found[0], nil
}

// Cat writes the decompressed content of the log object under key to w, streaming: memory stays
// flat whatever the log's size. A corrupt or truncated object fails once its damage is read, after
// the bytes before it were written.
func Cat(ctx context.Context, store objstore.Store, key string, w io.Writer) error {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("cat %s: %w", key, err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		return fmt.Errorf("cat %s: not a gzip object: %w", key, err)
	}
	if _, err := io.Copy(w, zr); err != nil {
		return fmt.Errorf("cat %s: %w", key, err)
	}
	if err := zr.Close(); err != nil {
		return fmt.Errorf("cat %s: %w", key, err)
	}
	return nil
}

// FindJobs returns the summaries (db.ListJobs) of the recorded jobs named name in namespace (and
// cluster, when not empty), oldest first. Several jobs may share a name over time; their UIDs tell
// them apart.
func FindJobs(ctx context.Context, lister JobLister, cluster, namespace, name string) ([]record.Job, error) {
	if namespace == "" || name == "" {
		return nil, errors.New("find job: namespace and name are both required")
	}
	var (
		found []record.Job
		after db.Cursor
	)
	for {
		page, next, err := lister.ListJobs(ctx, db.JobFilter{Cluster: cluster, Namespace: namespace, Name: name}, after, db.MaxPageSize)
		if err != nil {
			return nil, fmt.Errorf("find job %s/%s: %w", namespace, name, err)
		}
		found = append(found, page...)
		if next.IsZero() {
			return found, nil
		}
		after = next
	}
}

package stack

// A job archive built the way the archiver builds one, for the tests of inspection (verify, the
// `archiver logs` command) to damage on purpose.

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// AuditLayout is the layout of every archive here; a non-empty prefix proves Verify honours it.
var AuditLayout = archive.Layout{Prefix: "audit"}

// JobArchive is a job archived the way the archiver does it.
type JobArchive struct {
	Ref  archive.JobRef
	Root string // the filesystem store's root
	// keys of the stored logs by "<pod>/<pod-uid>/<container>/<instance>"; content by key.
	Keys    map[string]string
	Content map[string][]byte
	// workerUIDs are the two pods named train-worker-0 (the second replaced the first).
	WorkerUIDs [2]string
}

func (a *JobArchive) Key(t testing.TB, id string) string {
	t.Helper()
	k, ok := a.Keys[id]
	if !ok {
		t.Fatalf("no log %s in the fixture", id)
	}
	return k
}

// logSpec is one container log of the fixture; reason set means unavailable.
type logSpec struct {
	pod       int // index in the pods below
	container string
	ctype     record.ContainerType
	instance  string
	lines     int
	reason    string
}

// NewJobArchive records a job with three pods (a master, and a worker recreated under the same
// name) and five logs, four stored and one unavailable, in records and a fresh filesystem store.
// With archived, it also stores job.json and manifest.json and marks everything archived.
func NewJobArchive(t testing.TB, records *db.DB, archived bool) (*JobArchive, objstore.Store) {
	t.Helper()
	ctx := t.Context()
	root := t.TempDir()
	store, err := objstore.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	uid := "job-" + strings.ToLower(rand.Text())
	a := &JobArchive{Ref: archive.JobRef{Namespace: "audit-team", Name: "train", UID: uid}, Root: root,
		Keys: map[string]string{}, Content: map[string][]byte{}}
	created := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	job := record.Job{UID: uid, Cluster: "test", Namespace: a.Ref.Namespace, Name: a.Ref.Name, Queue: "default",
		Submitter: "alice@example.com", SubmitterGroups: []string{"ml"}, CreatedAt: created, Phase: "Completed"}
	if err := records.UpsertJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	pods := []record.Pod{
		{UID: uid + "-m0", Name: "train-master-0", Task: "master"},
		{UID: uid + "-w0a", Name: "train-worker-0", Task: "worker", DeletedBeforeTerminal: true},
		{UID: uid + "-w0b", Name: "train-worker-0", Task: "worker"},
	}
	a.WorkerUIDs = [2]string{pods[1].UID, pods[2].UID}
	for i := range pods {
		p := &pods[i]
		p.JobUID, p.Namespace, p.Node, p.Phase = uid, a.Ref.Namespace, "node-1", "Succeeded"
		p.CreatedAt = created.Add(time.Duration(i) * time.Minute)
		if err := records.UpsertPod(ctx, *p); err != nil {
			t.Fatal(err)
		}
	}
	specs := []logSpec{
		{pod: 0, container: "setup", ctype: record.ContainerInit, instance: record.InstanceCurrent, lines: 10},
		{pod: 0, container: "main", ctype: record.ContainerRegular, instance: record.PreviousInstance(1), lines: 2000},
		{pod: 0, container: "main", ctype: record.ContainerRegular, instance: record.InstanceCurrent, lines: 5000},
		{pod: 1, container: "main", ctype: record.ContainerRegular, instance: record.InstanceCurrent, reason: "node node-1 is gone"},
		{pod: 2, container: "main", ctype: record.ContainerRegular, instance: record.InstanceCurrent, lines: 300},
	}
	for _, s := range specs {
		p := pods[s.pod]
		row := record.LogObject{PodUID: p.UID, Container: s.container, ContainerType: s.ctype, Instance: s.instance}
		if s.reason != "" {
			row.State, row.Reason = record.LogUnavailable, s.reason
		} else {
			var b bytes.Buffer
			for i := range s.lines {
				fmt.Fprintf(&b, "%s %s/%s line %d: loss=%.4f\n", created.Add(time.Duration(i)*time.Second).Format(time.RFC3339), p.Name, s.container, i, 1/float64(i+1))
			}
			key := Must(AuditLayout.PodLog(a.Ref, p.Name, p.UID, s.container, s.instance))
			st, err := archive.Upload(ctx, store, key, bytes.NewReader(b.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			row.State, row.ObjectKey, row.Bytes, row.StoredBytes, row.SHA256 = record.LogStored, st.Key, st.Bytes, st.StoredBytes, st.SHA256
			a.Keys[p.Name+"/"+p.UID+"/"+s.container+"/"+s.instance] = key
			a.Content[key] = b.Bytes()
		}
		if err := records.PutLogObject(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	if !archived {
		return a, store
	}

	now := created.Add(time.Hour)
	for _, p := range pods {
		if err := records.MarkPodArchived(ctx, p.UID, now, ""); err != nil {
			t.Fatal(err)
		}
	}
	obj := map[string]any{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
		"metadata": map[string]any{"namespace": a.Ref.Namespace, "name": a.Ref.Name, "uid": uid},
		"status":   map[string]any{"state": map[string]any{"phase": "Completed"}}}
	PutJSON(t, store, Must(AuditLayout.JobObject(a.Ref)), obj)
	row, err := records.Job(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	dbPods, err := records.Pods(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := records.LogObjects(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	PutJSON(t, store, Must(AuditLayout.Manifest(a.Ref)), archive.BuildManifest(a.Ref, row, dbPods, logs, nil, Must(AuditLayout.JobObject(a.Ref)), now))
	if err := records.MarkJobArchived(ctx, uid, store.URL(Must(AuditLayout.JobDir(a.Ref))+"/"), now, ""); err != nil {
		t.Fatal(err)
	}
	return a, store
}

// PutJSON stores v as JSON under key.
func PutJSON(t testing.TB, store objstore.Store, key string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(t.Context(), key, bytes.NewReader(b), objstore.PutOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
}

// GzipBytes compresses b as the archiver does.
func GzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Put stores b under key.
func Put(t testing.TB, store objstore.Store, key string, b []byte) {
	t.Helper()
	if err := store.Put(t.Context(), key, bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Must returns v, and panics on err: for keys the tests build from valid components.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

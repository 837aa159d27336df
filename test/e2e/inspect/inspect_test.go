package inspect

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// The auditors' inspection tool (pkg/inspect and `archiver logs`) against a real Postgres and the
// filesystem store: archives are built with the same calls the archiver makes (archive.Upload, the
// db upserts, archive.BuildManifest), then damaged on purpose.

// auditLayout is the layout of every archive here; a non-empty prefix proves Verify honours it.
var auditLayout = archive.Layout{Prefix: "audit"}

// jobArchive is a job archived the way the archiver does it.
type jobArchive struct {
	ref  archive.JobRef
	root string // the filesystem store's root
	// keys of the stored logs by "<pod>/<pod-uid>/<container>/<instance>"; content by key.
	keys    map[string]string
	content map[string][]byte
	// workerUIDs are the two pods named train-worker-0 (the second replaced the first).
	workerUIDs [2]string
}

func (a *jobArchive) key(t *testing.T, id string) string {
	t.Helper()
	k, ok := a.keys[id]
	if !ok {
		t.Fatalf("no log %s in the fixture", id)
	}
	return k
}

// logSpec is one container log of the fixture; reason set means unavailable.
type logSpec struct {
	pod       int // index in the pods below
	container string
	ctype     db.ContainerType
	instance  string
	lines     int
	reason    string
}

// newJobArchive records a job with three pods (a master, and a worker recreated under the same
// name) and five logs, four stored and one unavailable, in records and a fresh filesystem store.
// With archived, it also stores job.json and manifest.json and marks everything archived.
func newJobArchive(t *testing.T, records *db.DB, archived bool) (*jobArchive, objstore.Store) {
	t.Helper()
	ctx := t.Context()
	root := t.TempDir()
	store, err := objstore.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	uid := "job-" + strings.ToLower(rand.Text())
	a := &jobArchive{ref: archive.JobRef{Namespace: "audit-team", Name: "train", UID: uid}, root: root,
		keys: map[string]string{}, content: map[string][]byte{}}
	created := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	job := db.Job{UID: uid, Cluster: "test", Namespace: a.ref.Namespace, Name: a.ref.Name, Queue: "default",
		Submitter: "alice@example.com", SubmitterGroups: []string{"ml"}, CreatedAt: created, Phase: "Completed"}
	if err := records.UpsertJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	pods := []db.Pod{
		{UID: uid + "-m0", Name: "train-master-0", Task: "master"},
		{UID: uid + "-w0a", Name: "train-worker-0", Task: "worker", DeletedBeforeTerminal: true},
		{UID: uid + "-w0b", Name: "train-worker-0", Task: "worker"},
	}
	a.workerUIDs = [2]string{pods[1].UID, pods[2].UID}
	for i := range pods {
		p := &pods[i]
		p.JobUID, p.Namespace, p.Node, p.Phase = uid, a.ref.Namespace, "node-1", "Succeeded"
		p.CreatedAt = created.Add(time.Duration(i) * time.Minute)
		if err := records.UpsertPod(ctx, *p); err != nil {
			t.Fatal(err)
		}
	}
	specs := []logSpec{
		{pod: 0, container: "setup", ctype: db.ContainerInit, instance: db.InstanceCurrent, lines: 10},
		{pod: 0, container: "main", ctype: db.ContainerRegular, instance: db.PreviousInstance(1), lines: 2000},
		{pod: 0, container: "main", ctype: db.ContainerRegular, instance: db.InstanceCurrent, lines: 5000},
		{pod: 1, container: "main", ctype: db.ContainerRegular, instance: db.InstanceCurrent, reason: "node node-1 is gone"},
		{pod: 2, container: "main", ctype: db.ContainerRegular, instance: db.InstanceCurrent, lines: 300},
	}
	for _, s := range specs {
		p := pods[s.pod]
		row := db.LogObject{PodUID: p.UID, Container: s.container, ContainerType: s.ctype, Instance: s.instance}
		if s.reason != "" {
			row.State, row.Reason = db.LogUnavailable, s.reason
		} else {
			var b bytes.Buffer
			for i := range s.lines {
				fmt.Fprintf(&b, "%s %s/%s line %d: loss=%.4f\n", created.Add(time.Duration(i)*time.Second).Format(time.RFC3339), p.Name, s.container, i, 1/float64(i+1))
			}
			key := auditLayout.PodLog(a.ref, p.Name, p.UID, s.container, s.instance)
			st, err := archive.Upload(ctx, store, key, bytes.NewReader(b.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			row.State, row.ObjectKey, row.Bytes, row.StoredBytes, row.SHA256 = db.LogStored, st.Key, st.Bytes, st.StoredBytes, st.SHA256
			a.keys[p.Name+"/"+p.UID+"/"+s.container+"/"+s.instance] = key
			a.content[key] = b.Bytes()
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
		"metadata": map[string]any{"namespace": a.ref.Namespace, "name": a.ref.Name, "uid": uid},
		"status":   map[string]any{"state": map[string]any{"phase": "Completed"}}}
	putJSON(t, store, auditLayout.JobObject(a.ref), obj)
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
	putJSON(t, store, auditLayout.Manifest(a.ref), archive.BuildManifest(a.ref, row, dbPods, logs, auditLayout.JobObject(a.ref), now))
	if err := records.MarkJobArchived(ctx, uid, store.URL(auditLayout.JobDir(a.ref)+"/"), now, ""); err != nil {
		t.Fatal(err)
	}
	return a, store
}

func putJSON(t *testing.T, store objstore.Store, key string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(t.Context(), key, bytes.NewReader(b), objstore.PutOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
}

func gzipBytes(t *testing.T, b []byte) []byte {
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

func put(t *testing.T, store objstore.Store, key string, b []byte) {
	t.Helper()
	if err := store.Put(t.Context(), key, bytes.NewReader(b), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// problem is what the tests compare of a Problem: the detail is prose.
type problem struct {
	Kind inspect.ProblemKind
	Key  string
}

func problems(r inspect.Report) []problem {
	out := []problem{}
	for _, p := range r.Problems {
		out = append(out, problem{p.Kind, p.Key})
	}
	return out
}

func TestInspectList(t *testing.T) {
	records, _ := stack.OpenRecords(t)
	a, store := newJobArchive(t, records, true)
	ctx := t.Context()

	logs, err := inspect.List(ctx, records, a.ref.UID)
	if err != nil {
		t.Fatal(err)
	}
	m0, w0a, w0b := a.ref.UID+"-m0", a.workerUIDs[0], a.workerUIDs[1]
	type row struct{ Pod, PodUID, Container, Instance, State, Key, Reason string }
	var got []row
	for _, l := range logs {
		got = append(got, row{l.Pod, l.PodUID, l.Container, l.Instance, string(l.State), l.Key, l.Reason})
		if l.State == db.LogStored {
			if l.Bytes != int64(len(a.content[l.Key])) || len(l.SHA256) != 64 || l.StoredBytes <= 0 {
				t.Errorf("log %s: bytes %d (content %d), sha256 %q, stored %d", l.Key, l.Bytes, len(a.content[l.Key]), l.SHA256, l.StoredBytes)
			}
		}
	}
	// Pods by creation, then init before regular containers, previous runs before the current one.
	want := []row{
		{"train-master-0", m0, "setup", "current", "stored", a.key(t, "train-master-0/"+m0+"/setup/current"), ""},
		{"train-master-0", m0, "main", "previous-1", "stored", a.key(t, "train-master-0/"+m0+"/main/previous-1"), ""},
		{"train-master-0", m0, "main", "current", "stored", a.key(t, "train-master-0/"+m0+"/main/current"), ""},
		{"train-worker-0", w0a, "main", "current", "unavailable", "", "node node-1 is gone"},
		{"train-worker-0", w0b, "main", "current", "stored", a.key(t, "train-worker-0/"+w0b+"/main/current"), ""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	var table bytes.Buffer
	if err := inspect.WriteTable(&table, logs); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(table.String()), "\n"); len(lines) != 1+len(logs) ||
		!strings.HasPrefix(lines[0], "POD") || !strings.Contains(table.String(), "node node-1 is gone") {
		t.Errorf("WriteTable:\n%s", table.String())
	}

	// Cat returns the original bytes, by key or through Select.
	for _, l := range logs {
		if l.State != db.LogStored {
			continue
		}
		var out bytes.Buffer
		if err := inspect.Cat(ctx, store, l.Key, &out); err != nil {
			t.Fatalf("Cat %s: %v", l.Key, err)
		}
		if !bytes.Equal(out.Bytes(), a.content[l.Key]) {
			t.Errorf("Cat %s: %d bytes, want the %d uploaded", l.Key, out.Len(), len(a.content[l.Key]))
		}
	}
	if l, err := inspect.Select(logs, "train-master-0", "main", "previous-1"); err != nil || l.Instance != "previous-1" || l.PodUID != m0 {
		t.Errorf("Select master main previous-1 = %+v, %v", l, err)
	}
	if _, err := inspect.Select(logs, "train-worker-0", "main", ""); err == nil || !strings.Contains(err.Error(), w0a) || !strings.Contains(err.Error(), w0b) {
		t.Errorf("Select of a name two pods had: %v, want an error listing both UIDs", err)
	}
	if l, err := inspect.Select(logs, w0b, "main", ""); err != nil || l.PodUID != w0b {
		t.Errorf("Select by pod UID = %+v, %v", l, err)
	}
	if _, err := inspect.Select(logs, "train-master-0", "sidecar", ""); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Select of an unknown container: %v, want ErrNotFound", err)
	}
	if err := inspect.Cat(ctx, store, "audit/no/such.log.gz", &bytes.Buffer{}); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Cat of a missing key: %v, want ErrNotFound", err)
	}

	if _, err := inspect.List(ctx, records, "no-such-job"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("List of an unknown job: %v, want ErrNotFound", err)
	}
	jobs, err := inspect.FindJobs(ctx, records, "", a.ref.Namespace, a.ref.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].UID != a.ref.UID {
		t.Errorf("FindJobs = %d jobs, want only %s", len(jobs), a.ref.UID)
	}
}

func TestInspectVerify(t *testing.T) {
	records, _ := stack.OpenRecords(t)
	masterMain := func(a *jobArchive) string {
		return a.keys["train-master-0/"+a.ref.UID+"-m0/main/current"]
	}
	masterPrev := func(a *jobArchive) string {
		return a.keys["train-master-0/"+a.ref.UID+"-m0/main/previous-1"]
	}
	workerMain := func(a *jobArchive) string {
		return a.keys["train-worker-0/"+a.workerUIDs[1]+"/main/current"]
	}
	tests := []struct {
		name string
		// damage changes the archive after it was written; want returns the expected problems.
		damage func(t *testing.T, a *jobArchive, store objstore.Store)
		want   func(a *jobArchive) []problem
		// layout, when set, is what Verify is given in place of auditLayout.
		layout *archive.Layout
	}{{
		name: "intact",
		want: func(*jobArchive) []problem { return []problem{} },
	}, {
		name: "log overwritten with other gzip content",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			changed := bytes.Clone(a.content[masterMain(a)])
			changed[100] ^= 1 // one bit: same size, other sha256
			put(t, store, masterMain(a), gzipBytes(t, changed))
		},
		want: func(a *jobArchive) []problem { return []problem{{inspect.ProblemMismatch, masterMain(a)}} },
	}, {
		name: "log deleted",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			if err := store.Delete(t.Context(), workerMain(a)); err != nil {
				t.Fatal(err)
			}
		},
		want: func(a *jobArchive) []problem { return []problem{{inspect.ProblemMissing, workerMain(a)}} },
	}, {
		name: "every damaged object is reported, not only the first",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			put(t, store, masterPrev(a), gzipBytes(t, []byte("forged\n")))
			put(t, store, masterMain(a), []byte("plain text, not gzip\n"))
			if err := store.Delete(t.Context(), workerMain(a)); err != nil {
				t.Fatal(err)
			}
		},
		want: func(a *jobArchive) []problem {
			return []problem{{inspect.ProblemMismatch, masterPrev(a)}, {inspect.ProblemCorrupt, masterMain(a)}, {inspect.ProblemMissing, workerMain(a)}}
		},
	}, {
		name: "truncated gzip",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			z := gzipBytes(t, a.content[masterMain(a)])
			put(t, store, masterMain(a), z[:len(z)/2])
		},
		want: func(a *jobArchive) []problem { return []problem{{inspect.ProblemCorrupt, masterMain(a)}} },
	}, {
		name: "same content recompressed: only the stored size differs",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			var out bytes.Buffer
			zw, err := gzip.NewWriterLevel(&out, gzip.NoCompression)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := zw.Write(a.content[masterMain(a)]); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			put(t, store, masterMain(a), out.Bytes())
		},
		want: func(a *jobArchive) []problem { return []problem{{inspect.ProblemMismatch, masterMain(a)}} },
	}, {
		name: "job.json and manifest.json deleted",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			for _, k := range []string{auditLayout.JobObject(a.ref), auditLayout.Manifest(a.ref)} {
				if err := store.Delete(t.Context(), k); err != nil {
					t.Fatal(err)
				}
			}
		},
		want: func(a *jobArchive) []problem {
			return []problem{{inspect.ProblemMissing, auditLayout.JobObject(a.ref)}, {inspect.ProblemMissing, auditLayout.Manifest(a.ref)}}
		},
	}, {
		name: "job.json of another job",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			putJSON(t, store, auditLayout.JobObject(a.ref), map[string]any{"kind": "Job",
				"metadata": map[string]any{"namespace": a.ref.Namespace, "name": a.ref.Name, "uid": "another-uid"}})
		},
		want: func(a *jobArchive) []problem {
			return []problem{{inspect.ProblemMismatch, auditLayout.JobObject(a.ref)}}
		},
	}, {
		name: "manifest disagrees with the database",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			var m archive.Manifest
			getJSON(t, store, auditLayout.Manifest(a.ref), &m)
			m.Pods[0].Logs[2].SHA256 = strings.Repeat("0", 64) // a log's checksum
			m.Pods = m.Pods[:2]                                // drops the replacement worker
			putJSON(t, store, auditLayout.Manifest(a.ref), m)
		},
		want: func(a *jobArchive) []problem {
			return []problem{{inspect.ProblemManifest, auditLayout.Manifest(a.ref)}, {inspect.ProblemManifest, auditLayout.Manifest(a.ref)}}
		},
	}, {
		name: "manifest not JSON",
		damage: func(t *testing.T, a *jobArchive, store objstore.Store) {
			put(t, store, auditLayout.Manifest(a.ref), []byte("{\"version\": 1, \"pods\": ["))
		},
		want: func(a *jobArchive) []problem {
			return []problem{{inspect.ProblemCorrupt, auditLayout.Manifest(a.ref)}}
		},
	}, {
		name:   "wrong store prefix",
		layout: &archive.Layout{Prefix: "elsewhere"},
		want: func(a *jobArchive) []problem {
			other := archive.Layout{Prefix: "elsewhere"}
			// The logs are found by their recorded keys; the job's own objects are looked for
			// where the given prefix puts them.
			return []problem{{inspect.ProblemLocation, ""}, {inspect.ProblemMissing, other.JobObject(a.ref)}, {inspect.ProblemMissing, other.Manifest(a.ref)}}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, store := newJobArchive(t, records, true)
			if tc.damage != nil {
				tc.damage(t, a, store)
			}
			layout := auditLayout
			if tc.layout != nil {
				layout = *tc.layout
			}
			rep, err := inspect.Verify(t.Context(), records, store, layout, a.ref.UID)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := tc.want(a)
			if diff := cmp.Diff(want, problems(rep)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\nreport:\n%s", diff, reportText(t, rep))
			}
			if rep.OK() != (len(want) == 0) {
				t.Errorf("OK() = %v with %d problems", rep.OK(), len(rep.Problems))
			}
			if rep.Logs != 5 || rep.Stored != 4 || rep.Unavailable != 1 || rep.ArchiveState != db.ArchiveArchived {
				t.Errorf("counts: %d logs, %d stored, %d unavailable, state %s; want 5, 4, 1, archived", rep.Logs, rep.Stored, rep.Unavailable, rep.ArchiveState)
			}
			for _, p := range rep.Problems {
				if p.Detail == "" || p.Subject == "" {
					t.Errorf("problem without subject or detail: %+v", p)
				}
			}
		})
	}

	t.Run("mismatch detail names both values", func(t *testing.T) {
		a, store := newJobArchive(t, records, true)
		put(t, store, masterMain(a), gzipBytes(t, []byte("short\n")))
		rep, err := inspect.Verify(t.Context(), records, store, auditLayout, a.ref.UID)
		if err != nil {
			t.Fatal(err)
		}
		text := reportText(t, rep)
		for _, want := range []string{"uncompressed size is 6 bytes, the record says " + fmt.Sprint(len(a.content[masterMain(a)])),
			"sha256 is ", "MISMATCH", masterMain(a), "FAILED: 1 problem"} {
			if !strings.Contains(text, want) {
				t.Errorf("report lacks %q:\n%s", want, text)
			}
		}
	})

	t.Run("unreferenced object is noted, not a failure", func(t *testing.T) {
		a, store := newJobArchive(t, records, true)
		extra := auditLayout.JobDir(a.ref) + "/pods/stray/uid/x.log.gz"
		put(t, store, extra, gzipBytes(t, []byte("x")))
		rep, err := inspect.Verify(t.Context(), records, store, auditLayout, a.ref.UID)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || !cmp.Equal(rep.Unreferenced, []string{extra}) {
			t.Errorf("OK %v, unreferenced %q; want OK and [%s]\n%s", rep.OK(), rep.Unreferenced, extra, reportText(t, rep))
		}
	})

	t.Run("job not archived yet: logs only", func(t *testing.T) {
		a, store := newJobArchive(t, records, false)
		rep, err := inspect.Verify(t.Context(), records, store, auditLayout, a.ref.UID)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || rep.ArchiveState != db.ArchivePending || rep.Stored != 4 {
			t.Errorf("pending job: %s", reportText(t, rep))
		}
		if err := store.Delete(t.Context(), workerMain(a)); err != nil {
			t.Fatal(err)
		}
		rep, err = inspect.Verify(t.Context(), records, store, auditLayout, a.ref.UID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]problem{{inspect.ProblemMissing, workerMain(a)}}, problems(rep)); diff != "" {
			t.Errorf("problems (-want +got):\n%s", diff)
		}
	})

	t.Run("unknown job", func(t *testing.T) {
		store, err := objstore.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inspect.Verify(t.Context(), records, store, auditLayout, "no-such-job"); !errors.Is(err, db.ErrNotFound) {
			t.Errorf("Verify of an unknown job: %v, want ErrNotFound", err)
		}
	})
}

func getJSON(t *testing.T, store objstore.Store, key string, v any) {
	t.Helper()
	rc, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := json.NewDecoder(rc).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func reportText(t *testing.T, r inspect.Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestInspectCommand runs the real `archiver logs` command: what auditors run.
func TestInspectCommand(t *testing.T) {
	records, dsn := stack.OpenRecords(t)
	a, store := newJobArchive(t, records, true)
	bin := testbed.GoBuild(t, "./archiver")

	run := func(t *testing.T, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"logs"}, args...)...)
		// The DSN from the environment, as in the Deployment; no kubeconfig is needed.
		cmd.Env = append(os.Environ(), "JOBVAULT_DB_DSN="+dsn)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("run archiver logs %s: %v", strings.Join(args, " "), err)
		}
		return out.String(), errOut.String(), code
	}
	if out, errOut, code := run(t, "help"); code != 0 || !strings.Contains(out, "archiver logs") {
		// Without the dispatch in archiver/main.go the binary runs the controller, which rejects
		// these arguments.
		t.Fatalf("archiver logs help: exit %d, want 0 and the usage (does archiver/main.go hand `logs` to runInspect?):\n%s%s", code, out, errOut)
	}
	storeFlags := []string{"--store-backend=fs", "--store-fs-root=" + a.root, "--store-prefix=" + auditLayout.Prefix}
	masterMain := a.keys["train-master-0/"+a.ref.UID+"-m0/main/current"]

	t.Run("ls", func(t *testing.T) {
		out, errOut, code := run(t, "ls", "--job-uid", a.ref.UID)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		for _, k := range a.keys {
			if !strings.Contains(out, k) {
				t.Errorf("ls output lacks %s:\n%s", k, out)
			}
		}
		byName, _, code := run(t, "ls", "--namespace", a.ref.Namespace, "--job", a.ref.Name, "--output", "json")
		var logs []inspect.Log
		if err := json.Unmarshal([]byte(byName), &logs); code != 0 || err != nil || len(logs) != 5 {
			t.Errorf("ls by name as JSON: exit %d, %v, %d logs:\n%s", code, err, len(logs), byName)
		}
	})

	t.Run("cat", func(t *testing.T) {
		out, errOut, code := run(t, append([]string{"cat", "--key", masterMain}, storeFlags...)...)
		if code != 0 || out != string(a.content[masterMain]) {
			t.Errorf("cat --key: exit %d, %d bytes (want %d): %s", code, len(out), len(a.content[masterMain]), errOut)
		}
		out, errOut, code = run(t, append([]string{"cat", "--job-uid", a.ref.UID, "--pod", "train-master-0", "--container", "main"}, storeFlags...)...)
		if code != 0 || out != string(a.content[masterMain]) {
			t.Errorf("cat --pod --container: exit %d, %d bytes (want %d): %s", code, len(out), len(a.content[masterMain]), errOut)
		}
		_, errOut, code = run(t, append([]string{"cat", "--job-uid", a.ref.UID, "--pod", a.workerUIDs[0], "--container", "main"}, storeFlags...)...)
		if code != 1 || !strings.Contains(errOut, "node node-1 is gone") {
			t.Errorf("cat of an unavailable log: exit %d, stderr %q; want 1 and the reason", code, errOut)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"verify"},
			{"verify", "--job-uid", a.ref.UID, "--namespace", "x", "--job", "y"},
			{"cat", "--job-uid", a.ref.UID},
			{"frobnicate"},
		} {
			if _, errOut, code := run(t, append(args, storeFlags...)...); code != 2 {
				t.Errorf("%q: exit %d, want 2 (usage): %s", args, code, errOut)
			}
		}
	})

	t.Run("verify", func(t *testing.T) {
		out, errOut, code := run(t, append([]string{"verify", "--job-uid", a.ref.UID}, storeFlags...)...)
		if code != 0 || !strings.HasPrefix(out, "OK ") {
			t.Fatalf("verify of an intact archive: exit %d\n%s%s", code, out, errOut)
		}
		// Corrupt one object and delete another: both are printed, and the exit status is 1.
		put(t, store, masterMain, gzipBytes(t, []byte("tampered\n")))
		workerMain := a.keys["train-worker-0/"+a.workerUIDs[1]+"/main/current"]
		if err := os.Remove(filepath.Join(a.root, filepath.FromSlash(workerMain))); err != nil {
			t.Fatal(err)
		}
		out, errOut, code = run(t, append([]string{"verify", "--namespace", a.ref.Namespace, "--job", a.ref.Name}, storeFlags...)...)
		if code != 1 {
			t.Errorf("verify of a damaged archive: exit %d, want 1\n%s%s", code, out, errOut)
		}
		for _, want := range []string{"MISMATCH", masterMain, "MISSING", workerMain, "FAILED: 2 problem(s)"} {
			if !strings.Contains(out, want) {
				t.Errorf("verify output lacks %q:\n%s", want, out)
			}
		}
	})
}

package inspect

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/stack"
)

// The auditors' inspection tool (pkg/inspect and `archiver logs`) against a real Postgres and the
// filesystem store: archives are built with the same calls the archiver makes (archive.Upload, the
// db upserts, archive.BuildManifest), then damaged on purpose.

// problem is what the tests compare of a Problem: the detail is prose.
type problem struct {
	Kind verify.Kind
	Key  string
}

func problems(r verify.JobReport) []problem {
	out := []problem{}
	for _, p := range r.Findings {
		out = append(out, problem{p.Kind, p.Key})
	}
	return out
}

func TestInspectList(t *testing.T) {
	records, _ := stack.OpenRecords(t)
	a, store := stack.NewJobArchive(t, records, true)
	ctx := t.Context()

	logs, err := inspect.List(ctx, records, a.Ref.UID)
	if err != nil {
		t.Fatal(err)
	}
	m0, w0a, w0b := a.Ref.UID+"-m0", a.WorkerUIDs[0], a.WorkerUIDs[1]
	type row struct{ Pod, PodUID, Container, Instance, State, Key, Reason string }
	var got []row
	for _, l := range logs {
		got = append(got, row{l.Pod, l.PodUID, l.Container, l.Instance, string(l.State), l.Key, l.Reason})
		if l.State == record.LogStored {
			if l.Bytes != int64(len(a.Content[l.Key])) || len(l.SHA256) != 64 || l.StoredBytes <= 0 {
				t.Errorf("log %s: bytes %d (content %d), sha256 %q, stored %d", l.Key, l.Bytes, len(a.Content[l.Key]), l.SHA256, l.StoredBytes)
			}
		}
	}
	// Pods by creation, then init before regular containers, previous runs before the current one.
	want := []row{
		{"train-master-0", m0, "setup", "current", "stored", a.Key(t, "train-master-0/"+m0+"/setup/current"), ""},
		{"train-master-0", m0, "main", "previous-1", "stored", a.Key(t, "train-master-0/"+m0+"/main/previous-1"), ""},
		{"train-master-0", m0, "main", "current", "stored", a.Key(t, "train-master-0/"+m0+"/main/current"), ""},
		{"train-worker-0", w0a, "main", "current", "unavailable", "", "node node-1 is gone"},
		{"train-worker-0", w0b, "main", "current", "stored", a.Key(t, "train-worker-0/"+w0b+"/main/current"), ""},
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
		if l.State != record.LogStored {
			continue
		}
		var out bytes.Buffer
		if err := inspect.Cat(ctx, store, l.Key, &out); err != nil {
			t.Fatalf("Cat %s: %v", l.Key, err)
		}
		if !bytes.Equal(out.Bytes(), a.Content[l.Key]) {
			t.Errorf("Cat %s: %d bytes, want the %d uploaded", l.Key, out.Len(), len(a.Content[l.Key]))
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
	jobs, err := inspect.FindJobs(ctx, records, "", a.Ref.Namespace, a.Ref.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].UID != a.Ref.UID {
		t.Errorf("FindJobs = %d jobs, want only %s", len(jobs), a.Ref.UID)
	}
}

func TestInspectVerify(t *testing.T) {
	records, _ := stack.OpenRecords(t)
	masterMain := func(a *stack.JobArchive) string {
		return a.Keys["train-master-0/"+a.Ref.UID+"-m0/main/current"]
	}
	masterPrev := func(a *stack.JobArchive) string {
		return a.Keys["train-master-0/"+a.Ref.UID+"-m0/main/previous-1"]
	}
	workerMain := func(a *stack.JobArchive) string {
		return a.Keys["train-worker-0/"+a.WorkerUIDs[1]+"/main/current"]
	}
	tests := []struct {
		name string
		// damage changes the archive after it was written; want returns the expected problems.
		damage func(t *testing.T, a *stack.JobArchive, store objstore.Store)
		want   func(a *stack.JobArchive) []problem
		// prefix, when set, is the --store-prefix Verify is given.
		prefix *string
	}{{
		name: "intact",
		want: func(*stack.JobArchive) []problem { return []problem{} },
	}, {
		name: "log overwritten with other gzip content",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			changed := bytes.Clone(a.Content[masterMain(a)])
			changed[100] ^= 1 // one bit: same size, other sha256
			stack.Put(t, store, masterMain(a), stack.GzipBytes(t, changed))
		},
		want: func(a *stack.JobArchive) []problem { return []problem{{verify.Mismatch, masterMain(a)}} },
	}, {
		name: "log deleted",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			if err := store.Delete(t.Context(), workerMain(a)); err != nil {
				t.Fatal(err)
			}
		},
		want: func(a *stack.JobArchive) []problem { return []problem{{verify.Missing, workerMain(a)}} },
	}, {
		name: "every damaged object is reported, not only the first",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			stack.Put(t, store, masterPrev(a), stack.GzipBytes(t, []byte("forged\n")))
			stack.Put(t, store, masterMain(a), []byte("plain text, not gzip\n"))
			if err := store.Delete(t.Context(), workerMain(a)); err != nil {
				t.Fatal(err)
			}
		},
		want: func(a *stack.JobArchive) []problem {
			return []problem{{verify.Mismatch, masterPrev(a)}, {verify.Corrupt, masterMain(a)}, {verify.Missing, workerMain(a)}}
		},
	}, {
		name: "truncated gzip",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			z := stack.GzipBytes(t, a.Content[masterMain(a)])
			stack.Put(t, store, masterMain(a), z[:len(z)/2])
		},
		want: func(a *stack.JobArchive) []problem { return []problem{{verify.Corrupt, masterMain(a)}} },
	}, {
		name: "same content recompressed: only the stored size differs",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			var out bytes.Buffer
			zw, err := gzip.NewWriterLevel(&out, gzip.NoCompression)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := zw.Write(a.Content[masterMain(a)]); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			stack.Put(t, store, masterMain(a), out.Bytes())
		},
		want: func(a *stack.JobArchive) []problem { return []problem{{verify.Mismatch, masterMain(a)}} },
	}, {
		name: "job.json and manifest.json deleted",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			for _, k := range []string{stack.Must(stack.AuditLayout.JobObject(a.Ref)), stack.Must(stack.AuditLayout.Manifest(a.Ref))} {
				if err := store.Delete(t.Context(), k); err != nil {
					t.Fatal(err)
				}
			}
		},
		want: func(a *stack.JobArchive) []problem {
			return []problem{{verify.Missing, stack.Must(stack.AuditLayout.JobObject(a.Ref))}, {verify.Missing, stack.Must(stack.AuditLayout.Manifest(a.Ref))}}
		},
	}, {
		name: "job.json of another job",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			stack.PutJSON(t, store, stack.Must(stack.AuditLayout.JobObject(a.Ref)), map[string]any{"kind": "Job",
				"metadata": map[string]any{"namespace": a.Ref.Namespace, "name": a.Ref.Name, "uid": "another-uid"}})
		},
		want: func(a *stack.JobArchive) []problem {
			return []problem{{verify.Mismatch, stack.Must(stack.AuditLayout.JobObject(a.Ref))}}
		},
	}, {
		name: "manifest disagrees with the database",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			var m archive.Manifest
			getJSON(t, store, stack.Must(stack.AuditLayout.Manifest(a.Ref)), &m)
			m.Pods[0].Logs[2].SHA256 = strings.Repeat("0", 64) // a log's checksum
			m.Pods = m.Pods[:2]                                // drops the replacement worker
			stack.PutJSON(t, store, stack.Must(stack.AuditLayout.Manifest(a.Ref)), m)
		},
		want: func(a *stack.JobArchive) []problem {
			return []problem{{verify.Manifest, stack.Must(stack.AuditLayout.Manifest(a.Ref))}, {verify.Manifest, stack.Must(stack.AuditLayout.Manifest(a.Ref))}}
		},
	}, {
		name: "manifest not JSON",
		damage: func(t *testing.T, a *stack.JobArchive, store objstore.Store) {
			stack.Put(t, store, stack.Must(stack.AuditLayout.Manifest(a.Ref)), []byte("{\"version\": 1, \"pods\": ["))
		},
		want: func(a *stack.JobArchive) []problem {
			return []problem{{verify.Corrupt, stack.Must(stack.AuditLayout.Manifest(a.Ref))}}
		},
	}, {
		name:   "the prefix it was archived under, given",
		prefix: &stack.AuditLayout.Prefix,
		want:   func(*stack.JobArchive) []problem { return []problem{} },
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, store := stack.NewJobArchive(t, records, true)
			if tc.damage != nil {
				tc.damage(t, a, store)
			}
			rep, err := verify.Job(t.Context(), records, store, a.Ref.UID, verify.JobOptions{Prefix: tc.prefix})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := tc.want(a)
			if diff := cmp.Diff(want, problems(rep)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\nreport:\n%s", diff, stack.ReportText(t, rep))
			}
			if rep.OK() != (len(want) == 0) {
				t.Errorf("OK() = %v with %d problems", rep.OK(), len(rep.Findings))
			}
			if rep.Logs != 5 || rep.Stored != 4 || rep.Unavailable != 1 || rep.ArchiveState != record.ArchiveArchived {
				t.Errorf("counts: %d logs, %d stored, %d unavailable, state %s; want 5, 4, 1, archived", rep.Logs, rep.Stored, rep.Unavailable, rep.ArchiveState)
			}
			for _, p := range rep.Findings {
				if p.Detail == "" || p.Item == "" {
					t.Errorf("problem without subject or detail: %+v", p)
				}
			}
		})
	}

	t.Run("mismatch detail names both values", func(t *testing.T) {
		a, store := stack.NewJobArchive(t, records, true)
		stack.Put(t, store, masterMain(a), stack.GzipBytes(t, []byte("short\n")))
		rep, err := verify.Job(t.Context(), records, store, a.Ref.UID, verify.JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		text := stack.ReportText(t, rep)
		for _, want := range []string{"uncompressed size is 6 bytes, the record says " + fmt.Sprint(len(a.Content[masterMain(a)])),
			"sha256 is ", "MISMATCH", masterMain(a), "FAILED: 1 problem"} {
			if !strings.Contains(text, want) {
				t.Errorf("report lacks %q:\n%s", want, text)
			}
		}
	})

	t.Run("unreferenced object is noted, not a failure", func(t *testing.T) {
		a, store := stack.NewJobArchive(t, records, true)
		extra := stack.Must(stack.AuditLayout.JobDir(a.Ref)) + "/pods/stray/uid/x.log.gz"
		stack.Put(t, store, extra, stack.GzipBytes(t, []byte("x")))
		rep, err := verify.Job(t.Context(), records, store, a.Ref.UID, verify.JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || !cmp.Equal(rep.Unreferenced, []string{extra}) {
			t.Errorf("OK %v, unreferenced %q; want OK and [%s]\n%s", rep.OK(), rep.Unreferenced, extra, stack.ReportText(t, rep))
		}
	})

	t.Run("job not archived yet: logs only", func(t *testing.T) {
		a, store := stack.NewJobArchive(t, records, false)
		rep, err := verify.Job(t.Context(), records, store, a.Ref.UID, verify.JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || rep.ArchiveState != record.ArchivePending || rep.Stored != 4 {
			t.Errorf("pending job: %s", stack.ReportText(t, rep))
		}
		if err := store.Delete(t.Context(), workerMain(a)); err != nil {
			t.Fatal(err)
		}
		rep, err = verify.Job(t.Context(), records, store, a.Ref.UID, verify.JobOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]problem{{verify.Missing, workerMain(a)}}, problems(rep)); diff != "" {
			t.Errorf("problems (-want +got):\n%s", diff)
		}
	})

	// A command line naming another prefix or store than the records is a usage error that says
	// where the archive is: never a report of missing objects.
	t.Run("wrong store prefix", func(t *testing.T) {
		a, store := stack.NewJobArchive(t, records, true)
		wrong := "jobvault"
		rep, err := verify.Job(t.Context(), records, store, a.Ref.UID, verify.JobOptions{Prefix: &wrong})
		var located *verify.LocationError
		if !errors.As(err, &located) || len(rep.Findings) != 0 {
			t.Fatalf("Verify = %+v, %v; want a *LocationError and no report", rep, err)
		}
		for _, want := range []string{store.URL(stack.Must(stack.AuditLayout.JobDir(a.Ref)) + "/"), `--store-prefix is "jobvault"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	})

	t.Run("another store", func(t *testing.T) {
		a, _ := stack.NewJobArchive(t, records, true)
		elsewhere, err := objstore.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		_, err = verify.Job(t.Context(), records, elsewhere, a.Ref.UID, verify.JobOptions{})
		var located *verify.LocationError
		if !errors.As(err, &located) || !strings.Contains(err.Error(), elsewhere.URL("")) {
			t.Fatalf("Verify against another store: %v; want a *LocationError naming it", err)
		}
	})

	t.Run("unknown job", func(t *testing.T) {
		store, err := objstore.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verify.Job(t.Context(), records, store, "no-such-job", verify.JobOptions{}); !errors.Is(err, db.ErrNotFound) {
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

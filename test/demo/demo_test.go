package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// TestDemo runs the demo's job set end to end and checks the summary it prints against the
// database and the store.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	res, err := run(t, &out, options{Backend: objstore.BackendFS, FSRoot: t.TempDir()})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	printed := out.String()
	t.Log(printed)
	wantPhase := map[string]string{"train-ok": "Completed", "flaky": "Failed", "multi": "Completed"}
	if len(res.Jobs) != 4 {
		t.Fatalf("%d jobs in the summary, want 4", len(res.Jobs))
	}
	records, err := db.Open(context.Background(), res.DSN, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer records.Close()
	store := res.Archiver.Store(t)
	for _, j := range res.Jobs {
		if p, ok := wantPhase[j.Name]; ok && j.Phase != p {
			t.Errorf("job %s: phase %s, want %s", j.Name, j.Phase, p)
		}
		if j.Submitter != "alice@example.com" || j.Location == "" || j.Logs == 0 {
			t.Errorf("job %s: submitter %q, location %q, %d logs; want alice@example.com, a location and logs", j.Name, j.Submitter, j.Location, j.Logs)
		}
		row, err := records.Job(t.Context(), j.UID)
		if err != nil || row.Phase != j.Phase || row.ArchiveLocation != j.Location {
			t.Errorf("job %s: database says phase %s at %s (%v), summary says %s at %s", j.Name, row.Phase, row.ArchiveLocation, err, j.Phase, j.Location)
		}
		line := ""
		for _, l := range strings.Split(printed, "\n") {
			if strings.HasPrefix(l, j.Name+" ") {
				line = l
			}
		}
		if !strings.Contains(line, j.Phase) || !strings.Contains(line, j.Location) {
			t.Errorf("summary line for %s is %q, want its phase %s and location %s", j.Name, line, j.Phase, j.Location)
		}
		for _, k := range j.Keys {
			if !strings.Contains(printed, k) {
				t.Errorf("summary does not list log object %s", k)
			}
		}
		rep, err := inspect.Verify(t.Context(), records, store, archive.Layout{Prefix: "archive"}, j.UID)
		if err != nil || !rep.OK() || rep.Stored != len(j.Keys) {
			var b strings.Builder
			_ = rep.WriteText(&b)
			t.Errorf("verify %s (%v): %s", j.Name, err, b.String())
		}
	}
	if flaky := res.Jobs[1]; flaky.Retries < 1 || flaky.Pods < 2 {
		t.Errorf("flaky: %d retries, %d pods; want its restarts recorded", flaky.Retries, flaky.Pods)
	}
	if !strings.Contains(printed, "alice@example.com  data-science") {
		t.Errorf("audit query rows missing from the summary")
	}
}

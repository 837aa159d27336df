package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/cli"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// TestDemo runs the demo's job set end to end, with the real node (`make demo REALNODE=1`), and
// checks the summary it prints against the database and the store; then every command it prints
// under "Explore", exactly as printed, and every audit example of docs/audit.md (queries, archiver
// logs, archiver audit export) against the data the demo's archiver recorded.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	res, err := run(t, &out, options{Backend: objstore.BackendFS, FSRoot: dir, Dir: dir, Explore: true, RealNode: true})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	printed := out.String()
	t.Log(printed)
	wantPhase := map[string]string{"train-ok": "Completed", "flaky": "Failed", "multi": "Completed", realNodeJob: "Completed"}
	if len(res.Jobs) != 5 {
		t.Fatalf("%d jobs in the summary, want 5", len(res.Jobs))
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
		if line := summaryLine(printed, j.Name); !strings.Contains(line, j.Phase) || !strings.Contains(line, j.Location) {
			t.Errorf("summary line for %s is %q, want its phase %s and location %s", j.Name, line, j.Phase, j.Location)
		}
		for _, k := range j.Keys {
			if !strings.Contains(printed, k) {
				t.Errorf("summary does not list log object %s", k)
			}
		}
		rep, err := verify.Job(t.Context(), records, store, j.UID, verify.JobOptions{})
		if err != nil || !rep.OK() || rep.Stored != len(j.Keys) {
			var b strings.Builder
			_ = rep.WriteText(&b)
			t.Errorf("verify %s (%v): %s", j.Name, err, b.String())
		}
	}
	t.Run("real node", func(t *testing.T) { testRealNodeJob(t, printed, res, records, store) })
	if flaky := res.Jobs[1]; flaky.Retries < 1 || flaky.Pods < 2 {
		t.Errorf("flaky: %d retries, %d pods; want its restarts recorded", flaky.Retries, flaky.Pods)
	}
	if !strings.Contains(printed, "alice@example.com  data-science") {
		t.Errorf("audit query rows missing from the summary")
	}

	t.Run("explore commands", func(t *testing.T) { testExplore(t, printed, res) })
	t.Run("audit SQL", func(t *testing.T) { testAuditSQL(t, res) })
	t.Run("logs commands", func(t *testing.T) { testAuditLogs(t, res) })
	t.Run("export commands", func(t *testing.T) { testAuditExport(t, res) })
}

// testRealNodeJob: the demo says which job ran where, its real-node job ran there and no other,
// and that job's archived log is byte for byte what its container wrote.
func testRealNodeJob(t *testing.T, printed string, res *result, records *db.DB, store objstore.Store) {
	if !strings.Contains(printed, "submitted job demo/"+realNodeJob+" as alice@example.com (its pods run on the real node "+testbed.RealNodeName+")") {
		t.Errorf("the demo does not say that job %s runs on the real node", realNodeJob)
	}
	for _, j := range res.Jobs {
		onReal := slices.Contains(j.Nodes, testbed.RealNodeName)
		if onReal != (j.Name == realNodeJob) || (onReal && len(j.Nodes) != 1) {
			t.Errorf("job %s ran on nodes %v", j.Name, j.Nodes)
		}
		if line := summaryLine(printed, j.Name); !strings.Contains(line, strings.Join(j.Nodes, ",")) {
			t.Errorf("summary line for %s is %q, want its nodes %v", j.Name, line, j.Nodes)
		}
		if j.Name != realNodeJob {
			continue
		}
		pods, err := records.Pods(t.Context(), j.UID)
		if err != nil || len(pods) != 1 {
			t.Fatalf("pods of %s: %v (%v), want one", j.Name, pods, err)
		}
		written := res.RealNode.Written("demo", pods[0].UID, "main", 0)
		logs, err := records.LogObjects(t.Context(), j.UID)
		if err != nil || len(logs) != 1 || len(written) != 4<<10 {
			t.Fatalf("logs of %s: %v (%v), want one; the container wrote %d bytes, want 4 KiB", j.Name, logs, err, len(written))
		}
		(&stack.Rig{Store: store}).CheckLog(t, logs[0], written)
	}
}

// summaryLine is the summary's line of the job.
func summaryLine(printed, job string) string {
	line := ""
	for _, l := range strings.Split(printed, "\n") {
		if strings.HasPrefix(l, job+" ") {
			line = l
		}
	}
	return line
}

// testExplore runs each command printed under "Explore:" with bash from the repository's root, as
// a user pasting it after `make demo` would, and checks that it succeeds and shows its subject;
// the viewer's `kubectl jobvault logs` of the deleted job must print exactly the archived bytes.
func testExplore(t *testing.T, printed string, res *result) {
	_, section, ok := strings.Cut(printed, "\nExplore:\n")
	if !ok {
		t.Fatal(`the demo printed no "Explore:" section`)
	}
	train := res.Jobs[0]
	deleted, _, ok := deletedJobLog(res.Jobs)
	if !ok {
		t.Fatal("the demo deleted no job with a stored log")
	}
	// What each command must show, by the program it runs (the longest name it contains).
	want := map[string]func(cmdline string, stdout []byte) error{
		"kubectl":               matches(`(?m)^    name: train-ok$`),
		"psql":                  matches(`alice@example\.com`),
		"find":                  matches(regexp.QuoteMeta(train.Keys[0])),
		"verify":                matches(`(?m)^OK demo/train-ok \(uid ` + train.UID + `, archived\)`),
		"kubectl jobvault get":  matches(`(?m)^` + regexp.QuoteMeta(deleted.Name) + ` +` + deleted.Phase + ` +\S+ +alice@example\.com `),
		"kubectl jobvault logs": archivedLog(t, res, deleted),
	}
	ran := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cmdline, ok := strings.CutPrefix(line, "  ")
		if !ok {
			break
		}
		what := ""
		for name := range want {
			if strings.Contains(cmdline, name+" ") && len(name) > len(what) {
				what = name
			}
		}
		if what == "" {
			t.Errorf("printed command %q: the test does not know what it should show", cmdline)
			continue
		}
		ran[what] = true
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), "bash", "-c", cmdline)
		cmd.Dir = testbed.ModuleRoot()
		cmd.Env = os.Environ()
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil {
			err = want[what](cmdline, stdout.Bytes())
		}
		if err != nil {
			t.Errorf("printed command %q: %v; stdout:\n%s\nstderr:\n%s", cmdline, err, clip(stdout.Bytes()), stderr.String())
		} else {
			t.Logf("$ %s\n%s", cmdline, clip(stdout.Bytes()))
		}
	}
	for name := range want {
		if !ran[name] {
			t.Errorf("the demo printed no %s command", name)
		}
	}
}

// matches checks that a command's output matches the regular expression re.
func matches(re string) func(string, []byte) error {
	r := regexp.MustCompile(re)
	return func(_ string, out []byte) error {
		if !r.Match(out) {
			return fmt.Errorf("output does not match %s", r)
		}
		return nil
	}
}

// archivedLog checks that `kubectl jobvault logs job/NAME POD` of the deleted job printed exactly
// the bytes the archive holds for POD's current run, read from the store by the database's record.
func archivedLog(t *testing.T, res *result, job jobSummary) func(string, []byte) error {
	logs, err := db.Open(t.Context(), res.DSN, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	pods, err := logs.Pods(t.Context(), job.UID)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := logs.LogObjects(t.Context(), job.UID)
	if err != nil {
		t.Fatal(err)
	}
	rig := &stack.Rig{Store: res.Archiver.Store(t)}
	archived := map[string][]byte{} // by pod name
	for _, p := range pods {
		for _, l := range objects {
			if l.PodUID == p.UID && l.Instance == record.InstanceCurrent && l.State == record.LogStored {
				archived[p.Name], _ = rig.ReadLog(t, l.ObjectKey)
			}
		}
	}
	return func(cmdline string, out []byte) error {
		args := strings.Fields(cmdline)
		i := slices.Index(args, "logs")
		if i < 0 || i+2 >= len(args) || args[i+1] != "job/"+job.Name {
			return fmt.Errorf("want `logs job/%s POD`", job.Name)
		}
		want, ok := archived[args[i+2]]
		if !ok || len(want) == 0 || !bytes.Equal(out, want) {
			return fmt.Errorf("printed %d bytes, want the %d archived of pod %s's current run (archived pods: %d)", len(out), len(want), args[i+2], len(archived))
		}
		return nil
	}
}

// clip shortens a command's output for a failure message.
func clip(b []byte) []byte {
	if len(b) > 4096 {
		return append(b[:4096:4096], "…"...)
	}
	return b
}

// auditDoc is the page, relative to the module root, whose examples run against the demo's records.
const auditDoc = "docs/audit.md"

// testAuditSQL runs each query of docs/audit.md's views section against the demo's database, with
// the placeholder <job-uid> set to the job train-ok's UID, and expects rows from each.
func testAuditSQL(t *testing.T, res *result) {
	conn, err := sql.Open("postgres", res.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	queries := 0
	for _, stmt := range strings.Split(stack.DocBlock(t, auditDoc, "## Views and queries", "sql"), ";") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
				lines = append(lines, l)
			}
		}
		if len(lines) == 0 {
			continue
		}
		queries++
		q := strings.ReplaceAll(strings.Join(lines, " "), "<job-uid>", res.Jobs[0].UID)
		rows, err := conn.QueryContext(t.Context(), q)
		if err != nil {
			t.Errorf("%s query %q: %v", auditDoc, q, err)
			continue
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil || n == 0 {
			t.Errorf("%s query %q: %d rows (%v), want some from the demo's jobs", auditDoc, q, n, err)
		}
		rows.Close()
	}
	if queries < 5 {
		t.Errorf("found %d queries in %s's views section, want at least 5", queries, auditDoc)
	}
}

// testAuditLogs runs each `archiver logs` example of docs/audit.md through the command's Main,
// with its placeholders (UID, KEY) set from the demo's records and the demo archiver's store
// flags, as the page says to pass them.
func testAuditLogs(t *testing.T, res *result) {
	t.Setenv("JOBVAULT_DB_DSN", res.DSN)
	train := res.Jobs[0]
	var storeFlags []string
	for _, a := range res.Archiver.Args {
		if strings.HasPrefix(a, "--store-") {
			storeFlags = append(storeFlags, a)
		}
	}
	examples := 0
	for _, line := range strings.Split(stack.DocBlock(t, auditDoc, "## Reading archives back", "sh"), "\n") {
		line, _, _ = strings.Cut(line, "#")
		args := strings.Fields(line)
		if len(args) < 3 || args[0] != "archiver" || args[1] != "logs" {
			continue
		}
		examples++
		for i, a := range args {
			switch a {
			case "UID":
				args[i] = train.UID
			case "KEY":
				args[i] = train.Keys[0]
			}
		}
		args = append(args[1:], storeFlags...)
		var stdout, stderr bytes.Buffer
		if code := cli.Main(t.Context(), args, &stdout, &stderr); code != cli.ExitOK || stdout.Len() == 0 {
			t.Errorf("%s example %q: exit %d, want 0 and output; stdout:\n%s\nstderr:\n%s", auditDoc, line, code, stdout.String(), stderr.String())
		}
	}
	if examples < 3 {
		t.Errorf("found %d `archiver logs` examples in %s, want ls, cat and verify", examples, auditDoc)
	}
}

// testAuditExport runs docs/audit.md's export examples as printed, one after the other in an empty
// directory: `archiver audit export` through the command's Main (a trailing "> FILE" writes its
// stdout to FILE, as the shell would), any other line with bash, as the auditor checking the
// export would. Each must succeed.
func testAuditExport(t *testing.T, res *result) {
	t.Setenv("JOBVAULT_DB_DSN", res.DSN)
	t.Chdir(t.TempDir())
	exports, others := 0, 0
	for _, line := range strings.Split(stack.DocBlock(t, auditDoc, "## Export", "sh"), "\n") {
		line, _, _ = strings.Cut(line, " #")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		args, redirect, _ := strings.Cut(line, " > ")
		fields := strings.Fields(args)
		if len(fields) < 3 || fields[0] != "archiver" || fields[1] != "audit" {
			others++
			if out, err := exec.CommandContext(t.Context(), "bash", "-c", line).CombinedOutput(); err != nil {
				t.Errorf("%s example %q: %v\n%s", auditDoc, line, err, out)
			}
			continue
		}
		exports++
		var stdout, stderr bytes.Buffer
		if code := cli.Main(t.Context(), fields[1:], &stdout, &stderr); code != cli.ExitOK {
			t.Errorf("%s example %q: exit %d, want 0; stderr:\n%s", auditDoc, line, code, stderr.String())
			continue
		}
		if redirect = strings.TrimSpace(redirect); redirect != "" {
			if err := os.WriteFile(redirect, stdout.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if exports < 2 || others < 1 {
		t.Errorf("found %d `archiver audit export` examples and %d checks in %s's export section, want 2 and 1", exports, others, auditDoc)
	}
}

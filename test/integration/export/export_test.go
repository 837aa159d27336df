package export

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	auditexport "github.com/jobvault/jobvault/pkg/audit/export"
	"github.com/jobvault/jobvault/pkg/cli"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

var t0 = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

// Values that CSV must quote and JSON escape: commas, double quotes, newlines, a CR, HTML
// characters, non-ASCII.
const (
	oddSubmitter = `CN=Alice "Al" Smith,O=R&D <dev>`
	oddReason    = "logs unavailable: 2 (node lost, \"kubelet gone\")\nsee ticket 7\r\nthanks, ops — ✓"
	oddLogReason = `node "n1" lost, log gone`
)

// seed writes five jobs through pkg/db, as the archiver records them: in team-a at t0, t0+1h and
// t0+2h (the last one released with odd text), in team-b at t0+1h, and one in team-a at t0+3h
// admitted while the webhook was down (submitter unknown). Each has transitions, a pod and logs.
func seed(t *testing.T, records *db.DB) {
	t.Helper()
	ctx := t.Context()
	type spec struct {
		uid, ns, submitter string
		at                 time.Duration
		retries            int32
		released           bool
	}
	for _, s := range []spec{
		{"job-a1", "team-a", "alice", 0, 0, false},
		{"job-a2", "team-a", oddSubmitter, time.Hour, 1, false},
		{"job-b1", "team-b", "bob", time.Hour, 0, false},
		{"job-a3", "team-a", "alice", 2 * time.Hour, 2, true},
		{"job-a4", "team-a", "", 3 * time.Hour, 0, false},
	} {
		created := t0.Add(s.at)
		finished := created.Add(10 * time.Minute)
		j := record.Job{UID: s.uid, Cluster: "prod", Namespace: s.ns, Name: "train-" + s.uid, Queue: "default",
			Submitter: s.submitter, CreatedAt: created, FinishedAt: &finished, Phase: "Completed", RetryCount: s.retries,
			Labels:      map[string]string{"app": "train"},
			Annotations: map[string]string{"note": `a "quoted", comma'd` + "\nnote"}}
		if s.submitter != "" {
			j.SubmitterGroups = []string{"dev", "R&D, west"}
			j.AdmittedAt = &created
		}
		if err := records.UpsertJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		ts := []record.Transition{
			{Phase: "Pending", Time: created, Source: record.SourceCondition},
			{Phase: "Running", Time: created.Add(time.Minute), Source: record.SourceCondition},
		}
		for r := range s.retries {
			base := created.Add(time.Duration(r+2) * time.Minute)
			ts = append(ts,
				record.Transition{Phase: "Restarting", Time: base, Reason: "PodFailed", Message: `pod "w-0" failed, exit 1`, Source: record.SourceCondition},
				record.Transition{Phase: "Running", Time: base.Add(30 * time.Second), Source: record.SourceObserved})
		}
		ts = append(ts, record.Transition{Phase: "Completed", Time: finished, Source: record.SourceCondition})
		if _, err := records.RecordTransitions(ctx, s.uid, ts); err != nil {
			t.Fatal(err)
		}
		pod := record.Pod{UID: s.uid + "-p0", JobUID: s.uid, Namespace: s.ns, Name: "train-" + s.uid + "-w-0", Task: "w",
			Node: "node-1", Phase: "Succeeded", CreatedAt: created, FinishedAt: &finished}
		if err := records.UpsertPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		logs := []record.LogObject{{PodUID: pod.UID, Container: "main", ContainerType: record.ContainerRegular, Instance: record.InstanceCurrent,
			ObjectKey: "prod/" + s.ns + "/" + s.uid + "/main.log.gz", Bytes: 1234, StoredBytes: 321, SHA256: strings.Repeat("ab", 32), State: record.LogStored}}
		if s.released {
			logs = append(logs, record.LogObject{PodUID: pod.UID, Container: "sidecar", ContainerType: record.ContainerRegular,
				Instance: record.InstanceCurrent, State: record.LogUnavailable, Reason: oddLogReason})
		}
		for _, l := range logs {
			if err := records.PutLogObject(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		// Which capture stored the stored log's bytes (no agent on node-1: the API capture).
		claim := db.RunClaim{RunKey: db.RunKey{PodUID: pod.UID, Container: "main"}, Node: pod.Node, Namespace: s.ns, Pod: pod.Name,
			JobName: j.Name, JobUID: s.uid}
		if _, _, err := records.ClaimRun(ctx, claim, db.AgentHealthyWithin); err != nil {
			t.Fatal(err)
		}
		if err := records.PutSources(ctx, []record.SourceRange{{PodUID: pod.UID, Container: "main", Instance: record.InstanceCurrent,
			To: 1234, Source: record.CapturedByAPI}}); err != nil {
			t.Fatal(err)
		}
		reason := ""
		if s.released {
			reason = oddReason
			gap := record.Gap{PodUID: pod.UID, Container: "main", Run: 0, After: created.Add(2 * time.Minute), Before: created.Add(3 * time.Minute),
				Reason: record.GapNodeLost, Detail: "node-1, NotReady for 5m"}
			if err := records.PutGap(ctx, gap); err != nil {
				t.Fatal(err)
			}
		}
		if err := records.MarkJobArchived(ctx, s.uid, "s3://b/"+s.ns+"/"+s.uid+"/", finished.Add(time.Second), reason); err != nil {
			t.Fatal(err)
		}
	}
}

// run runs `archiver audit export ARGS` and returns its exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, []byte, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Main(t.Context(), append([]string{"audit", "export"}, args...), &stdout, &stderr)
	return code, stdout.Bytes(), stderr.String()
}

func readMeta(t *testing.T, path string) auditexport.Meta {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m auditexport.Meta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestExportDeterministicAndVerifiable exports every view in both formats twice, the second time
// over a connection whose session differs in every setting that changes how values print: the
// bytes are the same, sha256sum accepts the sidecar, and the meta file counts the rows.
func TestExportDeterministicAndVerifiable(t *testing.T) {
	records, dsn := stack.OpenRecords(t)
	seed(t, records)
	// lib/pq passes unknown DSN parameters to the server as session settings.
	odd := dsn + "&timezone=Asia/Kolkata&intervalstyle=iso_8601&extra_float_digits=-3"
	dir := t.TempDir()
	for _, view := range db.AuditViews() {
		for _, format := range []string{"csv", "jsonl"} {
			var outs [2]string
			for i, d := range []string{dsn, odd} {
				outs[i] = filepath.Join(dir, fmt.Sprintf("%s-%d.%s", view, i, format))
				code, _, stderr := run(t, "--db-dsn", d, "--from", "2026-10-01", "--to", "2026-10-02", "--view", view, "--format", format, "--out", outs[i])
				if code != 0 {
					t.Fatalf("export %s %s: exit %d: %s", view, format, code, stderr)
				}
			}
			a, _ := os.ReadFile(outs[0])
			b, _ := os.ReadFile(outs[1])
			if !bytes.Equal(a, b) {
				t.Errorf("%s %s: two exports differ:\n%s\n---\n%s", view, format, a, b)
			}
			m := readMeta(t, outs[0]+".meta.json")
			sum := sha256.Sum256(a)
			if m.SHA256 != hex.EncodeToString(sum[:]) || m.Bytes != int64(len(a)) {
				t.Errorf("%s %s: meta says sha256 %s, %d bytes; the file has %x, %d bytes", view, format, m.SHA256, m.Bytes, sum, len(a))
			}
			lines := bytes.Count(a, []byte("\n"))
			if format == "csv" {
				recs, err := csv.NewReader(bytes.NewReader(a)).ReadAll()
				if err != nil {
					t.Fatalf("%s csv: %v", view, err)
				}
				lines = len(recs) - 1 // the header
			}
			if want := countView(t, dsn, view, m.Query, m.Args); m.Rows != int64(lines) || m.Rows != want || m.Rows == 0 {
				t.Errorf("%s %s: meta rows %d, rows in the file %d, rows the query selects %d", view, format, m.Rows, lines, want)
			}
			if path, err := exec.LookPath("sha256sum"); err == nil {
				cmd := exec.Command(path, "-c", filepath.Base(outs[0])+".sha256")
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("sha256sum -c: %v\n%s", err, out)
				}
			}
		}
	}
}

// countView counts the rows the export's own query selects, as an auditor re-running it would.
func countView(t *testing.T, dsn, view, query string, args []string) int64 {
	t.Helper()
	c, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a
	}
	var n int64
	if err := c.QueryRowContext(t.Context(), `SELECT count(*) FROM (`+query+`) q`, vals...).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", view, err)
	}
	return n
}

// TestExportFiltersAndEscaping: the time range is [from, to) on the jobs' creation, the namespace
// filter keeps only its jobs, odd text survives CSV and JSON, and NULL stays apart from "".
func TestExportFiltersAndEscaping(t *testing.T) {
	records, dsn := stack.OpenRecords(t)
	seed(t, records)

	code, out, stderr := run(t, "--db-dsn", dsn, "--from", "2026-10-01T01:00:00Z", "--to", "2026-10-01T03:00:00Z", "--namespace", "team-a")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("parse csv: %v\n%s", err, out)
	}
	col := map[string]int{}
	for i, name := range recs[0] {
		col[name] = i
	}
	var uids []string
	for _, r := range recs[1:] {
		uids = append(uids, r[col["uid"]])
	}
	// job-a1 is before the range, job-a4 at its end (exclusive), job-b1 in team-b.
	if diff := cmp.Diff([]string{"job-a2", "job-a3"}, uids); diff != "" {
		t.Errorf("jobs exported (-want +got):\n%s", diff)
	}
	if got := recs[1][col["submitter"]]; got != oddSubmitter {
		t.Errorf("submitter = %q, want %q", got, oddSubmitter)
	}
	// Go's csv reader turns a quoted CRLF into LF: check the bytes as written too.
	if got := recs[2][col["release_reason"]]; got != strings.ReplaceAll(oddReason, "\r\n", "\n") {
		t.Errorf("release_reason = %q, want %q", got, oddReason)
	}
	if quoted := `"` + strings.ReplaceAll(oddReason, `"`, `""`) + `"`; !bytes.Contains(out, []byte(quoted)) {
		t.Errorf("export does not hold the release reason quoted as %q:\n%s", quoted, out)
	}
	if got := recs[1][col["created_at"]]; got != "2026-10-01T01:00:00.000000Z" {
		t.Errorf("created_at = %q, want RFC 3339 UTC with microseconds", got)
	}
	if got := recs[1][col["ran_for"]]; got != "540.000000" {
		t.Errorf("ran_for = %q, want seconds", got)
	}
	if !strings.Contains(stderr, "2 rows") {
		t.Errorf("stderr %q does not give the row count", stderr)
	}
	sum := sha256.Sum256(out)
	if !strings.Contains(stderr, hex.EncodeToString(sum[:])) {
		t.Errorf("stderr %q does not give the sha256 of stdout", stderr)
	}

	// NULL is an empty field, the empty string a quoted one: job-a4's submitter is unknown, and
	// released jobs' reasons are NULL when archived.
	code, out, stderr = run(t, "--db-dsn", dsn, "--from", "2026-10-01T03:00:00Z", "--to", "2026-10-01T04:00:00Z", "--view", "audit_submissions")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "job-a4,prod,team-a,train-job-a4,default,,,,") {
		t.Errorf("audit_submissions of job-a4:\n%s\nwant an unquoted empty submitter, groups and admission time", out)
	}

	// JSON Lines: one object per row, keys in the view's order, NULL as null, numbers as
	// numbers, jsonb and arrays as JSON, odd text intact.
	code, out, stderr = run(t, "--db-dsn", dsn, "--from", "2026-10-01", "--to", "2026-10-02", "--view", "audit_retries", "--format", "jsonl", "--namespace", "team-a")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		rows = append(rows, m)
	}
	if len(rows) != 2 || rows[0]["uid"] != "job-a2" || rows[0]["submitter"] != oddSubmitter || rows[0]["retry_count"] != float64(1) {
		t.Fatalf("audit_retries jsonl:\n%s", out)
	}
	history, ok := rows[1]["transitions"].([]any)
	if !ok || len(history) != 7 || history[2].(map[string]any)["reason"] != "PodFailed" {
		t.Errorf("job-a3's transitions = %v, want its 7 phases as JSON", rows[1]["transitions"])
	}
	if first := strings.SplitN(string(out), "\n", 2)[0]; !strings.HasPrefix(first, `{"uid":"job-a2","cluster":"prod","namespace":"team-a"`) {
		t.Errorf("keys not in the view's column order: %s", first)
	}

	// The log view: the unavailable log's reason, by the job's creation time.
	code, out, stderr = run(t, "--db-dsn", dsn, "--from", "2026-10-01T02:00:00Z", "--to", "2026-10-01T03:00:00Z", "--view", "audit_log_objects")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	recs, err = csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil || len(recs) != 3 || recs[2][len(recs[2])-4] != oddLogReason {
		t.Errorf("audit_log_objects of job-a3 (err %v):\n%s", err, out)
	}
}

// TestExportBadInput: every problem of the command line is listed at once, the exit code is 2,
// and no file is written; a database that cannot be reached fails with 1 and writes nothing.
func TestExportBadInput(t *testing.T) {
	_, dsn := stack.OpenRecords(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "x.csv")
	code, _, stderr := run(t, "--db-dsn", dsn, "--from", "yesterday", "--to", "2026-10-01", "--view", "jobs", "--format", "xml", "--timeout", "0s", "--out", out)
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{"--from", "--view \"jobs\"", "--format \"xml\"", "--timeout"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not name %s:\n%s", want, stderr)
		}
	}
	code, _, stderr = run(t, "--db-dsn", dsn, "--from", "2026-10-02", "--to", "2026-10-01", "--out", out)
	if code != 2 || !strings.Contains(stderr, "not before") {
		t.Errorf("inverted range: exit %d: %s", code, stderr)
	}
	code, _, stderr = run(t, "--db-dsn", "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", "--from", "2026-10-01", "--to", "2026-10-02", "--out", out)
	if code != 1 {
		t.Errorf("unreachable database: exit %d, want 1: %s", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left after failed exports: %v", entries)
	}
	code, stdout, _ := run(t, "--help")
	if code != 0 || len(stdout) != 0 {
		t.Errorf("--help: exit %d", code)
	}
}

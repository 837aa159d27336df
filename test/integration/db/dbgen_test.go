package db

import (
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lib/pq"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/test/dbgen"
	"github.com/jobvault/jobvault/test/testbed"
)

// versionBefore is dbgen.VersionBefore, failing the test if there is none.
func versionBefore(t *testing.T, v uint) uint {
	t.Helper()
	prev, err := dbgen.VersionBefore(v)
	if err != nil {
		t.Fatal(err)
	}
	return prev
}

// tinyLoad is the generator of `make bench-db` at a size for `make test`, in several chunks.
var tinyLoad = dbgen.Config{Jobs: 2000, Transitions: 20000, LogRows: 40000, Seed: 7, ChunkJobs: 700}

// openAt opens a fresh database migrated to version.
func openAt(t *testing.T, version uint) (*db.DB, *sql.DB) {
	t.Helper()
	dsn := testbed.Postgres(t)
	records, err := db.Open(t.Context(), dsn, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { records.Close() })
	if err := records.MigrateTo(t.Context(), version); err != nil {
		t.Fatal(err)
	}
	return records, rawDB(t, dsn)
}

// TestDBGenerator loads the audit-scale generator's rows at a small size and checks what
// BenchmarkAuditDB relies on: the sizes asked for, the schema as the migrations made it, the
// shape of the distributions, and the same rows for the same seed.
func TestDBGenerator(t *testing.T) {
	ctx := t.Context()
	_, c := openAt(t, db.LatestVersion)
	schemaBefore := schemaObjects(t, c)
	st, err := dbgen.Load(ctx, c, tinyLoad, io.Discard)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Logf("loaded %s", st)

	near := func(what string, got int64, want int) {
		if float64(got) < 0.9*float64(want) || float64(got) > 1.1*float64(want) {
			t.Errorf("%s = %d, want %d ± 10%%", what, got, want)
		}
	}
	if st.Jobs != int64(tinyLoad.Jobs) {
		t.Errorf("jobs = %d, want %d", st.Jobs, tinyLoad.Jobs)
	}
	near("transitions", st.Transitions, tinyLoad.Transitions)
	near("log rows", st.LogRows, tinyLoad.LogRows)

	// Indexes, keys and foreign keys are back as the migrations made them (the foreign keys
	// were validated against every row as they were added).
	if diff := cmp.Diff(schemaBefore, schemaObjects(t, c)); diff != "" {
		t.Errorf("schema after the load (-before +after):\n%s", diff)
	}
	if _, err := dbgen.Load(ctx, c, tinyLoad, io.Discard); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a second Load into the same database: err = %v, want a refusal", err)
	}

	for _, check := range []struct {
		what, query string
	}{
		{"most jobs Completed, some Failed, Terminated and Aborted",
			`SELECT count(*) FILTER (WHERE phase = 'Completed') BETWEEN 0.75 * count(*) AND 0.95 * count(*)
			    AND count(*) FILTER (WHERE phase = 'Failed') > 0.03 * count(*)
			    AND count(*) FILTER (WHERE phase = 'Terminated') > 0.01 * count(*)
			    AND count(*) FILTER (WHERE phase = 'Aborted') > 0 FROM jobs`},
		{"namespaces skewed: the biggest holds over a tenth of the jobs, and there are many",
			`SELECT max(n) > 0.1 * sum(n) AND count(*) >= 30 FROM (SELECT count(*) n FROM jobs GROUP BY namespace) s`},
		{"submitters skewed, a few unknown",
			`SELECT max(n) > 0.02 * sum(n) AND count(*) >= 100 AND bool_or(submitter IS NULL)
			   FROM (SELECT submitter, count(*) n FROM jobs GROUP BY submitter) s`},
		{"created over about a year",
			`SELECT max(created_at) - min(created_at) > interval '360 days' FROM jobs`},
		{"a retried job has a Running transition per run and a Restarting one per retry",
			`SELECT bool_and(runs = retry_count + 1 AND restarts = retry_count) AND count(*) > 0.2 * (SELECT count(*) FROM jobs)
			   FROM (SELECT j.retry_count, count(*) FILTER (WHERE t.phase = 'Running') runs, count(*) FILTER (WHERE t.phase = 'Restarting') restarts
			         FROM jobs j JOIN job_transitions t ON t.job_uid = j.uid WHERE j.phase <> 'Pending' GROUP BY j.uid, j.retry_count) s
			  WHERE retry_count > 0`},
		{"audit_retries lists exactly the retried jobs",
			`SELECT (SELECT count(*) FROM audit_retries) = (SELECT count(*) FROM jobs WHERE retry_count > 0)`},
		{"every finished pod has its logs, every log its pod",
			`SELECT NOT EXISTS (SELECT 1 FROM pods p WHERE p.finished_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM log_objects l WHERE l.pod_uid = p.uid))`},
		{"archived jobs have their time and location, released ones a reason",
			`SELECT bool_and(archived_at IS NOT NULL AND archive_location IS NOT NULL) AND bool_or(archive_state = 'released')
			   FROM jobs WHERE archive_state <> 'pending'`},
	} {
		var ok bool
		if err := c.QueryRowContext(ctx, check.query).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", check.what, err)
		}
		if !ok {
			t.Errorf("not true of the generated rows: %s", check.what)
		}
	}

	// The same seed loads the same rows, byte for byte, into other databases (a smaller load, in
	// chunks of another size).
	small := dbgen.Config{Jobs: 300, Seed: 7, ChunkJobs: 100}
	_, c1 := openAt(t, db.LatestVersion)
	_, c2 := openAt(t, db.LatestVersion)
	if _, err := dbgen.Load(ctx, c1, small, io.Discard); err != nil {
		t.Fatal(err)
	}
	small.ChunkJobs = 300
	if _, err := dbgen.Load(ctx, c2, small, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"jobs", "job_transitions", "pods", "log_objects"} {
		if a, b := tableDigest(t, c1, table), tableDigest(t, c2, table); a != b {
			t.Errorf("table %s differs between two loads of the same seed", table)
		}
	}
}

// TestDBAuditScaleViewsUnchanged proves that the audit-scale migrations (0006, 0009) change how
// the audit views are computed, not what they say: on the generator's rows, every view's original
// columns hold the same values before each, after it, and after its down migration.
func TestDBAuditScaleViewsUnchanged(t *testing.T) {
	for _, v := range dbgen.AuditScaleVersions {
		t.Run(fmt.Sprintf("%04d", v), func(t *testing.T) { auditScaleViewsUnchanged(t, v) })
	}
}

func auditScaleViewsUnchanged(t *testing.T, version uint) {
	ctx := t.Context()
	before := versionBefore(t, version)
	records, c := openAt(t, before)
	if _, err := dbgen.Load(ctx, c, tinyLoad, io.Discard); err != nil {
		t.Fatal(err)
	}
	// Jobs whose row lacks finished_at, so that audit_outcomes falls back on the transitions, and
	// restarted jobs without a retry count, so that audit_retries finds them by their Running
	// transitions alone.
	if _, err := c.ExecContext(ctx, `
UPDATE jobs SET finished_at = NULL WHERE uid IN (SELECT uid FROM jobs WHERE phase = 'Completed' ORDER BY uid LIMIT 100);
UPDATE jobs SET retry_count = 0 WHERE uid IN (SELECT uid FROM jobs WHERE retry_count IN (1, 2) ORDER BY uid LIMIT 100)`); err != nil {
		t.Fatal(err)
	}
	views := map[string]string{ // view: its key order
		"audit_submissions": "created_at, uid",
		"audit_outcomes":    "created_at, uid",
		"audit_retries":     "uid",
		"audit_log_objects": "job_uid, pod_uid, container, instance",
		"audit_log_gaps":    "job_uid, pod_uid, container, run, missing_after",
	}
	columns := map[string][]string{}
	digests := func() map[string]string {
		d := map[string]string{}
		for v, order := range views {
			d[v] = viewDigest(t, c, v, columns[v], order)
		}
		return d
	}
	for v := range views {
		columns[v] = viewColumns(t, c, v)
	}
	want := digests()
	check := func(stage string) {
		t.Helper()
		if diff := cmp.Diff(want, digests()); diff != "" {
			t.Errorf("%s: views hold other values than before migration %d (-before +now):\n%s", stage, version, diff)
		}
	}
	if err := records.MigrateTo(ctx, version); err != nil {
		t.Fatal(err)
	}
	check("after the migration")
	if version == 6 {
		if got := viewColumns(t, c, "audit_retries"); got[len(got)-1] != "created_at" {
			t.Errorf("audit_retries columns %v: want created_at added at the end", got)
		}
	}
	if version == 9 {
		finalizeCounts(t, records, c)
		want = digests()
		if got := databaseSettings(t, c); !slices.Contains(got, "jit=off") {
			t.Errorf("database settings after migration 9: %v, want jit=off", got)
		}
	}
	if err := records.MigrateTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	check("after its down migration")
	if got := databaseSettings(t, c); slices.Contains(got, "jit=off") {
		t.Errorf("database settings after the down migration: %v, want jit reset", got)
	}
	if got := viewColumns(t, c, "audit_retries"); !cmp.Equal(got, columns["audit_retries"]) {
		t.Errorf("audit_retries columns after the down migration = %v, want %v", got, columns["audit_retries"])
	}
}

// finalizeCounts checks migration 0009's counts on a database at version 9 loaded by the
// generator: the migration recorded every finalized job's, finalizing a pending job records its
// own (the down migration then shows whether they are what counting gives), and they are final.
func finalizeCounts(t *testing.T, records *db.DB, c *sql.DB) {
	t.Helper()
	ctx := t.Context()
	var uncounted, pending int
	if err := c.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE archive_state <> 'pending' AND final_pods IS NULL),
	       count(*) FILTER (WHERE archive_state = 'pending') FROM jobs`).Scan(&uncounted, &pending); err != nil {
		t.Fatal(err)
	}
	if uncounted != 0 || pending == 0 {
		t.Fatalf("after migration 9: %d finalized jobs without counts (want 0), %d pending (want some)", uncounted, pending)
	}
	uids := queryStrings(t, c, `SELECT uid FROM jobs WHERE archive_state = 'pending' ORDER BY uid LIMIT 30`)
	for i, uid := range uids {
		reason := ""
		if i%3 == 0 {
			reason = "released for the test"
		}
		if err := records.MarkJobArchived(ctx, uid, "s3://bucket/"+uid+"/", time.Time{}, reason); err != nil {
			t.Fatal(err)
		}
	}
	var counted, logs int
	if err := c.QueryRowContext(ctx, `SELECT count(final_pods), coalesce(sum(final_logs_stored + final_logs_unavailable), 0) FROM jobs WHERE uid = ANY($1)`,
		pq.StringArray(uids)).Scan(&counted, &logs); err != nil {
		t.Fatal(err)
	}
	if counted != len(uids) || logs == 0 {
		t.Errorf("finalized %d pending jobs: %d have counts, %d logs counted; want all, and logs", len(uids), counted, logs)
	}
	// The freeze trigger keeps them: an edit of a finalized job's counts changes nothing.
	res, err := c.ExecContext(ctx, `UPDATE jobs SET final_pods = final_pods + 1, final_logs_stored = 0 WHERE uid = $1`, uids[0])
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Errorf("an edit of a finalized job's counts updated %d rows, want none (frozen)", n)
	}
}

// databaseSettings lists the settings of the current database for every role (ALTER DATABASE … SET).
func databaseSettings(t *testing.T, c *sql.DB) []string {
	t.Helper()
	var out pq.StringArray
	if err := c.QueryRowContext(t.Context(), `SELECT coalesce((SELECT setconfig FROM pg_db_role_setting
	  WHERE setrole = 0 AND setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())), '{}')`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// schemaObjects lists the indexes and constraints of the current schema, as Postgres prints them.
func schemaObjects(t *testing.T, c *sql.DB) []string {
	return queryStrings(t, c, `
SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()
UNION ALL
SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
WHERE connamespace = current_schema()::regnamespace
ORDER BY 1`)
}

// tableDigest is the md5 of every row of table but its serial id and the load's clock, in key order.
func tableDigest(t *testing.T, c *sql.DB, table string) string {
	t.Helper()
	var d string
	q := `SELECT md5(string_agg((to_jsonb(x) - 'id')::text, E'\n' ORDER BY (to_jsonb(x) - 'id')::text)) FROM ` + table + ` x`
	if err := c.QueryRowContext(t.Context(), q).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

func viewColumns(t *testing.T, c *sql.DB, view string) []string {
	return queryStrings(t, c, `SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 ORDER BY attnum`, view)
}

// queryStrings returns the one text column of every row query returns.
func queryStrings(t *testing.T, c *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := c.QueryContext(t.Context(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// viewDigest is the md5 of the given columns of every row of view, in order, and its row count.
func viewDigest(t *testing.T, c *sql.DB, view string, cols []string, order string) string {
	t.Helper()
	var (
		d string
		n int
	)
	q := `SELECT coalesce(md5(string_agg(r, E'\n' ORDER BY k)), ''), count(*) FROM (SELECT row(` + strings.Join(cols, ", ") +
		`)::text AS r, row(` + order + `)::text || row(` + strings.Join(cols, ", ") + `)::text AS k FROM ` + view + `) s`
	if err := c.QueryRowContext(t.Context(), q).Scan(&d, &n); err != nil {
		t.Fatal(err)
	}
	return d + " " + strconv.Itoa(n)
}

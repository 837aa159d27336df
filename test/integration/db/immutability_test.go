package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// history records one job with a transition, a pod with a stored and an unavailable log, a
// segment and a gap: one row of each table the archiver writes.
func history(t *testing.T, records *db.DB, uid string) {
	t.Helper()
	ctx := t.Context()
	mustUpsertJob(t, records, newJob(uid).build())
	if _, err := records.RecordTransitions(ctx, uid, []record.Transition{{Phase: "Running", Time: at(time.Minute), Source: record.SourceObserved}}); err != nil {
		t.Fatalf("RecordTransitions: %v", err)
	}
	pod := "pod-" + uid
	if err := records.UpsertPod(ctx, newPod(pod, uid)); err != nil {
		t.Fatalf("UpsertPod: %v", err)
	}
	if err := records.PutLogObject(ctx, storedLog(pod, "main", "current")); err != nil {
		t.Fatalf("PutLogObject stored: %v", err)
	}
	unavailable := record.LogObject{PodUID: pod, Container: "side", ContainerType: record.ContainerRegular, Instance: "current",
		State: record.LogUnavailable, Reason: "node lost"}
	if err := records.PutLogObject(ctx, unavailable); err != nil {
		t.Fatalf("PutLogObject unavailable: %v", err)
	}
	if err := records.PutSegment(ctx, record.Segment{PodUID: pod, Container: "main", Run: 1, ObjectKey: "seg/0", StoredBytes: 1, Bytes: 1,
		TotalBytes: 1, LastTime: at(time.Minute), HashState: []byte{1}}); err != nil {
		t.Fatalf("PutSegment: %v", err)
	}
	if err := records.PutGap(ctx, record.Gap{PodUID: pod, Container: "main", Run: 0, After: at(time.Minute), Reason: "rotated"}); err != nil {
		t.Fatalf("PutGap: %v", err)
	}
}

// sqlState is the SQLSTATE of err, or "" if it has none.
func sqlState(err error) pqerror.Code {
	if e := pq.As(err); e != nil {
		return e.Code
	}
	return ""
}

// TestDBAppendOnly: phase transitions, stored log rows and log gaps refuse UPDATE, DELETE (also
// through a cascade from their job or pod) and TRUNCATE with SQLSTATE 23001 and a message naming
// the table, for the tables' owner too; the archiver's idempotent upserts still work, an
// unavailable log may still become stored, and the pruner's transaction (SET LOCAL
// jobvault.prune = 'on') may delete, but never update, and only until it ends.
func TestDBAppendOnly(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	history(t, records, "u1")

	refused := func(t *testing.T, stmt, table string) {
		t.Helper()
		_, err := c.ExecContext(ctx, stmt)
		if sqlState(err) != pqerror.RestrictViolation || !strings.Contains(err.Error(), table) {
			t.Errorf("%s = %v, want SQLSTATE 23001 naming %s", stmt, err, table)
		}
	}
	for _, tc := range []struct{ stmt, table string }{
		{`UPDATE job_transitions SET reason = 'forged'`, "job_transitions"},
		{`UPDATE job_transitions SET transition_time = transition_time`, "job_transitions"},
		{`DELETE FROM job_transitions`, "job_transitions"},
		{`TRUNCATE job_transitions`, "job_transitions"},
		{`UPDATE log_objects SET sha256 = repeat('cd', 32) WHERE state = 'stored'`, "log_objects"},
		{`UPDATE log_objects SET state = 'unavailable', reason = 'forged' WHERE state = 'stored'`, "log_objects"},
		{`DELETE FROM log_objects WHERE state = 'stored'`, "log_objects"},
		{`TRUNCATE log_objects`, "log_objects"},
		{`UPDATE log_gaps SET reason = 'forged'`, "log_gaps"},
		{`DELETE FROM log_gaps`, "log_gaps"},
		{`TRUNCATE log_gaps`, "log_gaps"},
		// Cascades count as deletes.
		{`DELETE FROM jobs WHERE uid = 'u1'`, "job_transitions"},
		{`DELETE FROM pods WHERE uid = 'pod-u1'`, "log_"},
	} {
		refused(t, tc.stmt, tc.table)
	}
	if n := queryInt(t, c, `SELECT (SELECT count(*) FROM job_transitions) + (SELECT count(*) FROM log_objects) + (SELECT count(*) FROM log_gaps)`); n != 4 {
		t.Errorf("append-only rows after the refused writes = %d, want 4", n)
	}

	// What pkg/db reports, and what the archiver's upserts still do.
	forged := storedLog("pod-u1", "main", "current")
	forged.SHA256 = strings.Repeat("cd", 32)
	if err := records.PutLogObject(ctx, forged); !errors.Is(err, db.ErrAppendOnly) {
		t.Errorf("PutLogObject changing a stored log = %v, want ErrAppendOnly", err)
	}
	before, err := records.PodLogObjects(ctx, "pod-u1")
	if err != nil {
		t.Fatal(err)
	}
	history(t, records, "u1") // every upsert again: no-ops
	nowStored := storedLog("pod-u1", "side", "current")
	if err := records.PutLogObject(ctx, nowStored); err != nil {
		t.Errorf("PutLogObject turning an unavailable log into a stored one: %v", err)
	}
	after, err := records.PodLogObjects(ctx, "pod-u1")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 2 || !after[0].UpdatedAt.Equal(before[0].UpdatedAt) || after[1].State != record.LogStored {
		t.Errorf("log objects after repeated upserts = %+v, want the stored one untouched and the other stored", after)
	}
	if _, err := c.ExecContext(ctx, `DELETE FROM log_segments`); err != nil {
		t.Errorf("DELETE FROM log_segments (assembled segments go): %v", err)
	}

	// The pruner's transaction deletes, cascades included; it never updates; and its setting
	// ends with it.
	conn, err := c.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	inPrune := func(stmts ...string) error {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for _, s := range append([]string{`SET LOCAL jobvault.prune = 'on'`}, stmts...) {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
	if err := inPrune(`UPDATE job_transitions SET reason = 'forged'`); sqlState(err) != pqerror.RestrictViolation {
		t.Errorf("UPDATE in the pruner's transaction = %v, want SQLSTATE 23001", err)
	}
	if err := inPrune(`DELETE FROM pods WHERE uid = 'pod-u1'`, `DELETE FROM jobs WHERE uid = 'u1'`); err != nil {
		t.Errorf("deletes in the pruner's transaction: %v", err)
	}
	if n := queryInt(t, c, `SELECT (SELECT count(*) FROM job_transitions) + (SELECT count(*) FROM log_objects) + (SELECT count(*) FROM log_gaps)`); n != 0 {
		t.Errorf("append-only rows after the prune = %d, want 0", n)
	}
	history(t, records, "u2")
	if _, err := conn.ExecContext(ctx, `DELETE FROM job_transitions`); sqlState(err) != pqerror.RestrictViolation {
		t.Errorf("DELETE on the pruner's connection after its transaction = %v, want SQLSTATE 23001", err)
	}
}

// TestDBRoles uses the roles the migration creates, as login roles that are their members:
// jobvault_writer runs every write of the archiver but cannot update or delete append-only rows,
// nor drop or disable the triggers; jobvault_auditor can read the audit views and nothing else.
func TestDBRoles(t *testing.T) {
	ctx := t.Context()
	owner, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	for _, role := range []string{"jobvault_writer", "jobvault_pruner", "jobvault_auditor", "jobvault_agent"} {
		if n := queryInt(t, c, `SELECT count(*) FROM pg_roles WHERE rolname = $1 AND NOT rolcanlogin AND NOT rolsuper`, role); n != 1 {
			t.Errorf("role %s: %d NOLOGIN non-superuser roles, want 1", role, n)
		}
	}

	t.Run("writer", func(t *testing.T) {
		writer, wdsn := openAsRole(t, dsn, "jobvault_writer")
		history(t, writer, "w1")
		history(t, writer, "w1")
		if err := writer.DeleteSegments(ctx, "pod-w1", "main", 1); err != nil {
			t.Errorf("DeleteSegments as the writer: %v", err)
		}
		if err := writer.MarkPodArchived(ctx, "pod-w1", at(time.Hour), ""); err != nil {
			t.Errorf("MarkPodArchived as the writer: %v", err)
		}
		if err := writer.MarkJobArchived(ctx, "w1", "s3://b/p/", at(time.Hour), ""); err != nil {
			t.Errorf("MarkJobArchived as the writer: %v", err)
		}
		// The archiver's finalization: the job into the audit chain.
		history(t, writer, "w2")
		if _, err := writer.FinalizeJob(ctx, record.Finalization{Cluster: "c", JobUID: "w2", Location: "s3://b/p/", ArchivedAt: at(time.Hour),
			ManifestKey: "p/manifest.json", RecordDigest: strings.Repeat("a", 64)}, func(int64, string) ([]byte, error) { return []byte("{}"), nil }); err != nil {
			t.Errorf("FinalizeJob as the writer: %v", err)
		}
		for _, read := range []func() error{
			func() error { _, err := writer.Transitions(ctx, "w1"); return err },
			func() error { _, err := writer.LogObjects(ctx, "w1"); return err },
			func() error { _, err := writer.Gaps(ctx, "w1"); return err },
			func() error { _, _, err := writer.Version(ctx); return err },
		} {
			if err := read(); err != nil {
				t.Errorf("read as the writer: %v", err)
			}
		}

		wc := rawDB(t, wdsn)
		for _, tc := range []struct {
			stmt string
			want pqerror.Code
		}{
			{`UPDATE job_transitions SET reason = 'forged'`, pqerror.InsufficientPrivilege},
			{`DELETE FROM job_transitions`, pqerror.InsufficientPrivilege},
			{`DELETE FROM log_objects`, pqerror.InsufficientPrivilege},
			{`DELETE FROM log_gaps`, pqerror.InsufficientPrivilege},
			{`DELETE FROM jobs`, pqerror.InsufficientPrivilege},
			{`DELETE FROM pods`, pqerror.InsufficientPrivilege},
			{`TRUNCATE job_transitions`, pqerror.InsufficientPrivilege},
			{`UPDATE log_objects SET sha256 = repeat('cd', 32) WHERE state = 'stored'`, pqerror.RestrictViolation},
			{`DROP TRIGGER job_transitions_append_only ON job_transitions`, pqerror.InsufficientPrivilege},
			{`ALTER TABLE log_objects DISABLE TRIGGER log_objects_stored_final`, pqerror.InsufficientPrivilege},
			{`DROP FUNCTION jobvault_append_only() CASCADE`, pqerror.InsufficientPrivilege},
			{`CREATE OR REPLACE FUNCTION jobvault_pruning() RETURNS boolean LANGUAGE sql AS 'SELECT true'`, pqerror.InsufficientPrivilege},
			{`INSERT INTO schema_migrations VALUES (99, false)`, pqerror.InsufficientPrivilege},
		} {
			_, err := wc.ExecContext(ctx, tc.stmt)
			if got := sqlState(err); got != tc.want {
				t.Errorf("as the writer: %s = %v (SQLSTATE %q), want SQLSTATE %s", tc.stmt, err, got, tc.want)
			}
		}
		// Not even in a transaction that claims to be the pruner's.
		tx, err := wc.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `SET LOCAL jobvault.prune = 'on'`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM job_transitions`); sqlState(err) != pqerror.InsufficientPrivilege {
			t.Errorf("as the writer, DELETE in a transaction with jobvault.prune on = %v, want SQLSTATE 42501", err)
		}
	})

	// The retention pruner: the writer alone cannot record or delete anything pruned; the writer
	// with jobvault_pruner does both, as the archiver's pruner calls them.
	t.Run("pruner", func(t *testing.T) {
		history(t, owner, "p1")
		fin, err := owner.FinalizeJob(ctx, record.Finalization{Cluster: "c", JobUID: "p1", Location: "s3://b/p1/", ArchivedAt: at(time.Hour),
			ManifestKey: "p1/manifest.json", RecordDigest: strings.Repeat("a", 64), RetainUntil: at(2 * time.Hour)},
			func(int64, string) ([]byte, error) { return []byte("{}"), nil })
		if err != nil {
			t.Fatal(err)
		}
		prune := []record.Prune{{Cluster: "c", Seq: fin.Entry.Seq, JobUID: "p1", ManifestSHA256: fin.Entry.ManifestSHA256,
			RetainUntil: at(2 * time.Hour), Policy: "retention 1h0m0s (--retention)", Objects: []string{"p1/manifest.json"}, PrunedAt: at(3 * time.Hour)}}

		writer, _ := openAsRole(t, dsn, "jobvault_writer")
		if err := writer.RecordPrunes(ctx, prune); sqlState(err) != pqerror.InsufficientPrivilege {
			t.Errorf("RecordPrunes as the writer alone = %v, want permission denied", err)
		}

		pdsn := stack.LoginRole(t, dsn, "jobvault_writer", "jobvault_pruner")
		pruner, err := db.Open(ctx, pdsn, db.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pruner.Close() })
		if err := pruner.RecordPrunes(ctx, prune); err != nil {
			t.Fatalf("RecordPrunes as writer and pruner: %v", err)
		}
		if n, err := pruner.DeletePrunedRows(ctx, []string{"p1"}); err != nil || n != 1 {
			t.Fatalf("DeletePrunedRows as writer and pruner = %d, %v; want 1 job deleted", n, err)
		}
		for _, table := range []string{"jobs WHERE uid", "job_transitions WHERE job_uid", "pods WHERE job_uid"} {
			if n := queryInt(t, c, `SELECT count(*) FROM `+table+` = 'p1'`); n != 0 {
				t.Errorf("%s = 'p1': %d rows left after the prune", table, n)
			}
		}
		// Outside a pruner's transaction, the pruner's DELETE is still refused by the triggers.
		pc := rawDB(t, pdsn)
		history(t, owner, "p2")
		if _, err := pc.ExecContext(ctx, `DELETE FROM jobs WHERE uid = 'p2'`); sqlState(err) == "" {
			t.Errorf("as the pruner, DELETE outside a transaction with jobvault.prune on succeeded, want refused")
		}
	})

	t.Run("auditor", func(t *testing.T) {
		history(t, owner, "a1")
		adsn := stack.LoginRole(t, dsn, "jobvault_auditor")
		ac := rawDB(t, adsn)
		views := []string{"audit_submissions", "audit_outcomes", "audit_retries", "audit_log_objects", "audit_log_gaps"}
		for _, v := range views {
			if _, err := ac.ExecContext(ctx, `SELECT * FROM `+v); err != nil {
				t.Errorf("as the auditor: SELECT FROM %s: %v", v, err)
			}
		}
		if n := queryInt(t, ac, `SELECT count(*) FROM audit_log_objects WHERE job_uid = 'a1'`); n != 2 {
			t.Errorf("as the auditor: audit_log_objects rows of a1 = %d, want 2", n)
		}
		for _, stmt := range []string{`SELECT * FROM jobs`, `SELECT * FROM job_transitions`, `SELECT * FROM log_objects`,
			`SELECT * FROM schema_migrations`, `INSERT INTO jobs (uid, namespace, name, created_at) VALUES ('x', 'n', 'x', now())`,
			`DELETE FROM audit_submissions`} {
			if _, err := ac.ExecContext(ctx, stmt); sqlState(err) != pqerror.InsufficientPrivilege {
				t.Errorf("as the auditor: %s = %v, want SQLSTATE 42501", stmt, err)
			}
		}
		// Nothing else: every privilege the auditor holds on this database's relations.
		got := rolePrivileges(t, c, "jobvault_auditor")
		var want []string
		for _, v := range append(views, "audit_chain", "audit_chain_heads", "audit_digests", "audit_prunes", "audit_log_sources") {
			want = append(want, v+":SELECT")
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("auditor privileges = %v, want %v", got, want)
		}
	})
}

// dropRoles removes the jobvault roles from the Postgres server, with their
// privileges in every database. Roles belong to the whole server, which the tests of this process
// share: none of this package's tests runs in parallel.
func dropRoles(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	pg := testbed.PostgresCluster(t)
	admin := rawDB(t, pg.AdminDSN())
	if queryInt(t, admin, `SELECT count(*) FROM pg_roles WHERE rolname IN ('jobvault_writer', 'jobvault_pruner', 'jobvault_auditor', 'jobvault_agent')`) != 4 {
		t.Fatal("the roles should exist before this test drops them")
	}
	for _, name := range queryStrings(t, admin, `SELECT datname FROM pg_database WHERE datallowconn`) {
		c, err := sql.Open("postgres", pg.DSN(name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ExecContext(ctx, `DROP OWNED BY jobvault_writer, jobvault_pruner, jobvault_auditor, jobvault_agent`)
		c.Close()
		if err != nil {
			t.Fatalf("revoke the roles' privileges in %s: %v", name, err)
		}
	}
	if _, err := admin.ExecContext(ctx, `DROP ROLE jobvault_writer, jobvault_pruner, jobvault_auditor, jobvault_agent`); err != nil {
		t.Fatal(err)
	}
}

// TestDBMigrateWithoutCreateRole: a migrating user that owns the database but may not create roles
// (as on managed Postgres) applies every migration all the same, with a warning naming the
// missing roles and the remedy; a DBA then creates the roles and, as the tables' owner, grants
// them with jobvault_grant_roles().
func TestDBMigrateWithoutCreateRole(t *testing.T) {
	ctx := t.Context()
	dsn := testbed.Postgres(t)
	c := rawDB(t, dsn)
	stack.OpenRecords(t) // the roles exist once any database is migrated
	dropRoles(t)

	name := fmt.Sprintf("jv_test_owner_%d", rand.Uint32())
	var dbName string
	if err := c.QueryRowContext(ctx, `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf(`CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEROLE`, name), fmt.Sprintf(`ALTER DATABASE %q OWNER TO %s`, dbName, name)} {
		if _, err := c.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The database goes with the test's cleanup (registered earlier, so it runs later):
		// hand it and the role's objects back first.
		for _, s := range []string{fmt.Sprintf(`ALTER DATABASE %q OWNER TO postgres`, dbName), `REASSIGN OWNED BY ` + name + ` TO postgres`, `DROP OWNED BY ` + name, `DROP ROLE ` + name} {
			if _, err := c.ExecContext(cctx, s); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	})
	ownerDSN := stack.DSNAs(t, dsn, name)
	records, err := db.Open(ctx, ownerDSN, db.Options{Migrate: true})
	if err != nil {
		t.Fatalf("Open with Migrate by a user without CREATEROLE: %v", err)
	}
	defer records.Close()
	assertVersion(t, records, db.LatestVersion)
	if n := queryInt(t, c, `SELECT count(*) FROM pg_roles WHERE rolname IN ('jobvault_writer', 'jobvault_pruner', 'jobvault_auditor', 'jobvault_agent')`); n != 0 {
		t.Errorf("%d jobvault roles after a migration by a user without CREATEROLE, want 0", n)
	}
	pgLog, err := os.ReadFile(testbed.PostgresCluster(t).Proc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"jobvault_writer", "jobvault_pruner", "jobvault_auditor", "jobvault_agent"} {
		if want := "WARNING:  jobvault: role " + role + " not created: the migrating user " + name + " lacks CREATEROLE"; !strings.Contains(string(pgLog), want) {
			t.Errorf("Postgres log lacks the warning %q", want)
		}
	}

	// The DBA's remedy, as documented.
	for _, s := range []string{`CREATE ROLE jobvault_writer NOLOGIN`, `CREATE ROLE jobvault_pruner NOLOGIN`, `CREATE ROLE jobvault_auditor NOLOGIN`, `CREATE ROLE jobvault_agent NOLOGIN`} {
		if _, err := c.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rawDB(t, ownerDSN).ExecContext(ctx, `SELECT jobvault_grant_roles()`); err != nil {
		t.Fatalf("jobvault_grant_roles() as the owner: %v", err)
	}
	// The auditor: the five views, the chain's three tables, audit_prunes (0007) and
	// audit_log_sources (0013). The pruner (0008): DELETE on jobs and pods, SELECT and INSERT on
	// audit_prunes. The writer gains 7 with 0013; the agent (0013) has 7 on whole tables (and
	// UPDATE on some columns, not counted here).
	for role, want := range map[string]int{"jobvault_auditor": 10, "jobvault_writer": 36, "jobvault_pruner": 4, "jobvault_agent": 7} {
		if n := queryInt(t, c, `SELECT count(*) FROM information_schema.role_table_grants WHERE grantee = $1 AND table_catalog = current_database()`, role); n != want {
			t.Errorf("table privileges granted to %s = %d, want %d", role, n, want)
		}
	}
}

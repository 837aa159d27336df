package db

import (
	"database/sql"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lib/pq/pqerror"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/test/stack"
)

// TestDBReaderRole: jobvault_reader (migration 0014, the archive API's role) reads a job's
// record, transitions, pods, log objects and gaps, and nothing else; it writes nothing.
func TestDBReaderRole(t *testing.T) {
	ctx := t.Context()
	_, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	reader, rdsn := openAsRole(t, dsn, "jobvault_reader")
	if _, _, err := reader.ListJobs(ctx, db.JobFilter{Namespace: "a", Submitter: "alice"}, db.Cursor{}, 10); err != nil {
		t.Errorf("ListJobs as the reader: %v", err)
	}
	for _, read := range []func() error{
		func() error { _, err := reader.Pods(ctx, "uid"); return err },
		func() error { _, err := reader.LogObjects(ctx, "uid"); return err },
		func() error { _, err := reader.Gaps(ctx, "uid"); return err },
		func() error { _, err := reader.Transitions(ctx, "uid"); return err },
	} {
		if err := read(); err != nil {
			t.Errorf("read as the reader: %v", err)
		}
	}
	rc := rawDB(t, rdsn)
	for _, stmt := range []string{
		`INSERT INTO jobs (uid, namespace, name, created_at) VALUES ('x', 'a', 'j', now())`,
		`UPDATE jobs SET queue = 'q'`,
		`DELETE FROM pods`,
		`SELECT * FROM log_segments`,
		`SELECT * FROM log_runs`,
		`SELECT * FROM audit_chain`,
		`SELECT * FROM capture_agents`,
	} {
		if _, err := rc.ExecContext(ctx, stmt); sqlState(err) != pqerror.InsufficientPrivilege {
			t.Errorf("as the reader: %s = %v, want permission denied", stmt, err)
		}
	}
	want := []string{"job_transitions:SELECT", "jobs:SELECT", "log_gaps:SELECT", "log_objects:SELECT", "pods:SELECT"}
	if diff := cmp.Diff(want, rolePrivileges(t, c, "jobvault_reader")); diff != "" {
		t.Errorf("reader privileges (-want +got):\n%s", diff)
	}
}

// rolePrivileges lists every privilege role holds on this database's relations, as
// "relation:PRIVILEGE", sorted.
func rolePrivileges(t *testing.T, c *sql.DB, role string) []string {
	t.Helper()
	return queryStrings(t, c, `
SELECT c.relname || ':' || p.privilege
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p(privilege)
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm', 'S', 'p')
  AND CASE WHEN p.privilege IN ('SELECT', 'INSERT', 'UPDATE', 'REFERENCES')
           THEN has_any_column_privilege($1, c.oid, p.privilege)
           ELSE has_table_privilege($1, c.oid, p.privilege) END
ORDER BY 1`, role)
}

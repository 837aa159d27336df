package db

import (
	"context"
	"database/sql"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lib/pq/pqerror"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// appendOnlyTriggers maps each table with an append-only trigger to the function its triggers
// run and their arguments ("fn(args)"), both the row and the TRUNCATE trigger.
func appendOnlyTriggers(t *testing.T, c *sql.DB) map[string][]string {
	t.Helper()
	// Our triggers take at most one argument: tgargs holds it NUL-terminated.
	rows, err := c.QueryContext(t.Context(), `SELECT tg.tgrelid::regclass::text, p.proname,
    CASE WHEN tg.tgnargs = 0 THEN '' ELSE convert_from(substring(tg.tgargs FROM 1 FOR position('\x00'::bytea IN tg.tgargs) - 1), 'UTF8') END
FROM pg_trigger tg JOIN pg_proc p ON p.oid = tg.tgfoid
WHERE NOT tg.tgisinternal AND p.proname IN ('jobvault_append_only', 'jobvault_refuse_change')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string][]string{}
	for rows.Next() {
		var table, fn, args string
		if err := rows.Scan(&table, &fn, &args); err != nil {
			t.Fatal(err)
		}
		got[table] = append(got[table], fn+"("+args+")")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, fns := range got {
		sort.Strings(fns)
	}
	return got
}

// refusals checks what the append-only triggers refuse, whichever function runs them: every
// UPDATE; DELETE outside the pruner's transaction; inside it, DELETE of recorded history (a
// transition, a gap) but never of the audit chain's evidence.
func refusals(t *testing.T, c *sql.DB) {
	t.Helper()
	ctx := t.Context()
	inTx := func(prune bool, stmt string) error {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() // nothing a check does stays
		if prune {
			if _, err := tx.ExecContext(ctx, `SET LOCAL jobvault.prune = 'on'`); err != nil {
				t.Fatal(err)
			}
		}
		_, err = tx.ExecContext(ctx, stmt)
		return err
	}
	for _, tc := range []struct {
		prune   bool
		stmt    string
		refused bool
	}{
		{false, `UPDATE job_transitions SET reason = 'forged'`, true},
		{false, `DELETE FROM log_gaps`, true},
		{false, `UPDATE audit_chain SET record_digest = repeat('b', 64)`, true},
		{false, `DELETE FROM audit_chain`, true},
		{false, `TRUNCATE audit_digests`, true},
		{true, `UPDATE job_transitions SET reason = 'forged'`, true},
		{true, `DELETE FROM job_transitions`, false},
		{true, `DELETE FROM log_gaps`, false},
		{true, `TRUNCATE log_sources`, false},
		{true, `DELETE FROM audit_chain`, true},
		{true, `TRUNCATE audit_prunes`, true},
	} {
		err := inTx(tc.prune, tc.stmt)
		table := strings.Fields(strings.NewReplacer("UPDATE ", "", "DELETE FROM ", "", "TRUNCATE ", "").Replace(tc.stmt))[0]
		switch {
		case tc.refused && (sqlState(err) != pqerror.RestrictViolation || !strings.Contains(err.Error(), table) || !strings.Contains(err.Error(), "append-only")):
			t.Errorf("%s (pruner's transaction: %t) = %v, want SQLSTATE 23001 saying %s is append-only", tc.stmt, tc.prune, err, table)
		case !tc.refused && err != nil:
			t.Errorf("%s (pruner's transaction: %t) = %v, want it allowed", tc.stmt, tc.prune, err)
		}
	}
}

// TestDBOneRefusalFunction: migration 0016 leaves one trigger function that keeps rows
// append-only, jobvault_append_only, where 0004 and 0005 had two (jobvault_refuse_change for the
// audit chain's tables, jobvault_append_only for recorded history): the argument 'prunable' says
// whether the pruner's transaction may delete. Its down step restores the two, and what is
// refused is the same at each version.
func TestDBOneRefusalFunction(t *testing.T) {
	ctx := t.Context()
	records, c := openAt(t, db.LatestVersion)
	history(t, records, "j")
	if _, err := records.FinalizeJob(ctx, record.Finalization{Cluster: "c", JobUID: "j", Location: "s3://b/p/", ArchivedAt: at(time.Hour),
		ManifestKey: "p/manifest.json", RecordDigest: strings.Repeat("a", 64)}, func(int64, string) ([]byte, error) { return []byte("{}"), nil }); err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, `INSERT INTO audit_digests (cluster, at, seq, head_sha256, prev_digest, digest_sha256, object_key, document)
VALUES ('c', now(), 1, '', '', repeat('c', 64), 'k', '\x7b7d')`)
	mustExec(t, c, `INSERT INTO audit_prunes (cluster, seq, job_uid, manifest_sha256, retain_until, policy, objects, pruned_at)
VALUES ('c', 1, 'gone', repeat('d', 64), now(), 'test', '{}', now())`)
	mustExec(t, c, `INSERT INTO log_sources (pod_uid, container, run, instance, from_bytes, to_bytes, source)
VALUES ('pod-j', 'main', 0, 'current', 0, 10, 'api')`)

	strict, prunable := []string{"jobvault_append_only()", "jobvault_append_only()"}, []string{"jobvault_append_only(prunable)", "jobvault_append_only(prunable)"}
	one := map[string][]string{"audit_chain": strict, "audit_digests": strict, "audit_prunes": strict,
		"job_transitions": prunable, "log_gaps": prunable, "log_sources": prunable}
	chain, recorded := []string{"jobvault_refuse_change()", "jobvault_refuse_change()"}, []string{"jobvault_append_only()", "jobvault_append_only()"}
	two := map[string][]string{"audit_chain": chain, "audit_digests": chain, "audit_prunes": chain,
		"job_transitions": recorded, "log_gaps": recorded, "log_sources": recorded}
	check := func(version string, want map[string][]string, functions int) {
		t.Helper()
		if diff := cmp.Diff(want, appendOnlyTriggers(t, c)); diff != "" {
			t.Errorf("%s: the append-only triggers' functions (-want +got):\n%s", version, diff)
		}
		if n := queryInt(t, c, `SELECT count(*) FROM pg_proc WHERE proname IN ('jobvault_append_only', 'jobvault_refuse_change')`); n != functions {
			t.Errorf("%s: %d refusal functions, want %d", version, n, functions)
		}
		refusals(t, c)
	}
	check("0016", one, 1)
	if err := records.MigrateTo(ctx, versionBefore(t, 16)); err != nil {
		t.Fatalf("migrate below 0016: %v", err)
	}
	check("below 0016", two, 2)
	if err := records.MigrateTo(ctx, db.LatestVersion); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
	check("0016 again", one, 1)
}

func mustExec(t *testing.T, c *sql.DB, stmt string, args ...any) {
	t.Helper()
	if _, err := c.ExecContext(context.Background(), stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestDBLegalHoldDecidedOnce: what a jobvault.io/legal-hold value means (any value but "" and
// "false" holds) is decided in one place, jobvault_legal_hold, for a job's annotation (the
// retention trigger's legal_hold) and a namespace's (PruneCandidates) alike.
func TestDBLegalHoldDecidedOnce(t *testing.T) {
	ctx := t.Context()
	records, c := openAt(t, db.LatestVersion)
	values := map[string]bool{"": false, "false": false, "true": true, "case 2026-117": true, "False": true, "0": true}
	for v, want := range values {
		var got bool
		if err := c.QueryRowContext(ctx, `SELECT jobvault_legal_hold($1)`, v).Scan(&got); err != nil {
			t.Fatalf("jobvault_legal_hold(%q): %v", v, err)
		}
		if got != want {
			t.Errorf("jobvault_legal_hold(%q) = %t, want %t", v, got, want)
		}
		j := newJob("held-" + v).build()
		j.Annotations = map[string]string{tracking.LegalHoldAnnotation: v}
		mustUpsertJob(t, records, j)
		if n := queryInt(t, c, `SELECT count(*) FROM jobs WHERE uid = $1 AND legal_hold = $2`, j.UID, want); n != 1 {
			t.Errorf("job annotated %q: legal_hold is not %t", v, want)
		}
	}

	// A namespace's value, as the pruner reads it from the API, is decided the same way.
	for _, ns := range []string{"held", "not-held", "unannotated"} {
		mustUpsertJob(t, records, newJob(ns).namespace(ns).phase("Completed").build())
		if _, err := records.FinalizeJob(ctx, record.Finalization{Cluster: "test", JobUID: ns, Location: "s3://b/p/", ArchivedAt: at(time.Hour),
			ManifestKey: ns + "/manifest.json", RecordDigest: strings.Repeat("a", 64), RetainUntil: at(2 * time.Hour)},
			func(int64, string) ([]byte, error) { return []byte("{}"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	cands, err := records.PruneCandidates(ctx, "test", at(3*time.Hour), map[string]string{"held": "case 2026-118", "not-held": "false"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cand := range cands {
		got = append(got, cand.Entry.JobUID)
	}
	sort.Strings(got)
	if diff := cmp.Diff([]string{"not-held", "unannotated"}, got); diff != "" {
		t.Errorf("prune candidates with namespace holds (-want +got):\n%s", diff)
	}
}

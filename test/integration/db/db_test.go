package db

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	migratedb "github.com/golang-migrate/migrate/v4/database"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lib/pq"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// t0 has microsecond precision, as Postgres stores it, so values round-trip exactly.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ptr[T any](v T) *T { return &v }

// rawDB is a plain connection for asserting on the schema and the views.
func rawDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	c, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openAsRole checks that group is a NOLOGIN non-superuser role of dsn's server (the migrations'
// roles only grant), and opens the records as a login role in it (stack.LoginRole): a test then runs
// with exactly the rights group gives. It returns the records and their DSN, both closed or dropped
// when the test ends.
func openAsRole(t *testing.T, dsn, group string) (*db.DB, string) {
	t.Helper()
	if n := queryInt(t, rawDB(t, dsn), `SELECT count(*) FROM pg_roles WHERE rolname = $1 AND NOT rolcanlogin AND NOT rolsuper`, group); n != 1 {
		t.Fatalf("role %s: %d NOLOGIN non-superuser roles, want 1", group, n)
	}
	rdsn := stack.LoginRole(t, dsn, group)
	records, err := db.Open(t.Context(), rdsn, db.Options{})
	if err != nil {
		t.Fatalf("Open as %s: %v", group, err)
	}
	t.Cleanup(func() { records.Close() })
	return records, rdsn
}

func queryInt(t *testing.T, c *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := c.QueryRowContext(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// jobFixture is a small builder for record.Job values.
type jobFixture struct{ record.Job }

func newJob(uid string) *jobFixture {
	return &jobFixture{record.Job{
		UID:       uid,
		Cluster:   "test",
		Namespace: "team-a",
		Name:      "job-" + uid,
		Queue:     "default",
		CreatedAt: t0,
		Phase:     "Pending",
		Labels:    map[string]string{tracking.TrackedLabel: tracking.TrackedValue},
		// JSON in Postgres' canonical jsonb form, so that it reads back byte for byte.
		Spec:   []byte(`{"minAvailable": 1}`),
		Status: []byte(`{"state": {"phase": "Pending"}}`),
	}}
}

func (f *jobFixture) namespace(ns string) *jobFixture { f.Namespace = ns; return f }
func (f *jobFixture) created(t time.Time) *jobFixture { f.CreatedAt = t; return f }
func (f *jobFixture) phase(p string) *jobFixture {
	f.Phase = p
	f.Status = []byte(`{"state": {"phase": "` + p + `"}}`)
	return f
}
func (f *jobFixture) retries(n int32) *jobFixture      { f.RetryCount = n; return f }
func (f *jobFixture) finished(t time.Time) *jobFixture { f.FinishedAt = &t; return f }
func (f *jobFixture) submitter(u string, groups ...string) *jobFixture {
	f.Submitter, f.SubmitterGroups, f.AdmittedAt = u, groups, ptr(f.CreatedAt.Add(-time.Second))
	return f
}
func (f *jobFixture) build() record.Job { return f.Job }

func newPod(uid, jobUID string) record.Pod {
	return record.Pod{UID: uid, JobUID: jobUID, Namespace: "team-a", Name: "pod-" + uid, Task: "worker", Node: "node-1",
		Phase: "Running", CreatedAt: at(time.Minute), StartedAt: ptr(at(2 * time.Minute))}
}

func storedLog(podUID, container, instance string) record.LogObject {
	return record.LogObject{PodUID: podUID, Container: container, ContainerType: record.ContainerRegular, Instance: instance,
		ObjectKey: "logs/team-a/" + podUID + "/" + container + "." + instance + ".log.gz", Bytes: 1000, StoredBytes: 200,
		SHA256: strings.Repeat("ab", 32), State: record.LogStored}
}

func mustUpsertJob(t *testing.T, records *db.DB, j record.Job) {
	t.Helper()
	if err := records.UpsertJob(t.Context(), j); err != nil {
		t.Fatalf("UpsertJob(%s): %v", j.UID, err)
	}
}

func mustJob(t *testing.T, records *db.DB, uid string) record.Job {
	t.Helper()
	j, err := records.Job(t.Context(), uid)
	if err != nil {
		t.Fatalf("Job(%s): %v", uid, err)
	}
	return j
}

var ignoreDBStamps = cmpopts.IgnoreFields(record.Job{}, "RecordedAt", "UpdatedAt")

func TestDBMigrations(t *testing.T) {
	ctx := t.Context()
	dsn := testbed.Postgres(t)
	c := rawDB(t, dsn)

	records, err := db.Open(ctx, dsn, db.Options{Migrate: true})
	if err != nil {
		t.Fatalf("Open with Migrate: %v", err)
	}
	defer records.Close()
	assertVersion(t, records, db.LatestVersion)
	// The migration lock is released, not parked on a pooled connection.
	if n := queryInt(t, c, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
WHERE l.locktype = 'advisory' AND d.datname = current_database()`); n != 0 {
		t.Errorf("%d advisory locks held after Open with Migrate", n)
	}
	for _, rel := range []string{"jobs", "job_transitions", "pods", "log_objects",
		"audit_submissions", "audit_outcomes", "audit_retries", "audit_log_objects"} {
		if n := queryInt(t, c, `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)`, rel); n != 1 {
			t.Errorf("relation %s missing after migration", rel)
		}
	}

	// Re-applying is a no-op: same version, data untouched.
	mustUpsertJob(t, records, newJob("u1").build())
	if err := records.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	again, err := db.Open(ctx, dsn, db.Options{Migrate: true})
	if err != nil {
		t.Fatalf("second Open with Migrate: %v", err)
	}
	again.Close()
	assertVersion(t, records, db.LatestVersion)
	if n := queryInt(t, c, `SELECT count(*) FROM jobs`); n != 1 {
		t.Errorf("jobs after re-migrating = %d, want 1", n)
	}

	// Down removes every jobvault object; up again restores a working schema.
	if err := records.MigrateDown(ctx); err != nil {
		t.Fatalf("MigrateDown: %v", err)
	}
	assertVersion(t, records, 0)
	left := queryInt(t, c, `
SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'S') AND c.relname <> 'schema_migrations')
     + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = current_schema() AND p.proname LIKE 'jobvault%')`)
	if left != 0 {
		t.Errorf("%d tables, views, sequences or functions left after MigrateDown", left)
	}
	if err := records.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after down: %v", err)
	}
	assertVersion(t, records, db.LatestVersion)
	mustUpsertJob(t, records, newJob("u1").build())
}

// TestDBLatestVersion keeps db.LatestVersion in step with the migration files.
func TestDBLatestVersion(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testbed.ModuleRoot(), "pkg", "db", "migrations", "*.up.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	latest := 0
	for _, f := range files {
		v, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		if err != nil {
			t.Fatalf("migration %s: version: %v", f, err)
		}
		if _, err := os.Stat(strings.TrimSuffix(f, ".up.sql") + ".down.sql"); err != nil {
			t.Errorf("migration %s has no down migration", f)
		}
		latest = max(latest, v)
	}
	if latest != db.LatestVersion {
		t.Errorf("latest migration is %d, db.LatestVersion is %d", latest, db.LatestVersion)
	}
}

func assertVersion(t *testing.T, records *db.DB, want uint) {
	t.Helper()
	v, dirty, err := records.Version(t.Context())
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	if v != want || dirty {
		t.Errorf("Version = %d (dirty %t), want %d (clean)", v, dirty, want)
	}
}

// TestDBConcurrentMigrate starts four "replicas" at once on an empty database: the advisory lock
// lets exactly one migrate and the others find the schema in place.
func TestDBConcurrentMigrate(t *testing.T) {
	ctx := t.Context()
	dsn := testbed.Postgres(t)
	const replicas = 4
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, replicas)
	)
	for i := range replicas {
		wg.Go(func() {
			<-start
			records, err := db.Open(ctx, dsn, db.Options{Migrate: true, MaxOpenConns: 2})
			if err == nil {
				err = records.Close()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Open with Migrate: %v", err)
	}
	c := rawDB(t, dsn)
	if n := queryInt(t, c, `SELECT count(*) FROM schema_migrations WHERE version = $1 AND NOT dirty`, db.LatestVersion); n != 1 {
		t.Errorf("schema_migrations rows at version %d = %d, want 1", db.LatestVersion, n)
	}
}

// TestDBMigrateWaitsForLockWithContext: while another session holds the migration lock, Migrate
// waits, gives up when its context ends, and succeeds once the lock is free.
func TestDBMigrateWaitsForLockWithContext(t *testing.T) {
	ctx := t.Context()
	dsn := testbed.Postgres(t)
	c := rawDB(t, dsn)
	holder, err := c.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var dbName, schema string
	if err := holder.QueryRowContext(ctx, `SELECT current_database(), current_schema()`).Scan(&dbName, &schema); err != nil {
		t.Fatal(err)
	}
	lockID, err := migratedb.GenerateAdvisoryLockId(dbName, schema, "schema_migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock($1::bigint)`, lockID); err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if records, err := db.Open(short, dsn, db.Options{Migrate: true}); err == nil {
		records.Close()
		t.Fatal("Open with Migrate succeeded while another session held the migration lock")
	}

	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_unlock($1::bigint)`, lockID); err != nil {
		t.Fatal(err)
	}
	records, err := db.Open(ctx, dsn, db.Options{Migrate: true})
	if err != nil {
		t.Fatalf("Open with Migrate after the lock was released: %v", err)
	}
	defer records.Close()
	assertVersion(t, records, db.LatestVersion)
}

func TestDBOpenRejectsBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		dsn  string
		opts db.Options
	}{
		"empty DSN":        {dsn: "", opts: db.Options{}},
		"negative options": {dsn: "postgres://127.0.0.1:1/x", opts: db.Options{MaxOpenConns: -1, ConnMaxLifetime: -time.Second}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := db.Open(t.Context(), tc.dsn, tc.opts); !errors.Is(err, db.ErrInvalid) {
				t.Errorf("Open = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestDBUpsertJobIdempotent(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)

	want := newJob("u1").submitter("alice", "dev", "system:authenticated").retries(1).build()
	want.Annotations = map[string]string{tracking.SubmitterAnnotation: "alice"}
	mustUpsertJob(t, records, want)
	first := mustJob(t, records, "u1")
	want.ArchiveState = record.ArchivePending
	if diff := cmp.Diff(want, first, ignoreDBStamps); diff != "" {
		t.Errorf("Job after upsert (-want +got):\n%s", diff)
	}

	// The same upsert again changes nothing, not even updated_at or the row version.
	xmin := func() string {
		var x string
		if err := c.QueryRowContext(ctx, `SELECT xmin::text FROM jobs WHERE uid = 'u1'`).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	before := xmin()
	mustUpsertJob(t, records, want)
	if diff := cmp.Diff(first, mustJob(t, records, "u1")); diff != "" {
		t.Errorf("Job after repeated upsert (-first +again):\n%s", diff)
	}
	if after := xmin(); after != before {
		t.Errorf("repeated upsert wrote a new row version (xmin %s -> %s)", before, after)
	}
	if n := queryInt(t, c, `SELECT count(*) FROM jobs`); n != 1 {
		t.Errorf("jobs = %d, want 1", n)
	}

	// Unknown (empty/nil) fields never erase recorded ones; a later submitter never replaces the
	// first; a real change bumps updated_at.
	update := newJob("u1").phase("Running").build()
	update.Submitter, update.SubmitterGroups = "mallory", []string{"evil"}
	update.Queue, update.Spec = "", nil
	mustUpsertJob(t, records, update)
	got := mustJob(t, records, "u1")
	if got.Submitter != "alice" || !slices.Equal(got.SubmitterGroups, []string{"dev", "system:authenticated"}) || got.AdmittedAt == nil {
		t.Errorf("submitter after update = %q %v %v, want alice's, recorded first", got.Submitter, got.SubmitterGroups, got.AdmittedAt)
	}
	if got.Queue != "default" || string(got.Spec) != `{"minAvailable": 1}` {
		t.Errorf("queue, spec after update with them unknown = %q, %s; want them kept", got.Queue, got.Spec)
	}
	if got.Phase != "Running" || got.RetryCount != 1 {
		t.Errorf("phase, retries = %s, %d; want Running, 1", got.Phase, got.RetryCount)
	}
	if !got.UpdatedAt.After(first.UpdatedAt) || !got.RecordedAt.Equal(first.RecordedAt) {
		t.Errorf("stamps: recorded %v -> %v, updated %v -> %v", first.RecordedAt, got.RecordedAt, first.UpdatedAt, got.UpdatedAt)
	}

	// A job with no submitter (admitted while the webhook was down) gets one later, once.
	mustUpsertJob(t, records, newJob("u2").build())
	if got := mustJob(t, records, "u2"); got.Submitter != "" || got.SubmitterGroups != nil || got.AdmittedAt != nil {
		t.Errorf("unknown submitter recorded as %q %v %v", got.Submitter, got.SubmitterGroups, got.AdmittedAt)
	}
	mustUpsertJob(t, records, newJob("u2").submitter("bob").build())
	if got := mustJob(t, records, "u2"); got.Submitter != "bob" {
		t.Errorf("submitter = %q, want bob", got.Submitter)
	}
}

func TestDBJobPhaseAndArchiveOnlyMoveForward(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)

	done := newJob("u1").phase("Completed").finished(at(time.Hour)).build()
	mustUpsertJob(t, records, done)
	// A stale cache replays Running: phase, status and finish time stay.
	mustUpsertJob(t, records, newJob("u1").phase("Running").build())
	got := mustJob(t, records, "u1")
	if got.Phase != "Completed" || got.FinishedAt == nil || string(got.Status) != `{"state": {"phase": "Completed"}}` {
		t.Errorf("after stale Running: phase %s, finished %v, status %s; want Completed kept", got.Phase, got.FinishedAt, got.Status)
	}

	// Aborted is not terminal: Volcano may resume the job.
	mustUpsertJob(t, records, newJob("u2").phase("Aborted").build())
	mustUpsertJob(t, records, newJob("u2").phase("Running").build())
	if got := mustJob(t, records, "u2"); got.Phase != "Running" {
		t.Errorf("Aborted then Running: phase %s, want Running", got.Phase)
	}

	if err := records.MarkJobArchived(ctx, "u1", "s3://bucket/team-a/job-u1/u1/", at(2*time.Hour), ""); err != nil {
		t.Fatalf("MarkJobArchived: %v", err)
	}
	archived := mustJob(t, records, "u1")
	if archived.ArchiveState != record.ArchiveArchived || archived.ArchivedAt == nil || !archived.ArchivedAt.Equal(at(2*time.Hour)) ||
		archived.ArchiveLocation != "s3://bucket/team-a/job-u1/u1/" || archived.ReleaseReason != "" {
		t.Errorf("after MarkJobArchived: %s %v %q %q", archived.ArchiveState, archived.ArchivedAt, archived.ArchiveLocation, archived.ReleaseReason)
	}
	// Repeating, releasing, or upserting a pending job never moves the archive state.
	if err := records.MarkJobArchived(ctx, "u1", "elsewhere", at(3*time.Hour), ""); err != nil {
		t.Fatalf("repeated MarkJobArchived: %v", err)
	}
	if err := records.MarkJobArchived(ctx, "u1", "", at(3*time.Hour), "deadline"); err != nil {
		t.Fatalf("MarkJobArchived with release after archive: %v", err)
	}
	mustUpsertJob(t, records, done)
	if diff := cmp.Diff(archived, mustJob(t, records, "u1")); diff != "" {
		t.Errorf("archived job changed (-want +got):\n%s", diff)
	}

	// Released: with the reason.
	if err := records.MarkJobArchived(ctx, "u2", "", time.Time{}, "escape hatch: operator"); err != nil {
		t.Fatalf("MarkJobArchived (release): %v", err)
	}
	if got := mustJob(t, records, "u2"); got.ArchiveState != record.ArchiveReleased || got.ReleaseReason != "escape hatch: operator" || got.ArchivedAt == nil {
		t.Errorf("released job: %s %q %v", got.ArchiveState, got.ReleaseReason, got.ArchivedAt)
	}

	if err := records.MarkJobArchived(ctx, "nope", "", at(0), ""); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("MarkJobArchived(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := records.Job(ctx, "nope"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Job(unknown) = %v, want ErrNotFound", err)
	}
}

func TestDBInvalidInputChangesNothing(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	mustUpsertJob(t, records, newJob("u1").build())
	if err := records.UpsertPod(ctx, newPod("p1", "u1")); err != nil {
		t.Fatal(err)
	}

	badJob := newJob("u2").build()
	badJob.Name, badJob.Spec, badJob.ArchiveState = "", []byte(`{`), "lost"
	badPod := newPod("", "u1")
	badLog := storedLog("p1", "main", "previous")
	badLog.SHA256 = "ABC"
	for name, err := range map[string]error{
		"job":        records.UpsertJob(ctx, badJob),
		"pod":        records.UpsertPod(ctx, badPod),
		"log object": records.PutLogObject(ctx, badLog),
		"transition": func() error {
			_, err := records.RecordTransitions(ctx, "u1", []record.Transition{{Phase: "Running", Time: at(0), Source: "guess"}})
			return err
		}(),
	} {
		if !errors.Is(err, db.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// Every problem is reported at once.
	if err := records.UpsertJob(ctx, badJob); err == nil || !strings.Contains(err.Error(), "Name is empty") ||
		!strings.Contains(err.Error(), "Spec is not valid JSON") || !strings.Contains(err.Error(), "ArchiveState") {
		t.Errorf("UpsertJob(bad) = %v, want every problem listed", err)
	}
	for table, want := range map[string]int{"jobs": 1, "pods": 1, "log_objects": 0, "job_transitions": 0} {
		if n := queryInt(t, c, `SELECT count(*) FROM `+table); n != want {
			t.Errorf("%s rows = %d, want %d", table, n, want)
		}
	}
}

func TestDBTransitionsRecordedOnceAndNotified(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)

	listener := pq.NewListener(dsn, 10*time.Millisecond, time.Second, nil)
	defer listener.Close()
	if err := listener.Listen(db.NotifyChannel); err != nil {
		t.Fatalf("Listen: %v", err)
	}

	mustUpsertJob(t, records, newJob("u1").phase("Running").build())
	conditions := []record.Transition{
		{Phase: "Pending", Time: at(0), Reason: "Created", ResourceVersion: "10", Source: record.SourceCondition},
		{Phase: "Running", Time: at(time.Minute), ResourceVersion: "12", Source: record.SourceCondition},
		{Phase: "Running", Time: at(time.Minute), ResourceVersion: "12", Source: record.SourceObserved}, // same transition, seen live
		{Phase: "Restarting", Time: at(2 * time.Minute), Message: "pod failed", Source: record.SourceCondition, ObservedAt: at(3 * time.Minute)},
	}
	n, err := records.RecordTransitions(ctx, "u1", conditions)
	if err != nil {
		t.Fatalf("RecordTransitions: %v", err)
	}
	if n != 3 {
		t.Errorf("inserted = %d, want 3", n)
	}
	// The archiver passes the whole list again on every reconcile: nothing new.
	if n, err := records.RecordTransitions(ctx, "u1", conditions); err != nil || n != 0 {
		t.Errorf("repeated RecordTransitions = %d, %v; want 0, nil", n, err)
	}
	// A new one later.
	if n, err := records.RecordTransitions(ctx, "u1", append(conditions, record.Transition{Phase: "Running", Time: at(4 * time.Minute), Source: record.SourceObserved})); err != nil || n != 1 {
		t.Errorf("RecordTransitions with one new = %d, %v; want 1, nil", n, err)
	}

	got, err := records.Transitions(ctx, "u1")
	if err != nil {
		t.Fatalf("Transitions: %v", err)
	}
	want := []record.Transition{
		{Phase: "Pending", Time: at(0), Reason: "Created", ResourceVersion: "10", Source: record.SourceCondition},
		{Phase: "Running", Time: at(time.Minute), ResourceVersion: "12", Source: record.SourceCondition},
		{Phase: "Restarting", Time: at(2 * time.Minute), Message: "pod failed", Source: record.SourceCondition, ObservedAt: at(3 * time.Minute)},
		{Phase: "Running", Time: at(4 * time.Minute), Source: record.SourceObserved},
	}
	ignore := cmpopts.IgnoreFields(record.Transition{}, "ID", "ObservedAt")
	if diff := cmp.Diff(want, got, ignore); diff != "" {
		t.Errorf("Transitions (-want +got):\n%s", diff)
	}
	if len(got) == 4 && (!got[2].ObservedAt.Equal(at(3*time.Minute)) || got[0].ObservedAt.IsZero()) {
		t.Errorf("observed_at: given %v, defaulted %v", got[2].ObservedAt, got[0].ObservedAt)
	}
	if n := queryInt(t, c, `SELECT count(*) FROM job_transitions`); n != 4 {
		t.Errorf("job_transitions rows = %d, want 4", n)
	}

	// One notification per new row, in order, and none for the duplicates.
	var notes []db.Notification
	deadline := time.After(10 * time.Second)
	for len(notes) < 4 {
		select {
		case pn := <-listener.Notify:
			if pn == nil { // reconnected
				continue
			}
			if pn.Channel != db.NotifyChannel {
				t.Errorf("notification on %q", pn.Channel)
			}
			note, err := db.ParseNotification(pn.Extra)
			if err != nil {
				t.Fatalf("ParseNotification(%s): %v", pn.Extra, err)
			}
			notes = append(notes, note)
		case <-deadline:
			t.Fatalf("got %d notifications, want 4: %+v", len(notes), notes)
		}
	}
	var wantNotes []db.Notification
	for _, tr := range want {
		wantNotes = append(wantNotes, db.Notification{UID: "u1", Namespace: "team-a", Name: "job-u1", Phase: tr.Phase, Time: tr.Time})
	}
	if diff := cmp.Diff(wantNotes, notes); diff != "" {
		t.Errorf("notifications (-want +got):\n%s", diff)
	}
	select {
	case pn := <-listener.Notify:
		if pn != nil {
			t.Errorf("extra notification: %s", pn.Extra)
		}
	case <-time.After(500 * time.Millisecond):
	}

	// The job row must exist.
	if _, err := records.RecordTransitions(ctx, "nope", conditions[:1]); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("RecordTransitions(unknown job) = %v, want ErrNotFound", err)
	}
}

// TestDBNotifyNeverBlocksRecording: a listener that stops reading fills Postgres' NOTIFY queue, and
// then every transaction that notifies fails at commit. Past half the queue, transitions are
// recorded without a notification. Filling the 8 GB queue is out of reach of a test, so its usage
// is stood in for by a function of the same name ahead of pg_catalog on the session's search path.
func TestDBNotifyNeverBlocksRecording(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	mustUpsertJob(t, records, newJob("u1").phase("Running").build())
	listener := pq.NewListener(dsn, 10*time.Millisecond, time.Second, nil)
	defer listener.Close()
	if err := listener.Listen(db.NotifyChannel); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	conn, err := rawDB(t, dsn).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var schema string
	if err := conn.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE SCHEMA queue_stand_in`,
		`CREATE FUNCTION queue_stand_in.pg_notification_queue_usage() RETURNS double precision LANGUAGE sql AS 'SELECT 0.6::double precision'`,
		fmt.Sprintf(`SET search_path = %q, queue_stand_in, pg_catalog`, schema),
		`INSERT INTO job_transitions (job_uid, phase, transition_time, source) VALUES ('u1', 'Running', now(), 'observed')`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	select {
	case pn := <-listener.Notify:
		t.Errorf("notified with the queue over half full: %v", pn)
	case <-time.After(time.Second):
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`SET search_path = %q`, schema)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO job_transitions (job_uid, phase, transition_time, source) VALUES ('u1', 'Completed', now(), 'observed')`); err != nil {
		t.Fatal(err)
	}
	select {
	case pn := <-listener.Notify:
		if n, err := db.ParseNotification(pn.Extra); err != nil || n.Phase != "Completed" {
			t.Errorf("notification %v (%v), want the Completed transition", pn, err)
		}
	case <-time.After(10 * time.Second):
		t.Error("no notification with the queue empty")
	}
}

func TestDBPodsAndLogObjects(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)

	// Pods are recorded before their job exists.
	pod := newPod("p1", "u1")
	for range 2 {
		if err := records.UpsertPod(ctx, pod); err != nil {
			t.Fatalf("UpsertPod before the job: %v", err)
		}
	}
	first, err := records.Pod(ctx, "p1")
	if err != nil {
		t.Fatalf("Pod: %v", err)
	}
	pod.ArchiveState = record.ArchivePending
	if diff := cmp.Diff(pod, first, cmpopts.IgnoreFields(record.Pod{}, "RecordedAt", "UpdatedAt")); diff != "" {
		t.Errorf("Pod (-want +got):\n%s", diff)
	}

	// Deleted while running, then a stale Running update: terminal phase and the flag stick.
	deleted := newPod("p1", "u1")
	deleted.Phase, deleted.FinishedAt, deleted.DeletedBeforeTerminal, deleted.Node = "Failed", ptr(at(5*time.Minute)), true, ""
	if err := records.UpsertPod(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	if err := records.UpsertPod(ctx, newPod("p1", "u1")); err != nil {
		t.Fatal(err)
	}
	got, err := records.Pod(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != "Failed" || !got.DeletedBeforeTerminal || got.Node != "node-1" || got.FinishedAt == nil {
		t.Errorf("pod after stale update: phase %s, deleted-before-terminal %t, node %q, finished %v", got.Phase, got.DeletedBeforeTerminal, got.Node, got.FinishedAt)
	}

	// PodsByUID reads the rows of the UIDs asked for that are recorded, as Pod does.
	if err := records.UpsertPod(ctx, newPod("p2", "u2")); err != nil {
		t.Fatal(err)
	}
	byUID, err := records.PodsByUID(ctx, []string{"p1", "never-recorded", "p2"})
	if err != nil {
		t.Fatalf("PodsByUID: %v", err)
	}
	second, err := records.Pod(ctx, "p2")
	if err != nil {
		t.Fatal(err)
	}
	sortPods := cmpopts.SortSlices(func(a, b record.Pod) bool { return a.UID < b.UID })
	if diff := cmp.Diff([]record.Pod{got, second}, byUID, sortPods); diff != "" {
		t.Errorf("PodsByUID (-want +got):\n%s", diff)
	}
	if none, err := records.PodsByUID(ctx, nil); err != nil || len(none) != 0 {
		t.Errorf("PodsByUID(none) = %v, %v; want nothing", none, err)
	}

	// UpsertPods writes each row as UpsertPod would, in one statement: a new row whole, and the
	// stale Running update of p1 leaves its terminal phase, node and flag as they are.
	p3 := newPod("p3", "u2")
	p3.StartedAt, p3.Task = nil, ""
	if err := records.UpsertPods(ctx, []record.Pod{p3, newPod("p1", "u1")}); err != nil {
		t.Fatalf("UpsertPods: %v", err)
	}
	if again, err := records.Pod(ctx, "p1"); err != nil || !cmp.Equal(got, again) {
		t.Errorf("p1 after UpsertPods with a stale row: %+v (err %v), want it unchanged: %+v", again, err, got)
	}
	third, err := records.Pod(ctx, "p3")
	if err != nil {
		t.Fatal(err)
	}
	p3.ArchiveState = record.ArchivePending
	if diff := cmp.Diff(p3, third, cmpopts.IgnoreFields(record.Pod{}, "RecordedAt", "UpdatedAt")); diff != "" {
		t.Errorf("UpsertPods' new row (-want +got):\n%s", diff)
	}
	// One bad row, or one UID twice, and nothing is written.
	for name, batch := range map[string][]record.Pod{
		"an invalid row": {newPod("p4", "u2"), {UID: "p5"}},
		"a UID twice":    {newPod("p4", "u2"), newPod("p4", "u2")},
	} {
		if err := records.UpsertPods(ctx, batch); !errors.Is(err, db.ErrInvalid) {
			t.Errorf("UpsertPods with %s = %v, want ErrInvalid", name, err)
		}
		if _, err := records.Pod(ctx, "p4"); !errors.Is(err, db.ErrNotFound) {
			t.Errorf("UpsertPods with %s wrote p4 (err %v)", name, err)
		}
	}
	if err := records.UpsertPods(ctx, nil); err != nil {
		t.Errorf("UpsertPods(none) = %v", err)
	}

	// Log objects: the pod row must exist.
	if err := records.PutLogObject(ctx, storedLog("nope", "main", record.InstanceCurrent)); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("PutLogObject(unknown pod) = %v, want ErrNotFound", err)
	}

	// unavailable -> stored upgrades; stored -> unavailable is ignored.
	main := storedLog("p1", "main", record.InstanceCurrent)
	unavailable := record.LogObject{PodUID: "p1", Container: "main", ContainerType: record.ContainerRegular, Instance: record.InstanceCurrent,
		State: record.LogUnavailable, Reason: "node gone"}
	for _, l := range []record.LogObject{unavailable, main, main, unavailable} {
		if err := records.PutLogObject(ctx, l); err != nil {
			t.Fatalf("PutLogObject(%s %s): %v", l, l.State, err)
		}
	}
	prev2 := storedLog("p1", "main", record.PreviousInstance(2))
	prev10 := storedLog("p1", "main", record.PreviousInstance(10))
	initLog := storedLog("p1", "setup", record.InstanceCurrent)
	initLog.ContainerType = record.ContainerInit
	debug := record.LogObject{PodUID: "p1", Container: "debugger", ContainerType: record.ContainerEphemeral, Instance: record.InstanceCurrent,
		State: record.LogUnavailable, Reason: "deadline exceeded"}
	for _, l := range []record.LogObject{prev10, debug, prev2, initLog} {
		if err := records.PutLogObject(ctx, l); err != nil {
			t.Fatalf("PutLogObject(%s): %v", l, err)
		}
	}
	// A stored row is final (migration 0005): the same write again is a no-op, other sizes or
	// another hash are refused and change nothing.
	if err := records.PutLogObject(ctx, prev2); err != nil {
		t.Errorf("PutLogObject(stored row again): %v", err)
	}
	reupload := prev2
	reupload.Bytes, reupload.SHA256 = 1200, strings.Repeat("cd", 32)
	if err := records.PutLogObject(ctx, reupload); !errors.Is(err, db.ErrAppendOnly) {
		t.Errorf("PutLogObject(stored row with another hash) = %v, want ErrAppendOnly", err)
	}

	wantLogs := []record.LogObject{initLog, prev2, prev10, main, debug}
	ignoreStamps := cmpopts.IgnoreFields(record.LogObject{}, "CreatedAt", "UpdatedAt")
	gotPod, err := records.PodLogObjects(ctx, "p1")
	if err != nil {
		t.Fatalf("PodLogObjects: %v", err)
	}
	if diff := cmp.Diff(wantLogs, gotPod, ignoreStamps); diff != "" {
		t.Errorf("PodLogObjects (-want +got):\n%s", diff)
	}
	gotJob, err := records.LogObjects(ctx, "u1")
	if err != nil {
		t.Fatalf("LogObjects: %v", err)
	}
	if diff := cmp.Diff(wantLogs, gotJob, ignoreStamps); diff != "" {
		t.Errorf("LogObjects (-want +got):\n%s", diff)
	}
	if n := queryInt(t, c, `SELECT count(*) FROM log_objects`); n != 5 {
		t.Errorf("log_objects rows = %d, want 5", n)
	}

	// Archiving a pod is idempotent and moves forward only.
	if err := records.MarkPodArchived(ctx, "p1", at(6*time.Minute), ""); err != nil {
		t.Fatalf("MarkPodArchived: %v", err)
	}
	if err := records.MarkPodArchived(ctx, "p1", at(7*time.Minute), "deadline"); err != nil {
		t.Fatalf("repeated MarkPodArchived: %v", err)
	}
	if err := records.UpsertPod(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	got, err = records.Pod(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ArchiveState != record.ArchiveArchived || got.ArchivedAt == nil || !got.ArchivedAt.Equal(at(6*time.Minute)) || got.ReleaseReason != "" {
		t.Errorf("pod archive: %s %v %q, want archived at 6m", got.ArchiveState, got.ArchivedAt, got.ReleaseReason)
	}
	if err := records.MarkPodArchived(ctx, "nope", at(0), ""); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("MarkPodArchived(unknown) = %v, want ErrNotFound", err)
	}
	pods, err := records.Pods(ctx, "u1")
	if err != nil || len(pods) != 1 || pods[0].UID != "p1" {
		t.Errorf("Pods(u1) = %v, %v; want [p1]", pods, err)
	}
}

func TestDBListJobsKeyset(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)

	// 23 jobs over two namespaces, in groups of three sharing a creation time (ties broken by UID),
	// inserted out of order.
	var all []record.Job
	for i := range 23 {
		ns := "team-a"
		if i%4 == 0 {
			ns = "team-b"
		}
		f := newJob(fmt.Sprintf("uid-%02d", 22-i)).namespace(ns).created(at(time.Duration(i/3) * time.Hour))
		if i%2 == 0 {
			f.submitter("alice")
		} else {
			f.submitter("bob")
		}
		j := f.build()
		j.Annotations = map[string]string{"note": fmt.Sprintf("job %d", i)}
		mustUpsertJob(t, records, j)
		j.ArchiveState = record.ArchivePending
		if whole := mustJob(t, records, j.UID); !bytes.Equal(whole.Spec, j.Spec) || !bytes.Equal(whole.Status, j.Status) || whole.Annotations["note"] == "" {
			t.Fatalf("Job(%s) = spec %s, status %s, annotations %v; want the whole record", j.UID, whole.Spec, whole.Status, whole.Annotations)
		}
		// A list reads the summary: neither spec nor status nor annotations (Job has them).
		j.Spec, j.Status, j.Annotations = nil, nil, nil
		all = append(all, j)
	}
	slices.SortFunc(all, func(a, b record.Job) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.UID, b.UID)
	})
	filter := func(keep func(record.Job) bool) []record.Job {
		var out []record.Job
		for _, j := range all {
			if keep(j) {
				out = append(out, j)
			}
		}
		return out
	}

	for name, tc := range map[string]struct {
		filter db.JobFilter
		want   []record.Job
	}{
		"all":       {db.JobFilter{}, all},
		"namespace": {db.JobFilter{Namespace: "team-a"}, filter(func(j record.Job) bool { return j.Namespace == "team-a" })},
		"time range": {db.JobFilter{CreatedFrom: at(2 * time.Hour), CreatedBefore: at(5 * time.Hour)},
			filter(func(j record.Job) bool {
				return !j.CreatedAt.Before(at(2*time.Hour)) && j.CreatedAt.Before(at(5*time.Hour))
			})},
		"namespace, submitter and phase": {db.JobFilter{Namespace: "team-b", Submitter: "alice", Phase: "Pending"},
			filter(func(j record.Job) bool { return j.Namespace == "team-b" && j.Submitter == "alice" })},
		"none": {db.JobFilter{Namespace: "team-z"}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var (
				got   []record.Job
				after db.Cursor
				pages int
			)
			for {
				page, next, err := records.ListJobs(ctx, tc.filter, after, 4)
				if err != nil {
					t.Fatalf("ListJobs: %v", err)
				}
				if len(page) > 4 {
					t.Fatalf("page of %d jobs, limit 4", len(page))
				}
				got = append(got, page...)
				pages++
				if next.IsZero() {
					break
				}
				after = next
				if pages > 20 {
					t.Fatal("pagination does not end")
				}
			}
			if diff := cmp.Diff(tc.want, got, ignoreDBStamps); diff != "" {
				t.Errorf("paged jobs (-want +got):\n%s", diff)
			}
			if wantPages := max(1, (len(tc.want)+3)/4); pages != wantPages {
				t.Errorf("pages = %d, want %d", pages, wantPages)
			}
		})
	}
}

// TestDBListJobsUsesIndexes guards the audit indexes: a filtered page is an index scan, not a scan
// of the whole table.
func TestDBListJobsUsesIndexes(t *testing.T) {
	ctx := t.Context()
	_, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	if _, err := c.ExecContext(ctx, `
INSERT INTO jobs (uid, namespace, name, created_at, submitter, phase)
SELECT 'uid-' || i, 'ns-' || (i % 50), 'job-' || i, timestamptz '2025-01-01' + i * interval '1 minute', 'user-' || (i % 100), 'Completed'
FROM generate_series(1, 20000) i;
ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT * FROM jobs WHERE namespace = 'ns-7' AND (created_at, uid) > ('2025-01-05', 'x') ORDER BY created_at, uid LIMIT 101`,
		`SELECT * FROM jobs WHERE submitter = 'user-7' ORDER BY created_at, uid LIMIT 101`,
		`SELECT * FROM audit_submissions WHERE namespace = 'ns-3' AND created_at >= '2025-01-02' AND created_at < '2025-01-03'`,
		// archiver logs --namespace --job: by name, in the index rather than filtered
		`SELECT * FROM jobs WHERE namespace = 'ns-7' AND name = 'job-7' ORDER BY created_at, uid LIMIT 101`,
	} {
		var plan strings.Builder
		rows, err := c.QueryContext(ctx, `EXPLAIN `+q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		rows.Close()
		if strings.Contains(plan.String(), "Seq Scan on jobs") {
			t.Errorf("%s\nscans the whole table:\n%s", q, plan.String())
		}
		if strings.Contains(q, "name =") && !regexp.MustCompile(`Index Cond: .*name = `).MatchString(plan.String()) {
			t.Errorf("%s\nfilters names row by row instead of in an index:\n%s", q, plan.String())
		}
	}
}

func TestDBAuditViews(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)

	// u1: submitted by alice, ran, restarted once, completed, archived with one stored log and one
	// unavailable. u2: unknown submitter, still running, never retried.
	mustUpsertJob(t, records, newJob("u1").submitter("alice", "dev").phase("Completed").retries(1).finished(at(time.Hour)).build())
	mustUpsertJob(t, records, newJob("u2").namespace("team-b").created(at(time.Minute)).phase("Running").build())
	for uid, ts := range map[string][]record.Transition{
		"u1": {
			{Phase: "Pending", Time: at(0), Source: record.SourceCondition},
			{Phase: "Running", Time: at(10 * time.Minute), Source: record.SourceCondition},
			{Phase: "Restarting", Time: at(20 * time.Minute), Reason: "PodFailed", Source: record.SourceCondition},
			{Phase: "Running", Time: at(25 * time.Minute), Source: record.SourceCondition},
			{Phase: "Completed", Time: at(time.Hour), Source: record.SourceCondition},
		},
		"u2": {{Phase: "Running", Time: at(2 * time.Minute), Source: record.SourceObserved}},
	} {
		if _, err := records.RecordTransitions(ctx, uid, ts); err != nil {
			t.Fatal(err)
		}
	}
	deleted := newPod("p1", "u1")
	deleted.DeletedBeforeTerminal = true
	for _, p := range []record.Pod{deleted, newPod("p2", "u1")} {
		if err := records.UpsertPod(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []record.LogObject{
		storedLog("p1", "main", record.InstanceCurrent),
		{PodUID: "p2", Container: "main", ContainerType: record.ContainerRegular, Instance: record.InstanceCurrent, State: record.LogUnavailable, Reason: "node gone"},
	} {
		if err := records.PutLogObject(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := records.MarkJobArchived(ctx, "u1", "s3://b/team-a/job-u1/u1/", at(2*time.Hour), ""); err != nil {
		t.Fatal(err)
	}

	t.Run("views are documented", func(t *testing.T) {
		for _, v := range []string{"audit_submissions", "audit_outcomes", "audit_retries", "audit_log_objects"} {
			var comment sql.NullString
			if err := c.QueryRowContext(ctx, `SELECT obj_description(to_regclass($1), 'pg_class')`, v).Scan(&comment); err != nil {
				t.Fatal(err)
			}
			if len(comment.String) < 40 {
				t.Errorf("view %s has no useful COMMENT: %q", v, comment.String)
			}
		}
	})

	t.Run("audit_submissions", func(t *testing.T) {
		type row struct {
			UID, Namespace, Submitter string
			Groups                    pq.StringArray
			Admitted                  bool
		}
		var got []row
		rows, err := c.QueryContext(ctx, `SELECT uid, namespace, coalesce(submitter, ''), submitter_groups, admitted_at IS NOT NULL FROM audit_submissions ORDER BY created_at, uid`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.UID, &r.Namespace, &r.Submitter, &r.Groups, &r.Admitted); err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		want := []row{{"u1", "team-a", "alice", pq.StringArray{"dev"}, true}, {"u2", "team-b", "", nil, false}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("audit_submissions (-want +got):\n%s", diff)
		}
	})

	t.Run("audit_outcomes", func(t *testing.T) {
		var (
			phase, state, location string
			terminal               bool
			queued, ran, total     string
			pods, deletedPods      int
			stored, unavailable    int
		)
		err := c.QueryRowContext(ctx, `
SELECT final_phase, terminal, archive_state, archive_location, queued_for::text, ran_for::text, total_duration::text,
       pods, pods_deleted_before_terminal, logs_stored, logs_unavailable
FROM audit_outcomes WHERE uid = 'u1'`).Scan(&phase, &terminal, &state, &location, &queued, &ran, &total,
			&pods, &deletedPods, &stored, &unavailable)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(phase, terminal, state, location, queued, ran, total, pods, deletedPods, stored, unavailable)
		want := fmt.Sprint("Completed", true, "archived", "s3://b/team-a/job-u1/u1/", "00:10:00", "00:50:00", "01:00:00", 2, 1, 1, 1)
		if got != want {
			t.Errorf("audit_outcomes(u1) = %s, want %s", got, want)
		}
		var running bool
		var finished sql.NullTime
		if err := c.QueryRowContext(ctx, `SELECT terminal, finished_at FROM audit_outcomes WHERE uid = 'u2'`).Scan(&running, &finished); err != nil {
			t.Fatal(err)
		}
		if running || finished.Valid {
			t.Errorf("audit_outcomes(u2): terminal %t, finished %v; want a running job", running, finished)
		}
	})

	t.Run("audit_retries", func(t *testing.T) {
		var (
			uid                 string
			retries, runs, rsts int
			history             string
		)
		rows, err := c.QueryContext(ctx, `SELECT uid, retry_count, running_transitions, restarting_transitions, transitions::text FROM audit_retries`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			n++
			if err := rows.Scan(&uid, &retries, &runs, &rsts, &history); err != nil {
				t.Fatal(err)
			}
		}
		if n != 1 || uid != "u1" || retries != 1 || runs != 2 || rsts != 1 {
			t.Errorf("audit_retries: %d rows, last %s retries %d running %d restarting %d; want only u1 1 2 1", n, uid, retries, runs, rsts)
		}
		if phases := regexp.MustCompile(`"phase": "(\w+)"`).FindAllStringSubmatch(history, -1); len(phases) != 5 || phases[2][1] != "Restarting" {
			t.Errorf("audit_retries history = %s", history)
		}
	})

	t.Run("audit_log_objects", func(t *testing.T) {
		rows, err := c.QueryContext(ctx, `
SELECT job_name, pod_name, container, container_type, instance, coalesce(object_key, ''), bytes, stored_bytes, coalesce(sha256, ''), state, coalesce(reason, '')
FROM audit_log_objects ORDER BY pod_name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var (
				job, pod, container, ctype, instance, key, sha, state, reason string
				bytes, stored                                                 int64
			)
			if err := rows.Scan(&job, &pod, &container, &ctype, &instance, &key, &bytes, &stored, &sha, &state, &reason); err != nil {
				t.Fatal(err)
			}
			got = append(got, strings.Join([]string{job, pod, container, ctype, instance, key, fmt.Sprint(bytes), fmt.Sprint(stored), sha, state, reason}, " "))
		}
		l := storedLog("p1", "main", record.InstanceCurrent)
		want := []string{
			strings.Join([]string{"job-u1", "pod-p1", "main", "regular", "current", l.ObjectKey, "1000", "200", l.SHA256, "stored", ""}, " "),
			strings.Join([]string{"job-u1", "pod-p2", "main", "regular", "current", "", "0", "0", "", "unavailable", "node gone"}, " "),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("audit_log_objects (-want +got):\n%s", diff)
		}
	})
}

// TestDBTerminalPhasesMatchTracking keeps the schema's notion of a terminal phase in step with
// tracking.IsTerminal.
func TestDBTerminalPhasesMatchTracking(t *testing.T) {
	_, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	for _, phase := range []batchv1alpha1.JobPhase{
		batchv1alpha1.Pending, batchv1alpha1.Aborting, batchv1alpha1.Aborted, batchv1alpha1.Running,
		batchv1alpha1.Restarting, batchv1alpha1.Completing, batchv1alpha1.Completed, batchv1alpha1.Terminating,
		batchv1alpha1.Terminated, batchv1alpha1.Failed,
	} {
		var terminal bool
		if err := c.QueryRowContext(t.Context(), `SELECT jobvault_job_phase_is_terminal($1)`, string(phase)).Scan(&terminal); err != nil {
			t.Fatal(err)
		}
		if terminal != tracking.IsTerminal(phase) {
			t.Errorf("phase %s: schema says terminal=%t, tracking.IsTerminal says %t", phase, terminal, tracking.IsTerminal(phase))
		}
	}
}

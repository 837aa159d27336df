package db

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// openOneConn opens a migrated database of the testbed's Postgres on a pool of one connection:
// what the pool's session has prepared is then what pg_prepared_statements shows it.
func openOneConn(t *testing.T) *DB {
	t.Helper()
	d, err := Open(t.Context(), testbed.Postgres(t), Options{Migrate: true, MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// preparedCount is how many statements the pool's one session has prepared whose text is query,
// or all of them if query is empty.
func preparedCount(t *testing.T, d *DB, query string) int {
	t.Helper()
	var n int
	if err := d.db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_prepared_statements WHERE $1 = '' OR statement = $1`, query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitPrepared waits until the background preparation of query is kept.
func waitPrepared(t *testing.T, d *DB, query string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d.stmts.mu.Lock()
		st := d.stmts.stmts[query]
		d.stmts.mu.Unlock()
		if st != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%.40q… not prepared within 10s", query)
		}
	}
}

// withPreparedJob opens a database on one connection (openOneConn) and records a job in it, and
// returns them once the job upsert is prepared.
func withPreparedJob(t *testing.T) (*DB, record.Job) {
	t.Helper()
	d := openOneConn(t)
	job := record.Job{UID: "job-1", Namespace: "ns", Name: "a", CreatedAt: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Phase: "Pending"}
	if _, err := d.RecordJob(t.Context(), &job, job.UID, nil); err != nil {
		t.Fatal(err)
	}
	waitPrepared(t, d, upsertJobSQL)
	return d, job
}

// TestHotStatementsRunPrepared: a job's row, written in a transaction, is written by a statement
// its session prepared once (issue 28: Postgres no longer parses it at every call), and to the
// same effect.
func TestHotStatementsRunPrepared(t *testing.T) {
	ctx := t.Context()
	d, job := withPreparedJob(t)
	for _, phase := range []string{"Running", "Completed"} {
		job.Phase = phase
		if _, err := d.RecordJob(ctx, &job, job.UID, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := preparedCount(t, d, upsertJobSQL); n != 1 {
		t.Errorf("the job upsert is prepared %d times on the session, want once", n)
	}
	var runs int
	if err := d.db.QueryRowContext(ctx, `SELECT generic_plans + custom_plans FROM pg_prepared_statements WHERE statement = $1`, upsertJobSQL).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs < 2 {
		t.Errorf("the prepared job upsert ran %d times, want the 2 calls after it was prepared", runs)
	}
	got, err := d.Job(ctx, job.UID)
	if err != nil || got.Phase != "Completed" {
		t.Errorf("job = %+v, %v; want phase Completed", got, err)
	}
}

// TestPreparingWaitsForNoConnection: a transaction that holds the pool's only connection and runs
// a statement not yet prepared neither waits for a connection to prepare it on nor fails: it runs
// the statement unprepared, and the statement is prepared once the connection is free.
func TestPreparingWaitsForNoConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	d := openOneConn(t)
	job := record.Job{UID: "job-1", Namespace: "ns", Name: "a", CreatedAt: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Phase: "Pending"}
	if _, err := d.RecordJob(ctx, &job, job.UID, nil); err != nil {
		t.Fatalf("RecordJob on a pool of one connection: %v", err)
	}
	waitPrepared(t, d, upsertJobSQL)
}

// TestPreparedAreBounded: past maxPrepared distinct statements, the others run unprepared.
func TestPreparedAreBounded(t *testing.T) {
	ctx := t.Context()
	d := openOneConn(t)
	for i := range maxPrepared + 10 {
		query := fmt.Sprintf("SELECT %d", i)
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := d.prepared(tx).QueryRowContext(ctx, query).Scan(&n); err != nil || n != i {
			t.Fatalf("%s = %d, %v", query, n, err)
		}
		if err := tx.Commit(); err != nil { // frees the only connection, for the preparation
			t.Fatal(err)
		}
		if i < maxPrepared {
			waitPrepared(t, d, query)
		}
	}
	d.stmts.mu.Lock()
	kept := len(d.stmts.stmts)
	d.stmts.mu.Unlock()
	if n := preparedCount(t, d, ""); n != maxPrepared || kept != maxPrepared {
		t.Errorf("%d statements prepared on the session, %d kept; want the bound, %d", n, kept, maxPrepared)
	}
}

// TestPreparedOffWhenTheServerLosesThem: a server that no longer has a statement prepared on the
// session (a pooler that does not keep them, a DISCARD ALL) fails the transaction that runs it;
// from then on statements run unprepared, and the call tried again succeeds.
func TestPreparedOffWhenTheServerLosesThem(t *testing.T) {
	ctx := t.Context()
	d, job := withPreparedJob(t)
	if _, err := d.db.ExecContext(ctx, `DEALLOCATE ALL`); err != nil {
		t.Fatal(err)
	}
	job.Phase = "Running"
	if _, err := d.RecordJob(ctx, &job, job.UID, nil); !unusable(err) {
		t.Fatalf("the call after the server lost the statement: %v, want its 26000", err)
	}
	d.stmts.mu.Lock()
	off := d.stmts.off
	d.stmts.mu.Unlock()
	if !off {
		t.Fatal("preparation still on after the server lost a statement")
	}
	job.Phase = "Completed"
	if _, err := d.RecordJob(ctx, &job, job.UID, nil); err != nil {
		t.Fatalf("the call tried again: %v", err)
	}
	if got, err := d.Job(ctx, job.UID); err != nil || got.Phase != "Completed" {
		t.Errorf("job = %+v, %v; want phase Completed", got, err)
	}
}

// TestUnpreparedPreparesNothing: with Options.Unprepared (--db-unprepared), for a pooler that does
// not keep prepared statements, no statement is prepared on the server.
func TestUnpreparedPreparesNothing(t *testing.T) {
	ctx := t.Context()
	d, err := Open(ctx, testbed.Postgres(t), Options{Migrate: true, MaxOpenConns: 1, Unprepared: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	job := record.Job{UID: "job-1", Namespace: "ns", Name: "a", CreatedAt: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Phase: "Pending"}
	for range 3 {
		if _, err := d.RecordJob(ctx, &job, job.UID, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a background preparation, if one had started
	if n := preparedCount(t, d, ""); n != 0 {
		t.Errorf("%d statements prepared with Unprepared, want none", n)
	}
}

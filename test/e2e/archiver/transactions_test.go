package archiver

import (
	"database/sql"
	"testing"
	"time"

	_ "github.com/lib/pq" // the test reads Postgres' own statistics
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// maxTransactionsPerPod bounds the database transactions the archiver spends per pod of one short
// log, its job's share (the job's record, its seal) included, beyond what it spends starting and
// stopping with nothing to do. Issue 28's target is 2 with the job's share
// (test/performance/targets.yaml, podTransactions, printed by BenchmarkReleaseThroughput at 1,000
// pods in jobs of 10). A pod's own share is its log's record, and its share of the job's capture
// starts, which go in a few transactions together (jobStarts); one job of 10 pods alone weighs
// more here than in the benchmark (its first record, its row brought up to date as Volcano
// rewrites its status). Seen on 2026-11-25: 2.1 to 2.5 a pod, against 3.5 and 3.6 with a
// transaction for each pod's capture start (11.6 before issue 28). The bound fails the latter.
const maxTransactionsPerPod = 3.2

// preparedMetric counts the statements the archiver prepared (pkg/db, design record 0013).
const preparedMetric = "jobvault_archiver_db_statements_prepared_total"

// TestTransactionsPerPod (issue 28, target 2): a VcJob of 10 pods, each writing a short log, ends
// while the archiver is down (the burst BenchmarkReleaseThroughput drains); the archiver then
// archives and releases it in at most maxTransactionsPerPod transactions per pod, as Postgres
// counts them, and the archive is complete and byte-exact as before.
func TestTransactionsPerPod(t *testing.T) {
	t.Parallel()
	const pods = 10
	// A server of the test's own, without autovacuum: its workers' transactions (a visit to a new
	// database whose catalogs the migrations churned: 12 in a probe on 2026-11-29) count in the
	// database's statistics as the archiver's would, and fell in the count under load (4.3 and 4.4
	// a pod in two make test runs).
	pg := testbed.NewPostgres(t, "autovacuum=off")
	s := stack.NewRigOn(t, pg, objstore.BackendS3)
	s.Proc.Stop()
	job := testbed.Job(s.NS, "transactions").Task("worker", pods, []string{"main"}).Obj()
	want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": pods}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "erin", job)
	j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)

	before, _ := settledTransactions(t, s.DSN)
	s.Start(t)
	j = s.WaitArchived(t, j, 2*time.Minute)
	metrics := s.Metrics(t)
	prepared := seriesSum(t, metrics, preparedMetric)
	s.Proc.Stop() // its sessions end and report their counts
	// Each step of the job's finalization is timed (BenchmarkReleaseThroughput prints their means).
	for _, step := range []string{"out-of-view", "record", "captures", "seal", "release"} {
		if n := seriesSum(t, metrics, `jobvault_archiver_finalize_step_seconds_count{step="`+step+`"}`); n < 1 {
			t.Errorf("the finalization's step %s was timed %v times, want at least once", step, n)
		}
	}
	after, readings := settledTransactions(t, s.DSN)
	// Less the readings' own (see settledTransactions), and the statements the archiver prepared:
	// each once a process, outside any transaction (design record 0013), not a pod's.
	spent := after - before - 2*float64(readings) - prepared

	// What the archiver spends starting and stopping when there is nothing to do: in another
	// namespace's rig, as idle as this one was before the job.
	idle := stack.NewRigOn(t, pg, objstore.BackendS3)
	idle.Proc.Stop()
	idle0, _ := settledTransactions(t, idle.DSN)
	idle.Start(t)
	idlePrepared := seriesSum(t, idle.Metrics(t), preparedMetric)
	idle.Proc.Stop()
	idle1, readings := settledTransactions(t, idle.DSN)
	fixed := idle1 - idle0 - 2*float64(readings) - idlePrepared

	if per := (spent - fixed) / pods; per > maxTransactionsPerPod {
		t.Errorf("%.0f database transactions for %d pods (less %.0f statements prepared), %.0f of them the archiver's start-up: %.1f per pod, want at most %.1f (archiver log %s)",
			spent, pods, prepared, fixed, per, maxTransactionsPerPod, s.Proc.LogPath)
	} else {
		t.Logf("%.0f database transactions for %d pods (less %.0f statements prepared), %.0f of them the archiver's start-up: %.1f per pod (at most %.1f)",
			spent, pods, prepared, fixed, per, maxTransactionsPerPod)
	}
	s.CheckJobArchive(t, j, want)
}

// settledTransactions is how many transactions the database at dsn committed or rolled back, once
// no archiver's session is connected to it and the count stopped moving (sessions report theirs when
// they end or within a second or so of going idle), and how many readings that took. Each reading
// counts as two transactions (lib/pq parses, then executes), seen by the next: the count returned
// holds all the readings before the last, and the first reading of a later call holds the last
// one of this call.
func settledTransactions(t *testing.T, dsn string) (n float64, readings int) {
	t.Helper()
	read := func() (n float64, archivers int) {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRowContext(t.Context(), `SELECT xact_commit + xact_rollback,
    (SELECT count(*) FROM pg_stat_activity a WHERE a.datname = current_database() AND a.application_name = '`+stack.ArchiverApplication+`')
FROM pg_stat_database WHERE datname = current_database()`).Scan(&n, &archivers); err != nil {
			t.Fatalf("read the database's statistics: %v", err)
		}
		return n, archivers
	}
	last, _ := read()
	for readings = 1; readings < 20; readings++ {
		time.Sleep(1500 * time.Millisecond)
		// A stopped archiver's sessions report their counts as they end: under load that can come
		// after a count that had not moved for a reading, and the start-up's transactions be
		// counted as the job's (the likely cause of 4.4 a pod in a make test run, 2026-11-28).
		n, archivers := read()
		if archivers == 0 && n-last <= 2 { // only the readings before moved it (each may count twice: parse, then execute)
			return n, readings + 1
		}
		last = n
	}
	t.Fatalf("the database's transaction count still moved, or an archiver's session was still connected, after %d readings", readings)
	return 0, 0
}

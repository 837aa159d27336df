package archiver

import (
	"database/sql"
	"maps"
	"testing"
	"time"

	"github.com/lib/pq"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Issue 13, item 2: a restart writes only what changed while the archiver was down. A job of 10
// pods is archived (its pods stay, Succeeded). The archiver restarts and reconciles every pod again,
// and sends no update of any pod row: it read their rows once, at start, and nothing it would write
// differs. Updates are counted by Postgres (track_functions) as calls of the pods' BEFORE UPDATE
// trigger, which an upsert of an existing row fires even when it changes nothing. Before the
// archiver read the rows at start, every pod's row was sent again, one round trip each: 10 here,
// 100,000 for 100,000 live pods.
func TestRestartWritesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS)
	job := testbed.Job(s.NS, "before").Task("w", 10, []string{"main"}).Obj()
	want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"w": 10}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "rita", job)
	job = s.WaitArchived(t, job, 2*time.Minute)
	s.CheckJobArchive(t, job, want)
	s.Proc.Stop()

	conn, err := sql.Open("postgres", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var dbName string
	if err := conn.QueryRowContext(t.Context(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	// For the archiver's sessions from now on.
	if _, err := conn.ExecContext(t.Context(), `ALTER DATABASE `+pq.QuoteIdentifier(dbName)+` SET track_functions = 'pl'`); err != nil {
		t.Fatal(err)
	}
	before := rowVersions(t, conn, string(job.UID))
	s.Start(t)
	for deadline := time.Now().Add(time.Minute); podReconciles(t, s) < 10; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v pod reconciles since the restart, want at least 10", podReconciles(t, s))
		}
	}
	// Let the archiver's idle sessions report their statistics (at most every 10 s, PG 15).
	time.Sleep(12 * time.Second)
	var updates int64
	if err := conn.QueryRowContext(t.Context(),
		`SELECT COALESCE(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'jobvault_freeze_finalized_pod'`).Scan(&updates); err != nil {
		t.Fatal(err)
	}
	if updates != 0 {
		t.Errorf("the restarted archiver sent %d updates of pod rows, want none: nothing changed", updates)
	}
	if after := rowVersions(t, conn, string(job.UID)); len(after) != 10 || !maps.Equal(before, after) {
		t.Errorf("pod rows changed across the restart: row versions %v, then %v", before, after)
	}
	var pods corev1.PodList
	if err := s.Env.Client.List(t.Context(), &pods, client.InNamespace(s.NS)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 10 {
		t.Errorf("%d pods in the namespace, want the job's 10 kept (the test needs them)", len(pods.Items))
	}
}

// rowVersions maps each recorded pod of the job to its row's version (xmin: the transaction that
// last wrote it; an upsert that changes nothing still writes a new one).
func rowVersions(t *testing.T, conn *sql.DB, jobUID string) map[string]string {
	t.Helper()
	rows, err := conn.QueryContext(t.Context(), `SELECT uid, xmin::text FROM pods WHERE job_uid = $1`, jobUID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var uid, xmin string
		if err := rows.Scan(&uid, &xmin); err != nil {
			t.Fatal(err)
		}
		out[uid] = xmin
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// podReconciles is the pod controller's count of reconciles since the archiver started.
func podReconciles(t *testing.T, s *stack.Rig) float64 {
	t.Helper()
	return seriesSum(t, s.Metrics(t), `controller_runtime_reconcile_total{controller="pod",`)
}

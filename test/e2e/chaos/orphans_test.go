package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"

	_ "github.com/lib/pq"
)

// Issue 23, item 16: Postgres goes down while containers are captured, before their first segment
// is recorded: each capture stores the segment, fails to record it, and once the database is back
// finds its run ended and writes the log whole. The segments stored but never recorded are swept
// when the job is finalized: `archiver audit verify` finds nothing (before: one "extra" object per
// container, a false alarm of tampering).
func TestPostgresOutageLeavesNoOrphans(t *testing.T) {
	const containers = 4
	s := stack.NewRig(t, objstore.BackendFS, "--capture-segment-age=3s", "--cluster-name=testbed")
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	var names []string
	for c := range containers {
		names = append(names, fmt.Sprintf("c%d", c))
	}
	// 6 s of output, 2 lines every 100 ms, in pods that end 8 s after they start.
	job := testbed.Job(s.NS, "outage").Task("w", 1, names, testbed.RunsFor("8s")).Obj()
	pod := testbed.PodName(job.Name, "w", 0)
	outputs := map[string]testbed.Output{}
	for _, c := range names {
		outputs[c] = testbed.Output{Runs: [][]testbed.Chunk{stack.SteadyOutput(pod+"/"+c, 60, 200)}, Every: 100 * time.Millisecond}
	}
	rt.Run(t, s.NS, pod, outputs)
	stack.CreateAs(t, s.Env, "henry", job)

	// Down once the pod is recorded and its containers write, before a segment ages (3 s).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if recorded(t, s, pod) && len(rt.Written(s.NS, pod, names[0], 0)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not recorded and writing within 2 minutes; archiver log: %s", pod, s.Proc.LogPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
	pg := testbed.PostgresCluster(t)
	stopPostgres(t, pg, s.DSN)
	up := false
	t.Cleanup(func() {
		if !up {
			startPostgres(t, pg, s.DSN)
		}
	})
	stopped := time.Now()
	// Until the containers ended (8 s) and the captures' first flushes failed.
	time.Sleep(12 * time.Second)
	startPostgres(t, pg, s.DSN)
	up = true
	t.Logf("Postgres down for %s", time.Since(stopped).Round(100*time.Millisecond))
	if segs := segmentKeys(t, s); len(segs) == 0 {
		t.Fatalf("no segment stored during the outage: the test's timing is off; archiver log: %s", s.Proc.LogPath)
	}

	j := s.WaitArchived(t, job, 3*time.Minute)
	if j.Status.State.Phase != batchv1alpha1.Completed {
		t.Errorf("phase %s, want Completed", j.Status.State.Phase)
	}
	if left := segmentKeys(t, s); len(left) > 0 {
		t.Errorf("segment objects left after the job was archived:\n%s", strings.Join(left, "\n"))
	}
	s.AuditVerify(t)
}

// recorded reports whether the pod named so in the rig's namespace has a row.
func recorded(t *testing.T, s *stack.Rig, name string) bool {
	t.Helper()
	for _, p := range jobPods(t, s, &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: s.NS}}) {
		if p.Name != name {
			continue
		}
		if _, err := s.Records.Pod(t.Context(), string(p.UID)); err == nil {
			return true
		}
	}
	return false
}

// segmentKeys lists the segment objects in the rig's store.
func segmentKeys(t *testing.T, s *stack.Rig) []string {
	t.Helper()
	var segs []string
	for _, k := range s.Keys(t, "") {
		if strings.Contains(k, ".seg-") {
			segs = append(segs, k)
		}
	}
	return segs
}

// stopPostgres stops the Postgres server at once. The testbed's Stop asks for a smart shutdown,
// which lets the sessions already open (the archiver's pooled connections) go on working until it
// kills the server 10 s later: the database first refuses new connections and its sessions are
// ended, so that the server has none left to wait for.
func stopPostgres(t *testing.T, pg *testbed.PostgresServer, dsn string) {
	t.Helper()
	name := dbName(t, dsn)
	admin, err := sql.Open("postgres", pg.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(t.Context(), `ALTER DATABASE "`+name+`" ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	pg.Stop()
}

// startPostgres starts the server stopPostgres stopped, and lets its database be connected to.
func startPostgres(t *testing.T, pg *testbed.PostgresServer, dsn string) {
	t.Helper()
	pg.Start(t)
	admin, err := sql.Open("postgres", pg.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(context.WithoutCancel(t.Context()), `ALTER DATABASE "`+dbName(t, dsn)+`" ALLOW_CONNECTIONS true`); err != nil {
		t.Fatal(err)
	}
}

// dbName is the database a DSN (a postgres:// URL) names.
func dbName(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

package archiver

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Issue 13, item 3: the archiver is killed (SIGKILL) in the middle of a burst of 100 pod
// terminations and started again: every pod is archived, none missing and none twice (one row
// per pod and per log, byte-exact, and no object in the bucket but the archives' own).
func TestArchiverKilledDuringBurst(t *testing.T) { killedDuringBurst(t, 100, 10, 3*time.Minute) }

// The same with 1,000 pods (make test-scale).
func TestArchiverKilledDuringBurstAtScale(t *testing.T) {
	if os.Getenv("JOBVAULT_SCALE_PROOFS") == "" {
		t.Skip("a scale proof: run it with make test-scale (JOBVAULT_SCALE_PROOFS=1)")
	}
	killedDuringBurst(t, 1000, 20, 15*time.Minute)
}

func killedDuringBurst(t *testing.T, n, perJob int, timeout time.Duration) {
	s := stack.NewRig(t, objstore.BackendS3)
	var (
		jobs []*batchv1alpha1.Job
		want []map[string]map[string]testbed.ContainerLogs
	)
	for i := range n / perJob {
		job := testbed.Job(s.NS, fmt.Sprintf("burst-%03d", i)).Task("w", int32(perJob), []string{"main"}).Obj()
		want = append(want, stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"w": perJob}, []string{"main"}, false))
		jobs = append(jobs, job)
	}
	for _, job := range jobs {
		if err := s.Env.Client.Create(t.Context(), job); err != nil {
			t.Fatal(err)
		}
	}
	// Kill it once a tenth of the pods are released: the rest are ending, being captured,
	// recorded or released right then.
	released, ended := 0, 0
	for deadline := time.Now().Add(timeout); released < n/10; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods released within %s; archiver log %s", released, n, timeout, s.Proc.LogPath)
		}
		released, ended = burstState(t, s)
	}
	s.Proc.Kill()
	released, ended = burstState(t, s)
	t.Logf("archiver killed with %d of %d pods released and %d ended", released, n, ended)
	if released == n {
		t.Fatalf("every pod was released before the kill: the test's timing is off")
	}
	s.Start(t)

	wantKeys := []string{}
	for i, job := range jobs {
		j := s.WaitArchived(t, job, timeout)
		logs := s.CheckJobArchive(t, j, want[i])
		if len(logs) != perJob {
			t.Errorf("job %s: %d log rows, want %d", j.Name, len(logs), perJob)
		}
		pods, err := s.Records.Pods(t.Context(), string(j.UID))
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) != perJob {
			t.Errorf("job %s: %d pod rows, want %d", j.Name, len(pods), perJob)
		}
		dir := "archive/" + j.Namespace + "/" + j.Name + "/" + string(j.UID) + "/"
		wantKeys = append(wantKeys, dir+"job.json", dir+"manifest.json")
		for _, l := range logs {
			wantKeys = append(wantKeys, l.ObjectKey)
		}
	}
	keys := s.Keys(t, "archive/")
	slices.Sort(wantKeys)
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("%d objects in the bucket, want exactly the %d of the archives; extra or missing:\n%s", len(keys), len(wantKeys), keyDiff(keys, wantKeys))
	}
}

// burstState counts the rig's pods released (ended without the pod finalizer) and ended.
func burstState(t *testing.T, s *stack.Rig) (released, ended int) {
	t.Helper()
	var pods corev1.PodList
	if err := s.Env.Client.List(t.Context(), &pods, client.InNamespace(s.NS)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			ended++
			if !controllerutil.ContainsFinalizer(&p, tracking.PodFinalizer) {
				released++
			}
		}
	}
	return released, ended
}

func keyDiff(got, want []string) string {
	var b strings.Builder
	for _, k := range got {
		if _, found := slices.BinarySearch(want, k); !found {
			b.WriteString("+ " + k + "\n")
		}
	}
	for _, k := range want {
		if _, found := slices.BinarySearch(got, k); !found {
			b.WriteString("- " + k + "\n")
		}
	}
	return b.String()
}

// Issue 13, item 3: events lost on purpose are repaired by the resweep. The archiver runs with
// the test hook that drops every update event of a job and every pod event meant for the job
// reconciler (as a watch can lose them): the job is reconciled when it is created, and nothing
// then tells the archiver that it ran and completed; only the resweep (every 2 s here) finds it
// changed since it was recorded and, once its pods are released, finalizable and still held, and
// finalizes it.
func TestResweepRepairsLostEvents(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3)
	s.Proc.Stop()
	s.Environ = append(s.Environ, "JOBVAULT_TEST_DROP_JOB_UPDATES=1")
	s.Args = append(s.Args, "--missed-event-sweep-period=2s")
	s.Start(t)
	job := testbed.Job(s.NS, "lost-events").Task("w", 3, []string{"main"}).Obj()
	want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"w": 3}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "lena", job)
	j := s.WaitArchived(t, job, 90*time.Second)
	s.CheckJobArchive(t, j, want)
	if n := resweptJobs(t, s); n == 0 {
		t.Errorf("the resweep enqueued no job")
	}
}

// resweptJobs is the archiver's count of jobs the resweep enqueued.
func resweptJobs(t *testing.T, s *stack.Rig) float64 {
	t.Helper()
	return seriesSum(t, s.Metrics(t), `jobvault_archiver_resweep_enqueued_total{kind="job"} `)
}

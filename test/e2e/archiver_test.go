package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	busv1alpha1 "volcano.sh/apis/pkg/apis/bus/v1alpha1"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/testbed"
)

// podLogs prepares distinct logs for every container of every pod Volcano will create for the
// tasks (name → replicas) and returns what each must read back as: pod → container → bytes.
func podLogs(t testing.TB, env *testbed.Env, ns, job string, tasks map[string]int, containers []string, withPrevious bool) map[string]map[string]testbed.ContainerLogs {
	t.Helper()
	all := map[string]map[string]testbed.ContainerLogs{}
	for task, n := range tasks {
		for i := range n {
			pod := testbed.PodName(job, task, i)
			logs := map[string]testbed.ContainerLogs{}
			for _, c := range containers {
				cl := testbed.ContainerLogs{Current: sampleChunks(pod + "/" + c)}
				if withPrevious {
					cl.Previous = []testbed.Chunk{{Stream: "stderr", Data: []byte("previous run of " + pod + "/" + c + ": crashed ✗\n")}}
				}
				logs[c] = cl
			}
			env.SetPodLogs(t, ns, pod, logs)
			all[pod] = logs
		}
	}
	return all
}

func sampleChunks(tag string) []testbed.Chunk {
	return []testbed.Chunk{
		{Stream: "stdout", Data: []byte("hello from " + tag + "\nline 2 ✓ ünïcödé\n")},
		{Stream: "stderr", Data: []byte("warning on stderr\n" + strings.Repeat("x", 70_000) + "\n")},
		{Stream: "stdout", Data: []byte("last line without newline")},
	}
}

// createAs creates the job as the given user, so the webhook records that submitter.
func createAs(t testing.TB, env *testbed.Env, user string, job *batchv1alpha1.Job) {
	t.Helper()
	c, err := client.New(env.UserConfig(t, user, "team-a"), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), job); err != nil {
		t.Fatalf("create job as %s: %v", user, err)
	}
}

// checkJobArchive asserts the whole record of an archived job: the row, every transition of
// Volcano's conditions once, every pod's logs byte-exact, job.json and manifest.json.
func checkJobArchive(t *testing.T, s *rig, job *batchv1alpha1.Job, want map[string]map[string]testbed.ContainerLogs) []db.LogObject {
	t.Helper()
	ctx := t.Context()
	row, err := s.records.Job(ctx, string(job.UID))
	if err != nil {
		t.Fatalf("job row: %v", err)
	}
	if row.ArchiveState != db.ArchiveArchived || row.ArchiveLocation == "" || row.Phase != string(job.Status.State.Phase) {
		t.Errorf("job row: state %s location %q phase %s; want archived with a location, phase %s", row.ArchiveState, row.ArchiveLocation, row.Phase, job.Status.State.Phase)
	}
	checkTransitions(t, s, job)
	logs, err := s.records.LogObjects(ctx, string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := s.records.Pods(ctx, string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	podName := map[string]string{}
	for _, p := range pods {
		podName[p.UID] = p.Name
		if p.ArchiveState != db.ArchiveArchived {
			t.Errorf("pod %s (%s): archive state %s, want archived", p.Name, p.UID, p.ArchiveState)
		}
	}
	seen := map[string]bool{}
	for _, l := range logs {
		name := podName[l.PodUID]
		cl, ok := want[name][l.Container]
		if !ok {
			t.Errorf("unexpected log %s of pod %s", l, name)
			continue
		}
		w := cl.Current
		if l.Instance != db.InstanceCurrent {
			w = cl.Previous
		}
		s.checkLog(t, l, testbed.Bytes(w))
		seen[name+"/"+l.Container+"/"+l.Instance] = true
	}
	for pod, cs := range want {
		for c, cl := range cs {
			if !seen[pod+"/"+c+"/current"] {
				t.Errorf("no archived current log for %s/%s", pod, c)
			}
			if cl.Previous != nil && !seen[pod+"/"+c+"/"+db.PreviousInstance(1)] {
				t.Errorf("no archived previous log for %s/%s", pod, c)
			}
		}
	}
	for _, key := range []string{"job.json", "manifest.json"} {
		if _, err := s.store.Stat(ctx, "archive/"+job.Namespace+"/"+job.Name+"/"+string(job.UID)+"/"+key); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	return logs
}

// checkTransitions asserts that every phase change Volcano recorded is in the database once.
func checkTransitions(t *testing.T, s *rig, job *batchv1alpha1.Job) {
	t.Helper()
	ts, err := s.records.Transitions(t.Context(), string(job.UID))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, tr := range ts {
		got[tr.Phase+"@"+tr.Time.UTC().Format(time.RFC3339)]++
	}
	for _, c := range job.Status.Conditions {
		k := string(c.Status) + "@" + c.LastTransitionTime.UTC().Format(time.RFC3339)
		if got[k] != 1 {
			t.Errorf("transition %s recorded %d times, want once (recorded: %v)", k, got[k], got)
		}
	}
	if len(job.Status.Conditions) == 0 {
		t.Errorf("job has no conditions to compare")
	}
}

func getJob(t testing.TB, env *testbed.Env, job *batchv1alpha1.Job) *batchv1alpha1.Job {
	t.Helper()
	var j batchv1alpha1.Job
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &j); err != nil {
		t.Fatal(err)
	}
	return &j
}

func waitPhase(t testing.TB, env *testbed.Env, job *batchv1alpha1.Job, phase batchv1alpha1.JobPhase, timeout time.Duration) *batchv1alpha1.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := getJob(t, env, job)
		if j.Status.State.Phase == phase {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s/%s in phase %q after %s, want %s", job.Namespace, job.Name, j.Status.State.Phase, timeout, phase)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Case 1 and 8: a two-task job completes; everything is archived byte-exact on every backend.
func TestArchiveCompletedJob(t *testing.T) {
	for _, backend := range []string{objstore.BackendS3, objstore.BackendGCS, objstore.BackendFS} {
		t.Run(backend, func(t *testing.T) {
			s := newRig(t, backend)
			job := testbed.Job(s.ns, "two-tasks").Task("ps", 1, []string{"main"}).Task("worker", 2, []string{"main"}).Obj()
			want := podLogs(t, s.env, s.ns, job.Name, map[string]int{"ps": 1, "worker": 2}, []string{"main"}, false)
			createAs(t, s.env, "alice", job)
			j := s.waitArchived(t, job, 2*time.Minute)
			if j.Status.State.Phase != batchv1alpha1.Completed {
				t.Errorf("phase %s, want Completed", j.Status.State.Phase)
			}
			logs := checkJobArchive(t, s, j, want)
			if len(logs) != 3 {
				t.Errorf("%d log objects, want 3", len(logs))
			}
			row, _ := s.records.Job(t.Context(), string(j.UID))
			if row.Submitter != "alice" {
				t.Errorf("submitter %q, want alice", row.Submitter)
			}
			if err := s.env.Client.Delete(t.Context(), j); err != nil {
				t.Fatal(err)
			}
			waitGone(t, s.env, j, time.Minute)
		})
	}
}

func waitGone(t *testing.T, env *testbed.Env, obj client.Object, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists after %s (finalizers %v, err %v)", obj.GetName(), timeout, obj.GetFinalizers(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Case 2: a job whose pods fail is restarted by its policy; every attempt's pods are archived
// under distinct keys.
func TestArchiveRestartedJob(t *testing.T) {
	s := newRig(t, objstore.BackendS3)
	job := testbed.Job(s.ns, "restarts").Task("worker", 1, []string{"main"}, testbed.Fails()).
		Policy(busv1alpha1.PodFailedEvent, busv1alpha1.RestartJobAction).MaxRetry(2).Obj()
	want := podLogs(t, s.env, s.ns, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	createAs(t, s.env, "bob", job)
	j := s.waitArchived(t, job, 3*time.Minute)
	if j.Status.State.Phase != batchv1alpha1.Failed || j.Status.RetryCount < 1 {
		t.Errorf("phase %s after %d retries, want Failed after at least 1", j.Status.State.Phase, j.Status.RetryCount)
	}
	logs := checkJobArchive(t, s, j, want)
	keys := map[string]bool{}
	for _, l := range logs {
		keys[l.ObjectKey] = true
	}
	if len(keys) < 2 || len(keys) != len(logs) {
		t.Errorf("%d distinct keys for %d logs, want one per attempt (at least 2)", len(keys), len(logs))
	}
}

// Case 3: a running job deleted by a user, in background and in foreground cascade: every log is
// archived before the pods vanish.
func TestArchiveDeletedRunningJob(t *testing.T) {
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		t.Run(string(policy), func(t *testing.T) {
			s := newRig(t, objstore.BackendS3)
			job := testbed.Job(s.ns, "deleted").Task("worker", 2, []string{"main"}, testbed.RunsFor("1h")).Obj()
			want := podLogs(t, s.env, s.ns, job.Name, map[string]int{"worker": 2}, []string{"main"}, false)
			createAs(t, s.env, "carol", job)
			j := waitPhase(t, s.env, job, batchv1alpha1.Running, 2*time.Minute)
			waitPodsRunning(t, s.env, s.ns, 2)
			if err := s.env.Client.Delete(t.Context(), j, client.PropagationPolicy(policy)); err != nil {
				t.Fatal(err)
			}
			waitGone(t, s.env, j, 2*time.Minute)
			waitNoPods(t, s.env, s.ns, time.Minute)
			pods, err := s.records.Pods(t.Context(), string(j.UID))
			if err != nil || len(pods) != 2 {
				t.Fatalf("%d pod rows (%v), want 2", len(pods), err)
			}
			logs, err := s.records.LogObjects(t.Context(), string(j.UID))
			if err != nil {
				t.Fatal(err)
			}
			byUID := map[string]string{}
			for _, p := range pods {
				byUID[p.UID] = p.Name
				if p.ArchiveState != db.ArchiveArchived {
					t.Errorf("pod %s: %s, want archived", p.Name, p.ArchiveState)
				}
			}
			if len(logs) != 2 {
				t.Errorf("%d logs, want 2", len(logs))
			}
			for _, l := range logs {
				s.checkLog(t, l, testbed.Bytes(want[byUID[l.PodUID]]["main"].Current))
			}
			row, err := s.records.Job(t.Context(), string(j.UID))
			if err != nil || row.ArchiveState != db.ArchiveArchived {
				t.Errorf("job row %s (%v), want archived", row.ArchiveState, err)
			}
		})
	}
}

func waitPodsRunning(t *testing.T, env *testbed.Env, ns string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var pods corev1.PodList
		if err := env.Client.List(t.Context(), &pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods running", running, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitNoPods(t *testing.T, env *testbed.Env, ns string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var pods corev1.PodList
		if err := env.Client.List(t.Context(), &pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods remain in %s", len(pods.Items), ns)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Case 4: init containers, several containers, and a restart whose previous log is captured.
func TestArchiveMultiContainerRestart(t *testing.T) {
	s := newRig(t, objstore.BackendS3)
	job := testbed.Job(s.ns, "multi").Task("main", 1, []string{"app", "sidecar"}, testbed.InitContainers("init"), testbed.RestartsOnce()).Obj()
	pod := testbed.PodName(job.Name, "main", 0)
	want := map[string]map[string]testbed.ContainerLogs{pod: {
		"init":    {Current: sampleChunks(pod + "/init")},
		"app":     {Current: sampleChunks(pod + "/app"), Previous: []testbed.Chunk{{Stream: "stderr", Data: []byte("app crashed ✗\n")}}},
		"sidecar": {Current: sampleChunks(pod + "/sidecar"), Previous: []testbed.Chunk{{Stream: "stdout", Data: []byte("sidecar first run\n")}}},
	}}
	s.env.SetPodLogs(t, s.ns, pod, want[pod])
	createAs(t, s.env, "dave", job)
	j := s.waitArchived(t, job, 2*time.Minute)
	logs := checkJobArchive(t, s, j, want)
	var got []string
	for _, l := range logs {
		got = append(got, fmt.Sprintf("%s:%s:%s", l.ContainerType, l.Container, l.Instance))
	}
	sort.Strings(got)
	wantRows := []string{"init:init:current", "regular:app:current", "regular:app:previous-1", "regular:sidecar:current", "regular:sidecar:previous-1"}
	if strings.Join(got, " ") != strings.Join(wantRows, " ") {
		t.Errorf("log rows %v, want %v", got, wantRows)
	}
}

// Case 5: the archiver is down for the job's whole life; started afterwards it records everything,
// every transition included.
func TestArchiverDownForWholeJob(t *testing.T) {
	s := newRig(t, objstore.BackendS3)
	s.Proc.Stop()
	job := testbed.Job(s.ns, "unattended").Task("worker", 2, []string{"main"}).Obj()
	want := podLogs(t, s.env, s.ns, job.Name, map[string]int{"worker": 2}, []string{"main"}, false)
	createAs(t, s.env, "erin", job)
	j := waitPhase(t, s.env, job, batchv1alpha1.Completed, 2*time.Minute)
	if len(j.Finalizers) == 0 {
		t.Fatalf("job completed without the webhook's finalizer")
	}
	s.Start(t)
	j = s.waitArchived(t, j, 2*time.Minute)
	checkJobArchive(t, s, j, want)
}

// Case 9: a pod whose logs can never be read is released after the deadline and recorded as
// unavailable, with an Event.
func TestUnreadableLogsReleasedAfterDeadline(t *testing.T) {
	s := newRig(t, objstore.BackendS3, "--log-deadline=3s")
	job := testbed.Job(s.ns, "nologs").Task("worker", 1, []string{"main"}).Obj() // no logs prepared: KWOK cannot serve any
	createAs(t, s.env, "frank", job)
	j := s.waitArchived(t, job, 2*time.Minute)
	logs, err := s.records.LogObjects(t.Context(), string(j.UID))
	if err != nil || len(logs) != 1 {
		t.Fatalf("%d logs (%v), want 1", len(logs), err)
	}
	if logs[0].State != db.LogUnavailable || !strings.Contains(logs[0].Reason, "deadline") {
		t.Errorf("log %s: %s (%s), want unavailable after the deadline", logs[0], logs[0].State, logs[0].Reason)
	}
	s.expectEvent(t, "LogUnavailable")
}

// The escape hatch: an operator releases a job stuck on unreadable logs at once.
func TestOperatorReleasesJob(t *testing.T) {
	s := newRig(t, objstore.BackendS3, "--log-deadline=1h")
	job := testbed.Job(s.ns, "stuck").Task("worker", 1, []string{"main"}).Obj()
	createAs(t, s.env, "gina", job)
	j := waitPhase(t, s.env, job, batchv1alpha1.Completed, 2*time.Minute)
	time.Sleep(2 * time.Second)
	if j = getJob(t, s.env, j); len(j.Finalizers) == 0 {
		t.Fatalf("job released before the deadline with unreadable logs")
	}
	patch := client.MergeFrom(j.DeepCopy())
	metav1.SetMetaDataAnnotation(&j.ObjectMeta, tracking.ReleaseAnnotation, "ticket-42")
	if err := s.env.Client.Patch(t.Context(), j, patch); err != nil {
		t.Fatal(err)
	}
	j = s.waitArchived(t, j, time.Minute)
	row, err := s.records.Job(t.Context(), string(j.UID))
	if err != nil || row.ArchiveState != db.ArchiveReleased || !strings.Contains(row.ReleaseReason, "ticket-42") {
		t.Errorf("job row %s %q (%v), want released with the operator's reason", row.ArchiveState, row.ReleaseReason, err)
	}
}

// The backstop: a job that lacks the finalizer and label (admitted while the webhook was down,
// which fails open for VcJobs) gets them from the archiver and is archived as usual.
func TestBackstopsMissingFinalizer(t *testing.T) {
	s := newRig(t, objstore.BackendFS)
	job := testbed.Job(s.ns, "unstamped").Task("worker", 1, []string{"main"}, testbed.RunsFor("5s")).Obj()
	want := podLogs(t, s.env, s.ns, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	s.Proc.Stop() // so the archiver cannot re-add them before the patch below lands
	createAs(t, s.env, "kim", job)
	j := getJob(t, s.env, job)
	patch := client.MergeFrom(j.DeepCopy())
	j.Finalizers = nil
	delete(j.Labels, tracking.TrackedLabel)
	if err := s.env.Client.Patch(t.Context(), j, patch); err != nil {
		t.Fatal(err)
	}
	s.Start(t)
	j = s.waitArchived(t, j, 2*time.Minute)
	if !tracking.IsTracked(j.Labels) {
		t.Errorf("job labels %v: tracking label not restored", j.Labels)
	}
	checkJobArchive(t, s, j, want)
	s.expectEvent(t, "Backstopped")
}

// expectEvent asserts that an Event with the reason was recorded in the rig's namespace.
func (s *rig) expectEvent(t testing.TB, reason string) {
	t.Helper()
	var events corev1.EventList
	if err := s.env.Client.List(t.Context(), &events, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == reason {
			return
		}
	}
	t.Errorf("no %s event in %s", reason, s.ns)
}

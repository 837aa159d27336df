package archiver

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	busv1alpha1 "volcano.sh/apis/pkg/apis/bus/v1alpha1"

	_ "github.com/lib/pq"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Case 1 and 8: a two-task job completes; everything is archived byte-exact on every backend.
func TestArchiveCompletedJob(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{objstore.BackendS3, objstore.BackendGCS, objstore.BackendFS} {
		t.Run(backend, func(t *testing.T) {
			s := stack.NewRig(t, backend)
			job := testbed.Job(s.NS, "two-tasks").Task("ps", 1, []string{"main"}).Task("worker", 2, []string{"main"}).Obj()
			want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"ps": 1, "worker": 2}, []string{"main"}, false)
			stack.CreateAs(t, s.Env, "alice", job)
			j := s.WaitArchived(t, job, 2*time.Minute)
			if j.Status.State.Phase != batchv1alpha1.Completed {
				t.Errorf("phase %s, want Completed", j.Status.State.Phase)
			}
			logs := s.CheckJobArchive(t, j, want)
			if len(logs) != 3 {
				t.Errorf("%d log objects, want 3", len(logs))
			}
			// Issue 25, proof 7: the KWOK nodes run no agent; the API capture owns every run.
			s.CheckCapturedBy(t, string(j.UID), record.CapturedByAPI)
			row, _ := s.Records.Job(t.Context(), string(j.UID))
			if row.Submitter != "alice" {
				t.Errorf("submitter %q, want alice", row.Submitter)
			}
			if err := s.Env.Client.Delete(t.Context(), j); err != nil {
				t.Fatal(err)
			}
			waitGone(t, s.Env, j, time.Minute)
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
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3)
	job := testbed.Job(s.NS, "restarts").Task("worker", 1, []string{"main"}, testbed.Fails()).
		Policy(busv1alpha1.PodFailedEvent, busv1alpha1.RestartJobAction).MaxRetry(2).Obj()
	want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "bob", job)
	j := s.WaitArchived(t, job, 3*time.Minute)
	if j.Status.State.Phase != batchv1alpha1.Failed || j.Status.RetryCount < 1 {
		t.Errorf("phase %s after %d retries, want Failed after at least 1", j.Status.State.Phase, j.Status.RetryCount)
	}
	logs := s.CheckJobArchive(t, j, want)
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
	t.Parallel()
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		t.Run(string(policy), func(t *testing.T) {
			s := stack.NewRig(t, objstore.BackendS3)
			job := testbed.Job(s.NS, "deleted").Task("worker", 2, []string{"main"}, testbed.RunsFor("1h")).Obj()
			want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 2}, []string{"main"}, false)
			stack.CreateAs(t, s.Env, "carol", job)
			j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Running, 2*time.Minute)
			stack.WaitPodsRunning(t, s.Env, 2, time.Minute, client.InNamespace(s.NS))
			if err := s.Env.Client.Delete(t.Context(), j, client.PropagationPolicy(policy)); err != nil {
				t.Fatal(err)
			}
			waitGone(t, s.Env, j, 2*time.Minute)
			waitNoPods(t, s.Env, s.NS, time.Minute)
			pods, err := s.Records.Pods(t.Context(), string(j.UID))
			if err != nil || len(pods) != 2 {
				t.Fatalf("%d pod rows (%v), want 2", len(pods), err)
			}
			logs, err := s.Records.LogObjects(t.Context(), string(j.UID))
			if err != nil {
				t.Fatal(err)
			}
			byUID := map[string]string{}
			for _, p := range pods {
				byUID[p.UID] = p.Name
				if p.ArchiveState != record.ArchiveArchived {
					t.Errorf("pod %s: %s, want archived", p.Name, p.ArchiveState)
				}
			}
			if len(logs) != 2 {
				t.Errorf("%d logs, want 2", len(logs))
			}
			for _, l := range logs {
				s.CheckLog(t, l, testbed.Bytes(want[byUID[l.PodUID]]["main"].Current))
			}
			row, err := s.Records.Job(t.Context(), string(j.UID))
			if err != nil || row.ArchiveState != record.ArchiveArchived {
				t.Errorf("job row %s (%v), want archived", row.ArchiveState, err)
			}
		})
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
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3)
	job := testbed.Job(s.NS, "multi").Task("main", 1, []string{"app", "sidecar"}, testbed.InitContainers("init"), testbed.RestartsOnce()).Obj()
	pod := testbed.PodName(job.Name, "main", 0)
	want := map[string]map[string]testbed.ContainerLogs{pod: {
		"init":    {Current: stack.SampleChunks(pod + "/init")},
		"app":     {Current: stack.SampleChunks(pod + "/app"), Previous: []testbed.Chunk{{Stream: "stderr", Data: []byte("app crashed ✗\n")}}},
		"sidecar": {Current: stack.SampleChunks(pod + "/sidecar"), Previous: []testbed.Chunk{{Stream: "stdout", Data: []byte("sidecar first run\n")}}},
	}}
	s.Env.SetPodLogs(t, s.NS, pod, want[pod])
	stack.CreateAs(t, s.Env, "dave", job)
	j := s.WaitArchived(t, job, 2*time.Minute)
	logs := s.CheckJobArchive(t, j, want)
	var got []string
	for _, l := range logs {
		got = append(got, fmt.Sprintf("%s:%s:%s", l.ContainerType, l.Container, l.Instance))
	}
	sort.Strings(got)
	wantRows := []string{"init:init:current", "regular:app:current", "regular:app:previous-1", "regular:sidecar:current", "regular:sidecar:previous-1"}
	if strings.Join(got, " ") != strings.Join(wantRows, " ") {
		t.Errorf("log rows %v, want %v", got, wantRows)
	}
	s.CheckCapturedBy(t, string(j.UID), record.CapturedByAPI)
}

// Case 5: the archiver is down for the job's whole life; started afterwards it records everything,
// every transition included.
func TestArchiverDownForWholeJob(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3)
	s.Proc.Stop()
	job := testbed.Job(s.NS, "unattended").Task("worker", 2, []string{"main"}).Obj()
	want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 2}, []string{"main"}, false)
	stack.CreateAs(t, s.Env, "erin", job)
	j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)
	if len(j.Finalizers) == 0 {
		t.Fatalf("job completed without the webhook's finalizer")
	}
	s.Start(t)
	j = s.WaitArchived(t, j, 2*time.Minute)
	s.CheckJobArchive(t, j, want)
}

// Case 9: a pod whose logs can never be read is released after the deadline and recorded as
// unavailable, with an Event.
func TestUnreadableLogsReleasedAfterDeadline(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3, "--log-deadline=3s")
	job := testbed.Job(s.NS, "nologs").Task("worker", 1, []string{"main"}).Obj() // no logs prepared: KWOK cannot serve any
	stack.CreateAs(t, s.Env, "frank", job)
	j := s.WaitArchived(t, job, 2*time.Minute)
	logs, err := s.Records.LogObjects(t.Context(), string(j.UID))
	if err != nil || len(logs) != 1 {
		t.Fatalf("%d logs (%v), want 1", len(logs), err)
	}
	if logs[0].State != record.LogUnavailable || !strings.Contains(logs[0].Reason, "deadline") {
		t.Errorf("log %s: %s (%s), want unavailable after the deadline", logs[0], logs[0].State, logs[0].Reason)
	}
	s.ExpectEvent(t, "LogUnavailable")
	// Released, never archived, with the reason: in the job's and the pod's records, the audit
	// view and the job's annotations.
	want := "1 log(s) unavailable: 1 " + string(record.GapUnreadable)
	row, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, want) {
		t.Errorf("job row %s %q (%v), want released: %q", row.ArchiveState, row.ReleaseReason, err, want)
	}
	pods, err := s.Records.Pods(t.Context(), string(j.UID))
	if err != nil || len(pods) != 1 || pods[0].ArchiveState != record.ArchiveReleased || !strings.Contains(pods[0].ReleaseReason, want) {
		t.Errorf("pod rows %+v (%v), want the pod released: %q", pods, err, want)
	}
	audit, err := sql.Open("postgres", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	var state, reason string
	if err := audit.QueryRowContext(t.Context(), `SELECT archive_state, release_reason FROM audit_outcomes WHERE uid = $1`, string(j.UID)).Scan(&state, &reason); err != nil || state != "released" || !strings.Contains(reason, want) {
		t.Errorf("audit_outcomes: %s %q (%v), want released: %q", state, reason, err, want)
	}
	if a := j.Annotations; a[tracking.ArchivedAsAnnotation] != "released" || !strings.Contains(a[tracking.ArchivedReasonAnnotation], want) {
		t.Errorf("job annotations %s=%q %s=%q, want released: %q", tracking.ArchivedAsAnnotation, a[tracking.ArchivedAsAnnotation],
			tracking.ArchivedReasonAnnotation, a[tracking.ArchivedReasonAnnotation], want)
	}
}

// The escape hatch: an operator releases a job stuck on unreadable logs at once.
func TestOperatorReleasesJob(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3, "--log-deadline=1h")
	job := testbed.Job(s.NS, "stuck").Task("worker", 1, []string{"main"}).Obj()
	stack.CreateAs(t, s.Env, "gina", job)
	j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)
	time.Sleep(2 * time.Second)
	if j = stack.GetJob(t, s.Env, j); len(j.Finalizers) == 0 {
		t.Fatalf("job released before the deadline with unreadable logs")
	}
	patch := client.MergeFrom(j.DeepCopy())
	metav1.SetMetaDataAnnotation(&j.ObjectMeta, tracking.ReleaseAnnotation, "ticket-42")
	if err := s.Env.Client.Patch(t.Context(), j, patch); err != nil {
		t.Fatal(err)
	}
	j = s.WaitArchived(t, j, time.Minute)
	row, err := s.Records.Job(t.Context(), string(j.UID))
	if err != nil || row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, "ticket-42") {
		t.Errorf("job row %s %q (%v), want released with the operator's reason", row.ArchiveState, row.ReleaseReason, err)
	}
}

// A released object stays released: an operator releases a running job; its running pods are
// released once and never get the finalizer back (before the fix each pod looped: the finalizer
// re-added "because the webhook missed it", released again, a patch, a row and an Event a round).
func TestReleasedRunningPodStaysReleased(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendFS)
	job := testbed.Job(s.NS, "let-go").Task("worker", 2, []string{"main"}, testbed.RunsFor("1h")).Obj()
	stack.CreateAs(t, s.Env, "gina", job)
	j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Running, 2*time.Minute)
	patch := client.MergeFrom(j.DeepCopy())
	metav1.SetMetaDataAnnotation(&j.ObjectMeta, tracking.ReleaseAnnotation, "uninstalling")
	if err := s.Env.Client.Patch(t.Context(), j, patch); err != nil {
		t.Fatal(err)
	}
	s.WaitArchived(t, j, time.Minute)
	// Watch the running pods for a while: no finalizer comes back.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var pods corev1.PodList
		if err := s.Env.Client.List(t.Context(), &pods, client.InNamespace(s.NS)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if len(p.Finalizers) > 0 {
				t.Fatalf("released pod %s (%s) has finalizers %v again", p.Name, p.Status.Phase, p.Finalizers)
			}
		}
	}
	var events corev1.EventList
	if err := s.Env.Client.List(t.Context(), &events, client.InNamespace(s.NS)); err != nil {
		t.Fatal(err)
	}
	released := 0
	for _, e := range events.Items {
		if e.Reason == "Released" && e.InvolvedObject.Kind == "Pod" {
			released += int(max(e.Count, 1))
		}
	}
	if released != 2 {
		t.Errorf("%d Released events for the 2 pods, want one each", released)
	}
}

// The backstop: a job admitted while the webhook was down (it fails open for VcJobs) lacks the
// finalizer and label, and its pod templates lack any label of ours, which Volcano's webhook
// forbids adding later. The archiver adds the finalizer and label to the job; its pods are
// tracked all the same, by their owner and Volcano's own labels: each holds the pod finalizer
// while it runs, is archived, and is listed in the manifest with its logs.
func TestBackstopsMissingFinalizer(t *testing.T) {
	// Not parallel: it takes the cluster-wide VcJob webhook down.
	s := stack.NewRig(t, objstore.BackendFS)
	job := testbed.Job(s.NS, "unstamped").Task("worker", 2, []string{"main"}, testbed.RunsFor("5s")).Obj()
	want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 2}, []string{"main"}, false)
	stack.CreateWhileJobWebhookDown(t, s.Env, "kim", job)
	if len(job.Finalizers) != 0 || job.Annotations[tracking.SubmitterAnnotation] != "" {
		t.Fatalf("job admitted with finalizers %v, annotations %v: the webhook was not down", job.Finalizers, job.Annotations)
	}
	for pod := range want {
		p := waitPod(t, s.Env, s.NS, pod, time.Minute)
		if !slices.Contains(p.Finalizers, tracking.PodFinalizer) {
			t.Errorf("pod %s of the backstopped job: finalizers %v, want %s", pod, p.Finalizers, tracking.PodFinalizer)
		}
	}
	j := s.WaitArchived(t, job, 2*time.Minute)
	if !tracking.IsTracked(j.Labels) {
		t.Errorf("job labels %v: tracking label not restored", j.Labels)
	}
	s.CheckJobArchive(t, j, want)
	manifest := readManifest(t, s, j)
	listed := map[string]bool{}
	for _, p := range manifest.Pods {
		for _, l := range p.Logs {
			listed[p.Name+"/"+l.Container] = l.State == string(record.LogStored) && l.Key != ""
		}
	}
	for pod := range want {
		if !listed[pod+"/main"] {
			t.Errorf("manifest %+v does not list the stored log of %s/main", manifest.Pods, pod)
		}
	}
	s.ExpectEvent(t, "Backstopped")
}

// waitPod waits until the pod exists and returns it.
func waitPod(t *testing.T, env *testbed.Env, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v", ns, name, err)
	}
	return &p
}

// readManifest reads the job's manifest.json back from the rig's store.
func readManifest(t *testing.T, s *stack.Rig, job *batchv1alpha1.Job) archive.Manifest {
	t.Helper()
	rc, err := s.Store.Get(t.Context(), "archive/"+job.Namespace+"/"+job.Name+"/"+string(job.UID)+"/manifest.json")
	if err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	defer rc.Close()
	var m archive.Manifest
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		t.Fatalf("decode manifest.json: %v", err)
	}
	return m
}

// waitFinalizerGone waits until the pod no longer holds the pod finalizer (or is gone) and
// returns it as last seen.
func waitFinalizerGone(t *testing.T, s *stack.Rig, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := s.Env.Client.Get(ctx, client.ObjectKey{Namespace: s.NS, Name: name}, &p)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && !slices.Contains(p.Finalizers, tracking.PodFinalizer), client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("pod %s still holds %s after %s (finalizers %v): %v", name, tracking.PodFinalizer, timeout, p.Finalizers, err)
	}
	return &p
}

// Every pod that carries the pod finalizer reaches a release, and an orphan cascade is honoured.
func TestStuckFinalizersReachRelease(t *testing.T) {
	t.Parallel()
	// kubectl delete vcjob --cascade=orphan: the pods the user keeps are not deleted, the job goes
	// (released: its pods' logs were not all archived yet), and each kept pod is let go: its
	// capture stopped at the seal, nothing of it is added to the sealed record (audit verify would
	// call that tampering).
	t.Run("orphan cascade", func(t *testing.T) {
		s := stack.NewRig(t, objstore.BackendFS)
		job := testbed.Job(s.NS, "keep-pods").Task("worker", 1, []string{"main"}, testbed.RunsFor("20s")).Obj()
		stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
		stack.CreateAs(t, s.Env, "ivan", job)
		j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Running, 2*time.Minute)
		pod := testbed.PodName(job.Name, "worker", 0)
		if err := s.Env.Client.Delete(t.Context(), j, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := s.Env.Client.Get(ctx, client.ObjectKeyFromObject(j), &batchv1alpha1.Job{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		})
		if err != nil {
			t.Fatalf("job not gone after an orphan delete: %v", err)
		}
		var p corev1.Pod
		if err := s.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: s.NS, Name: pod}, &p); err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the pod the user kept: %v (deletion %v), want it kept and running", err, p.DeletionTimestamp)
		}
		row, err := s.Records.Job(t.Context(), string(j.UID))
		if err != nil || row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, "1 pod(s) not archived") {
			t.Errorf("job row %s %q (%v), want released: its pod was not archived yet", row.ArchiveState, row.ReleaseReason, err)
		}
		waitFinalizerGone(t, s, pod, 2*time.Minute)
		time.Sleep(2 * time.Second) // a capture still writing would record its log meanwhile
		logs, err := s.Records.PodLogObjects(t.Context(), string(p.UID))
		if err != nil || len(logs) != 0 {
			t.Errorf("logs of the kept pod %v (%v), want none added to its sealed job's record", logs, err)
		}
		s.ExpectEvent(t, "Released")
	})
	// A copy of a VcJob's pod that carried the finalizer along, with no VcJob controlling it: the
	// archiver has nothing to archive it under, and lets it go at once.
	t.Run("copied pod", func(t *testing.T) {
		s := stack.NewRig(t, objstore.BackendFS)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.NS, Name: "copy-of-worker",
			Labels:     map[string]string{tracking.JobPodLabel: "someone-elses-job"},
			Finalizers: []string{tracking.PodFinalizer}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}, NodeName: "kwok-node-0"}}
		if err := s.Env.Client.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		waitFinalizerGone(t, s, p.Name, time.Minute)
		s.ExpectEvent(t, "Released")
	})
	// Volcano's job label removed from a running pod: it leaves the archiver's cache, and the
	// sweep lets it go, recording it released with the reason.
	t.Run("label removed", func(t *testing.T) {
		s := stack.NewRig(t, objstore.BackendFS, "--untracked-pod-sweep-period=2s")
		job := testbed.Job(s.NS, "relabelled").Task("worker", 1, []string{"main"}, testbed.RunsFor("1h")).Obj()
		stack.CreateAs(t, s.Env, "ivan", job)
		stack.WaitPhase(t, s.Env, job, batchv1alpha1.Running, 2*time.Minute)
		name := testbed.PodName(job.Name, "worker", 0)
		p := waitPod(t, s.Env, s.NS, name, time.Minute)
		// Wait until the archiver recorded it, then take the label off.
		if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := s.Records.Pod(ctx, string(p.UID))
			return err == nil, nil
		}); err != nil {
			t.Fatalf("pod never recorded: %v", err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		delete(p.Labels, tracking.JobPodLabel)
		if err := s.Env.Client.Patch(t.Context(), p, patch); err != nil {
			t.Fatal(err)
		}
		waitFinalizerGone(t, s, name, time.Minute)
		row, err := s.Records.Pod(t.Context(), string(p.UID))
		if err != nil || row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, "label was removed") {
			t.Errorf("pod row %s %q (%v), want released with the reason", row.ArchiveState, row.ReleaseReason, err)
		}
	})
}

package policy

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Under every policy, the archiver (the real binary, as its service account with
// config/archiver's ClusterRole), Volcano and the garbage collector do their work: a job
// completes and is archived with its submitter; a job stuck on unreadable logs is released by an
// operator, the tenant's own attempt refused; a running job that its tenant deletes in foreground
// cascade is archived and goes. The archiver is never refused anything.
func TestArchiveUnderPolicies(t *testing.T) {
	t.Parallel()
	policies(t)
	s := stack.NewScopedRig(t, objstore.BackendFS, "--log-deadline=1h")
	ctx := t.Context()

	t.Run("completed", func(t *testing.T) {
		job := testbed.Job(s.NS, "done").Task("ps", 1, []string{"main"}).Task("worker", 2, []string{"main"}).Obj()
		want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"ps": 1, "worker": 2}, []string{"main"}, false)
		if err := as(t, tenant).Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		j := s.WaitArchived(t, job, 2*time.Minute)
		if len(s.CheckJobArchive(t, j, want)) != 3 {
			t.Errorf("want 3 logs archived")
		}
		row, err := s.Records.Job(ctx, string(j.UID))
		if err != nil {
			t.Fatal(err)
		}
		var groups []string
		if err := json.Unmarshal([]byte(groupsJSON(t, tenant)), &groups); err != nil {
			t.Fatal(err)
		}
		if row.Submitter != tenant.name || !slices.Equal(row.SubmitterGroups, groups) {
			t.Errorf("recorded submitter %q groups %q, want %s %q", row.Submitter, row.SubmitterGroups, tenant.name, groups)
		}
		if a := j.Annotations; a[tracking.ArchivedAsAnnotation] != string(record.ArchiveArchived) || a[tracking.ArchiveLocationAnnotation] == "" {
			t.Errorf("job annotations %v, want archived with a location", a)
		}
		if err := as(t, tenant).Delete(ctx, j); err != nil {
			t.Fatal(err)
		}
		waitGone(t, s.Env, j)
	})

	t.Run("released by an operator", func(t *testing.T) {
		// No logs for its pod: the archiver retries until --log-deadline, an hour.
		job := testbed.Job(s.NS, "stuck").Task("worker", 1, []string{"main"}).Obj()
		if err := as(t, tenant).Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Completed, 2*time.Minute)
		time.Sleep(2 * time.Second)
		if j = stack.GetJob(t, s.Env, j); !hasFinalizer(j, tracking.JobFinalizer) {
			t.Fatalf("job released before the deadline with unreadable logs")
		}
		expectDenied(t, patchAs(t, tenant, j, setRelease("mine now")), release, "alice is not one of them")
		if err := patchAs(t, operator, j, setRelease("ticket-42")); err != nil {
			t.Fatalf("operator releases the job: %v", err)
		}
		j = s.WaitArchived(t, j, time.Minute)
		row, err := s.Records.Job(ctx, string(j.UID))
		if err != nil || row.ArchiveState != record.ArchiveReleased || !strings.Contains(row.ReleaseReason, "ticket-42") {
			t.Errorf("job row %s %q (%v), want released with the operator's reason", row.ArchiveState, row.ReleaseReason, err)
		}
		// The archiver copied the release to the pod, then removed the pod's finalizer.
		pod := get(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.NS, Name: testbed.PodName("stuck", "worker", 0)}})
		if pod.Annotations[tracking.ReleaseAnnotation] != "ticket-42" || hasFinalizer(pod, tracking.PodFinalizer) {
			t.Errorf("pod annotations %v finalizers %v, want released by the archiver", pod.Annotations, pod.Finalizers)
		}
	})

	t.Run("deleted while running", func(t *testing.T) {
		job := testbed.Job(s.NS, "deleted").Task("worker", 2, []string{"main"}, testbed.RunsFor("1h")).Obj()
		want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 2}, []string{"main"}, false)
		if err := as(t, tenant).Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		j := stack.WaitPhase(t, s.Env, job, batchv1alpha1.Running, 2*time.Minute)
		stack.WaitPodsRunning(t, s.Env, 2, time.Minute, client.InNamespace(s.NS), client.MatchingLabels{tracking.JobPodLabel: "deleted"})
		if err := as(t, tenant).Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
			t.Fatal(err)
		}
		waitGone(t, s.Env, j)
		pods, err := s.Records.Pods(ctx, string(j.UID))
		if err != nil || len(pods) != 2 {
			t.Fatalf("%d pod rows (%v), want 2", len(pods), err)
		}
		logs, err := s.Records.LogObjects(ctx, string(j.UID))
		if err != nil || len(logs) != 2 {
			t.Fatalf("%d logs (%v), want 2", len(logs), err)
		}
		name := map[string]string{}
		for _, p := range pods {
			name[p.UID] = p.Name
			if p.ArchiveState != record.ArchiveArchived {
				t.Errorf("pod %s: %s, want archived", p.Name, p.ArchiveState)
			}
		}
		for _, l := range logs {
			s.CheckLog(t, l, testbed.Bytes(want[name[l.PodUID]]["main"].Current))
		}
		for _, p := range pods {
			waitGone(t, s.Env, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.NS, Name: p.Name}})
		}
	})

	log, err := os.ReadFile(s.Proc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "ValidatingAdmissionPolicy") {
			t.Errorf("the archiver was refused: %s", line)
		}
	}
}

// waitGone waits until obj no longer exists.
func waitGone(t *testing.T, env *testbed.Env, obj client.Object) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists after 2 minutes (finalizers %v, err %v)", obj.GetName(), obj.GetFinalizers(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

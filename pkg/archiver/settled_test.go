package archiver

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kuberecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// rowWrites counts the job rows written, and keeps the last.
type rowWrites struct {
	*memRecords
	n int
}

func (w *rowWrites) UpsertJob(ctx context.Context, j record.Job) error {
	w.n++
	return w.memRecords.UpsertJob(ctx, j)
}

func (w *rowWrites) RecordJob(ctx context.Context, row *record.Job, uid string, ts []record.Transition) (int, error) {
	if row != nil {
		w.n++
	}
	return w.memRecords.RecordJob(ctx, row, uid, ts)
}

// TestFinishedJobsCountersDeferred: Volcano rewrites a finished job's status as its pods are
// released, bumping only status.version and status.runningDuration (killJob); those rewrites are
// not written to the job's row one by one (four row writes a job of ten in ReleaseThroughput,
// issue 28), but the row is written as the job is before its seal, and any other change of a
// finished job's status is written at once.
func TestFinishedJobsCountersDeferred(t *testing.T) {
	scheme := jobScheme(t)
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	yes := true
	job := &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "job-uid", CreationTimestamp: now,
		Finalizers: []string{tracking.JobFinalizer}, Annotations: map[string]string{tracking.SubmitterAnnotation: "alice"}}}
	job.Status.State = batchv1alpha1.JobState{Phase: batchv1alpha1.Completed, LastTransitionTime: now}
	job.Status.Succeeded = 1
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-w-0", UID: "pod-uid", CreationTimestamp: now,
		Labels:          map[string]string{tracking.JobPodLabel: "train"},
		Finalizers:      []string{tracking.PodFinalizer},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: jobAPIVersion, Kind: "Job", Name: "train", UID: "job-uid", Controller: &yes}}}}
	pod.Status.Phase = corev1.PodSucceeded
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(job, pod).WithStatusSubresource(job).
		WithIndex(&corev1.Pod{}, podOwnerIndex, ownerIndex).Build()
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := &rowWrites{memRecords: &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{}}}
	r := &JobReconciler{Deps: Deps{Client: c, APIReader: c, Records: recs, Store: store, Logs: KubeLogs{},
		Recorder: kuberecord.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(now.Time)}, Options: DefaultOptions()}
	key := types.NamespacedName{Namespace: "ns", Name: "train"}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
	}
	rewrite := func(change func(*batchv1alpha1.JobStatus)) {
		t.Helper()
		if err := c.Get(t.Context(), key, job); err != nil {
			t.Fatal(err)
		}
		change(&job.Status)
		if err := c.Status().Update(t.Context(), job); err != nil {
			t.Fatal(err)
		}
	}
	recordedStatus := func() batchv1alpha1.JobStatus {
		t.Helper()
		var s batchv1alpha1.JobStatus
		if err := json.Unmarshal(recs.jobs["job-uid"].Status, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	reconcile()
	if recs.n != 1 {
		t.Fatalf("%d row writes at the first reconcile, want 1", recs.n)
	}
	for i := range 3 { // Volcano's killJob at each pod event of a finished job
		rewrite(func(s *batchv1alpha1.JobStatus) {
			s.Version++
			s.RunningDuration = &metav1.Duration{Duration: time.Duration(i+1) * time.Minute}
		})
		reconcile()
	}
	if recs.n != 1 {
		t.Errorf("%d row writes after three rewrites of only the version and running duration, want 1 (deferred to the seal)", recs.n)
	}
	rewrite(func(s *batchv1alpha1.JobStatus) { s.Failed++ })
	reconcile()
	if recs.n != 2 {
		t.Errorf("%d row writes after a count changed, want 2 (written at once)", recs.n)
	}
	rewrite(func(s *batchv1alpha1.JobStatus) { s.Version++ })
	reconcile()
	if recs.n != 2 {
		t.Errorf("%d row writes after the version changed again, want 2", recs.n)
	}
	// The last pod is released: the row is written as the job is before the seal.
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Finalizers = nil
	if err := c.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if err := c.Get(t.Context(), key, job); err != nil {
		t.Fatal(err)
	}
	if got := recordedStatus(); got.Version != job.Status.Version || got.RunningDuration == nil || *got.RunningDuration != *job.Status.RunningDuration {
		t.Errorf("the row sealed holds version %d, running duration %v; the job has %d, %v", got.Version, got.RunningDuration,
			job.Status.Version, job.Status.RunningDuration)
	}
	if slices.Contains(job.Finalizers, tracking.JobFinalizer) {
		t.Errorf("job not released: finalizers %v", job.Finalizers)
	}
}

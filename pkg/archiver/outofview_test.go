package archiver

import (
	"context"
	"sync"
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
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// outOfViewRecords are memRecords that count the seal's reads, answer a pod's record slowly (as
// a database under load does: the out-of-view list reads it), and say when that answer came.
type outOfViewRecords struct {
	*memRecords
	chained bool
	mu      sync.Mutex
	reads   int
	podRead time.Time
}

func (c *outOfViewRecords) JobForSeal(ctx context.Context, uid string) (db.SealRead, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	r, err := c.memRecords.JobForSeal(ctx, uid)
	if r.Chained = c.chained; c.chained {
		r.Entry = record.ChainEntry{Seq: 1, JobUID: uid, ManifestKey: "ns/train/job-uid/manifest.json", Manifest: []byte("{}")}
	}
	return r, err
}

func (c *outOfViewRecords) ChainEntry(context.Context, string) (record.ChainEntry, bool, error) {
	return record.ChainEntry{}, c.chained, nil
}

func (c *outOfViewRecords) Pod(ctx context.Context, uid string) (record.Pod, error) {
	time.Sleep(300 * time.Millisecond)
	defer func() { c.mu.Lock(); c.podRead = time.Now(); c.mu.Unlock() }()
	return c.memRecords.Pod(ctx, uid)
}

// outOfViewJob is a finished job whose one pod left the archiver's view (its label removed) and
// was recorded released and let go long ago; patched is when the job was patched (released).
func outOfViewJob(t *testing.T, chained bool) (*JobReconciler, *outOfViewRecords, *time.Time) {
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	yes := true
	job := &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "job-uid", CreationTimestamp: now,
		Finalizers: []string{tracking.JobFinalizer}, Annotations: map[string]string{tracking.SubmitterAnnotation: "alice"}}}
	job.Status.State = batchv1alpha1.JobState{Phase: batchv1alpha1.Completed, LastTransitionTime: now}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-w-0", UID: "pod-uid", CreationTimestamp: now,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: jobAPIVersion, Kind: "Job", Name: "train", UID: "job-uid", Controller: &yes}}}}
	var patched time.Time
	c := fake.NewClientBuilder().WithScheme(jobScheme(t)).WithObjects(job, pod).WithStatusSubresource(job).
		WithIndex(&corev1.Pod{}, podOwnerIndex, ownerIndex).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*batchv1alpha1.Job); ok {
				patched = time.Now()
			}
			return c.Patch(ctx, obj, patch, opts...)
		}}).Build()
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := &outOfViewRecords{memRecords: &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{
		"pod-uid": {UID: "pod-uid", JobUID: "job-uid", ArchiveState: record.ArchiveReleased}}}, chained: chained}
	r := &JobReconciler{Deps: Deps{Client: c, APIReader: c, Records: recs, Store: store, Logs: KubeLogs{},
		Recorder: kuberecord.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(now.Time)}, Options: DefaultOptions()}
	return r, recs, &patched
}

// The list of a job's pods outside the cache runs beside its seal (design record 0014), once: a
// pod it finds recorded already does not seal the job twice.
func TestOutOfViewPodRecordedBeforeSealsOnce(t *testing.T) {
	r, recs, patched := outOfViewJob(t, false)
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "train"}}); err != nil {
		t.Fatal(err)
	}
	if recs.reads != 1 || patched.IsZero() {
		t.Errorf("the job was read for its seal %d times, released: %v; want once, released", recs.reads, !patched.IsZero())
	}
}

// A job sealed before (a pass that crashed after its commit, or whose release failed) is not
// released before the out-of-view list is done: what it finds is let go under the job first, as
// when the list ran before the seal.
func TestSealedJobReleasedAfterTheOutOfViewList(t *testing.T) {
	r, recs, patched := outOfViewJob(t, true)
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "train"}}); err != nil {
		t.Fatal(err)
	}
	if patched.IsZero() || recs.podRead.IsZero() || patched.Before(recs.podRead) {
		t.Errorf("the job was released at %v, its out-of-view list read its pod's record at %v: want the release after", patched, recs.podRead)
	}
}

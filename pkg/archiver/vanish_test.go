package archiver

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kuberecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// memRecords is an in-memory Records for branch tests; the real database is tested in test/e2e.
type memRecords struct {
	jobs map[string]record.Job
	pods map[string]record.Pod
}

func (m *memRecords) UpsertJob(_ context.Context, j record.Job) error { m.jobs[j.UID] = j; return nil }
func (m *memRecords) RecordTransitions(context.Context, string, []record.Transition) (int, error) {
	return 0, nil
}
func (m *memRecords) UpsertPod(_ context.Context, p record.Pod) error { m.pods[p.UID] = p; return nil }
func (m *memRecords) UpsertPods(_ context.Context, pods []record.Pod) error {
	for _, p := range pods {
		m.pods[p.UID] = p
	}
	return nil
}
func (m *memRecords) PutLogObject(context.Context, record.LogObject) error { return nil }
func (m *memRecords) Transitions(context.Context, string) ([]record.Transition, error) {
	return nil, nil
}
func (m *memRecords) ChainEntry(context.Context, string) (record.ChainEntry, bool, error) {
	return record.ChainEntry{}, false, nil
}
func (m *memRecords) FinalizeJob(_ context.Context, f record.Finalization, seal record.Seal) (record.Finalized, error) {
	b, err := seal(1, "")
	return record.Finalized{Entry: record.ChainEntry{Seq: 1, JobUID: f.JobUID, ManifestKey: f.ManifestKey, Manifest: b}, Appended: true}, err
}
func (m *memRecords) PodLogObjects(context.Context, string) ([]record.LogObject, error) {
	return nil, nil
}
func (m *memRecords) LogObjects(context.Context, string) ([]record.LogObject, error) { return nil, nil }
func (m *memRecords) MarkPodArchived(context.Context, string, time.Time, string) error {
	return nil
}
func (m *memRecords) MarkJobArchived(context.Context, string, string, time.Time, string) error {
	return nil
}
func (m *memRecords) Job(_ context.Context, uid string) (record.Job, error) { return m.jobs[uid], nil }
func (m *memRecords) Pod(_ context.Context, uid string) (record.Pod, error) { return m.pods[uid], nil }
func (m *memRecords) Pods(context.Context, string) ([]record.Pod, error)    { return nil, nil }
func (m *memRecords) PodsByUID(context.Context, []string) ([]record.Pod, error) {
	return nil, nil
}

// TestVanishedMidReconcile: an object deleted between the reconciler's read and its patch ends the
// reconcile with no error and no requeue, at every place that patches.
func TestVanishedMidReconcile(t *testing.T) {
	scheme := jobScheme(t)
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	yes := true
	job := func(finalizer bool, phase batchv1alpha1.JobPhase) *batchv1alpha1.Job {
		j := &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "job-uid", CreationTimestamp: now}}
		if finalizer {
			j.Finalizers = []string{tracking.JobFinalizer}
		}
		j.Status.State = batchv1alpha1.JobState{Phase: phase, LastTransitionTime: now}
		return j
	}
	pod := func(finalizer bool, phase corev1.PodPhase) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-w-0", UID: "pod-uid", CreationTimestamp: now,
			Labels:          map[string]string{tracking.JobPodLabel: "train"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: jobAPIVersion, Kind: "Job", Name: "train", UID: "job-uid", Controller: &yes}}}}
		if finalizer {
			p.Finalizers = []string{tracking.PodFinalizer}
		}
		p.Status.Phase = phase
		return p
	}
	for name, tc := range map[string]struct {
		obj client.Object
		pod bool // reconcile with the pod reconciler
	}{
		"job losing its backstop":   {obj: job(false, batchv1alpha1.Running)},
		"job being released":        {obj: job(true, batchv1alpha1.Completed)},
		"pod getting its finalizer": {obj: pod(false, corev1.PodRunning), pod: true},
		"pod being released":        {obj: pod(true, corev1.PodSucceeded), pod: true},
		"pod of a released job": {obj: func() client.Object {
			j := job(true, batchv1alpha1.Running)
			j.Annotations = map[string]string{tracking.ReleaseAnnotation: "t-1"}
			return j
		}()},
	} {
		t.Run(name, func(t *testing.T) {
			patches := 0
			objs := []client.Object{tc.obj}
			if name == "pod of a released job" {
				objs = append(objs, pod(true, corev1.PodRunning))
			}
			if tc.pod {
				objs = append(objs, job(true, batchv1alpha1.Running)) // the pod's job, which the reconciler confirms
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
				WithIndex(&corev1.Pod{}, podOwnerIndex, ownerIndex).
				WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					patches++
					// Deleted by someone else between the read and this patch.
					return apierrors.NewNotFound(schema.GroupResource{Resource: "objects"}, obj.GetName())
				}}).Build()
			store, err := objstore.NewFS(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			deps := Deps{Client: c, APIReader: c, Records: &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{}}, Store: store,
				Logs: KubeLogs{}, Recorder: kuberecord.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(now.Time)}
			var r interface {
				Reconcile(context.Context, ctrl.Request) (ctrl.Result, error)
			} = &JobReconciler{Deps: deps, Options: DefaultOptions()}
			if tc.pod {
				r = &PodReconciler{Deps: deps, Options: DefaultOptions()}
			}
			res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: tc.obj.GetName()}})
			if err != nil || !res.IsZero() {
				t.Errorf("Reconcile = %+v, %v; want no requeue and no error", res, err)
			}
			if patches == 0 {
				t.Error("the reconcile never patched: the case does not reach the branch it tests")
			}
		})
	}
}

func (m *memRecords) Gaps(context.Context, string) ([]record.Gap, error) { return nil, nil }
func (m *memRecords) Segments(context.Context, string, string, int32) ([]record.Segment, error) {
	return nil, nil
}
func (m *memRecords) PutSegment(context.Context, record.Segment) error            { return nil }
func (m *memRecords) DeleteSegments(context.Context, string, string, int32) error { return nil }
func (m *memRecords) PutGap(context.Context, record.Gap) error                    { return nil }

// TestAddFinalizerKeepsOthers: adding our finalizer from a stale cached object must not drop a
// finalizer another controller added meanwhile (a merge patch replaces the whole list).
func TestAddFinalizerKeepsOthers(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	stale := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stale).Build()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(stale), stale); err != nil {
		t.Fatal(err)
	}
	fresh := stale.DeepCopy()
	fresh.Finalizers = []string{"example.com/other"}
	if err := c.Update(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
	r := &PodReconciler{Deps: Deps{Client: c}}
	err := r.addPodFinalizer(t.Context(), stale)
	var got corev1.Pod
	if gerr := c.Get(t.Context(), client.ObjectKeyFromObject(stale), &got); gerr != nil {
		t.Fatal(gerr)
	}
	if !slices.Contains(got.Finalizers, "example.com/other") {
		t.Errorf("finalizers %v after adding ours from a stale pod (err %v): the other controller's is lost", got.Finalizers, err)
	}
	if err == nil || !apierrors.IsConflict(errors.Unwrap(err)) {
		t.Errorf("addPodFinalizer = %v, want a conflict (the reconcile retries from the fresh pod)", err)
	}
}

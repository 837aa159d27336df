package archiver

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// TestReleaseJobFromStaleJob: the job's release patch, sent from the cached job, succeeds when
// only the job's status changed since (Volcano rewrites a finished job's status as its pods are
// released: with an optimistic lock each rewrite was a conflict, a requeue with backoff and a
// second PATCH, issue 28 target 5), keeps every other finalizer, and fails, dropping none, when
// the finalizer list changed under it.
func TestReleaseJobFromStaleJob(t *testing.T) {
	scheme := jobScheme(t)
	set := map[string]string{tracking.ArchivedAtAnnotation: "2026-11-25T12:00:00Z", tracking.ArchiveLocationAnnotation: "s3://b/ns/train/uid/"}
	for name, tc := range map[string]struct {
		finalizers []string                 // the job's when the archiver read it
		change     func(*batchv1alpha1.Job) // what changed it since
		wantErr    bool
		want       []string // its finalizers after
	}{
		"status rewritten": {
			finalizers: []string{"example.com/before", tracking.JobFinalizer, "example.com/after"},
			change:     func(j *batchv1alpha1.Job) { j.Status.Succeeded++ },
			want:       []string{"example.com/before", "example.com/after"},
		},
		"a finalizer added after ours": {
			finalizers: []string{tracking.JobFinalizer},
			change:     func(j *batchv1alpha1.Job) { j.Finalizers = append(j.Finalizers, "example.com/late") },
			want:       []string{"example.com/late"},
		},
		"a finalizer before ours removed": {
			finalizers: []string{"example.com/before", tracking.JobFinalizer, "example.com/after"},
			change:     func(j *batchv1alpha1.Job) { j.Finalizers = j.Finalizers[1:] },
			wantErr:    true,
			want:       []string{tracking.JobFinalizer, "example.com/after"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			stale := &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "job-uid", Finalizers: tc.finalizers,
				Annotations: map[string]string{tracking.SubmitterAnnotation: "alice"}}}
			c := staleIn(t, scheme, stale, tc.change)
			r := &JobReconciler{Deps: Deps{Client: c}}
			err := r.releaseJob(t.Context(), stale, set)
			if (err != nil) != tc.wantErr {
				t.Errorf("releaseJob = %v, want an error: %t", err, tc.wantErr)
			}
			var got batchv1alpha1.Job
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(stale), &got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Finalizers, tc.want) {
				t.Errorf("finalizers %v, want %v", got.Finalizers, tc.want)
			}
			if got.Annotations[tracking.SubmitterAnnotation] != "alice" {
				t.Errorf("annotations %v: the submitter's is lost", got.Annotations)
			}
			for k, v := range set {
				if tc.wantErr == (got.Annotations[k] == v) {
					t.Errorf("annotation %s = %q, want %q set: %t", k, got.Annotations[k], v, !tc.wantErr)
				}
			}
		})
	}
}

// staleIn is a fake client holding obj, which change then changed, metadata and status: obj is left
// as it was read before, as a cache behind the API server would hold it.
func staleIn[T client.Object](t *testing.T, scheme *runtime.Scheme, obj T, change func(T)) client.Client {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj).WithStatusSubresource(obj).Build()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	fresh := obj.DeepCopyObject().(T)
	change(fresh)
	if err := c.Update(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
	if err := c.Status().Update(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
	return c
}

// jobScheme is a scheme of client-go's types and Volcano's batch types, for fake clients.
func jobScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}

// ownerIndex indexes a fake client's pods as the manager's podOwnerIndex does.
func ownerIndex(o client.Object) []string {
	if ref, ok := ownerJob(o.(*corev1.Pod)); ok {
		return []string{ref.UID}
	}
	return nil
}

// TestReleaseJobRecreatedUnderItsName: a release sent from a job that was deleted and created
// again under its name meanwhile (the webhook gives the new one our finalizer, at the same index)
// changes nothing of the new one. Without the UID's test the new job lost our finalizer and got
// the old one's archive marks: taken for archived, it was never sealed.
func TestReleaseJobRecreatedUnderItsName(t *testing.T) {
	meta := func(uid string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: types.UID(uid), Finalizers: []string{tracking.JobFinalizer},
			Annotations: map[string]string{tracking.SubmitterAnnotation: "alice"}}
	}
	old, recreated := &batchv1alpha1.Job{ObjectMeta: meta("old-uid")}, &batchv1alpha1.Job{ObjectMeta: meta("new-uid")}
	c := fake.NewClientBuilder().WithScheme(jobScheme(t)).WithObjects(recreated).Build()
	r := &JobReconciler{Deps: Deps{Client: c}}
	if err := r.releaseJob(t.Context(), old, map[string]string{tracking.ArchivedAtAnnotation: "2026-11-25T12:00:00Z"}); err == nil {
		t.Error("releaseJob of the deleted job succeeded on the job recreated under its name")
	}
	var got batchv1alpha1.Job
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(recreated), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Finalizers, []string{tracking.JobFinalizer}) || got.Annotations[tracking.ArchivedAtAnnotation] != "" {
		t.Errorf("the recreated job has finalizers %v and annotations %v, want ours kept and no archive mark", got.Finalizers, got.Annotations)
	}
}

// TestReleasePodFromStalePod: an ended pod's release, sent from the cached pod, succeeds when only
// its status changed since (the node writes an ended pod's status in a burst: with an optimistic
// lock each write was a conflict, a requeue and a second PATCH, issue 28 target 5), keeps every
// other finalizer, and fails, dropping none, when the finalizer list changed under it. A pod that
// has not ended keeps the lock: a change since its read fails its release.
func TestReleasePodFromStalePod(t *testing.T) {
	for name, tc := range map[string]struct {
		phase      corev1.PodPhase
		finalizers []string          // the pod's when the archiver read it
		change     func(*corev1.Pod) // what changed it since
		wantErr    bool
		want       []string // its finalizers after
	}{
		"ended, status rewritten": {
			phase:      corev1.PodSucceeded,
			finalizers: []string{"example.com/before", tracking.PodFinalizer, "example.com/after"},
			change: func(p *corev1.Pod) {
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
			},
			want: []string{"example.com/before", "example.com/after"},
		},
		"ended, a finalizer before ours removed": {
			phase:      corev1.PodFailed,
			finalizers: []string{"example.com/before", tracking.PodFinalizer},
			change:     func(p *corev1.Pod) { p.Finalizers = p.Finalizers[1:] },
			wantErr:    true,
			want:       []string{tracking.PodFinalizer},
		},
		"ended, ours written twice": {
			phase:      corev1.PodSucceeded,
			finalizers: []string{tracking.PodFinalizer, "example.com/other", tracking.PodFinalizer},
			change:     func(p *corev1.Pod) { p.Labels = map[string]string{"changed": "yes"} },
			want:       []string{"example.com/other"},
		},
		"running, status rewritten": {
			phase:      corev1.PodRunning,
			finalizers: []string{tracking.PodFinalizer},
			change: func(p *corev1.Pod) {
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
			},
			wantErr: true,
			want:    []string{tracking.PodFinalizer},
		},
	} {
		t.Run(name, func(t *testing.T) {
			stale := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train-worker-0", UID: "pod-uid", Finalizers: tc.finalizers},
				Status: corev1.PodStatus{Phase: tc.phase}}
			c := staleIn(t, jobScheme(t), stale, tc.change)
			r := &PodReconciler{Deps: Deps{Client: c}}
			r.logged.add(client.ObjectKeyFromObject(stale), stale.UID, record.LogObject{Container: "main"}, true) // archived with its last log
			err := r.release(t.Context(), stale, archive.JobRef{Namespace: "ns", Name: "train", UID: "job-uid"}, nil)
			if (err != nil) != tc.wantErr {
				t.Errorf("release = %v, want an error: %t", err, tc.wantErr)
			}

			var got corev1.Pod
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(stale), &got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Finalizers, tc.want) {
				t.Errorf("finalizers %v, want %v", got.Finalizers, tc.want)
			}
		})
	}
}

// TestReleasedJobNotSealedAgain: a reconcile from a cache that does not show the job's release by
// this reconciler yet (its update event still on its way) seals and patches nothing: the patch's
// test would fail, a PATCH for nothing (three in 1,000 pods in BenchmarkReleaseThroughput). It
// waits for the release at most releaseEcho, and only for that job: one created again under its
// name, or shown released, is looked at as usual.
func TestReleasedJobNotSealedAgain(t *testing.T) {
	now := time.Date(2026, 11, 25, 17, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	job := &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "job-uid", Finalizers: []string{tracking.JobFinalizer},
		Annotations: map[string]string{tracking.SubmitterAnnotation: "alice"}}, Status: batchv1alpha1.JobStatus{State: batchv1alpha1.JobState{Phase: batchv1alpha1.Completed}}}
	c := fake.NewClientBuilder().WithScheme(jobScheme(t)).WithObjects(job).Build()
	// No Records: a reconcile that went on to record or seal the job would fail.
	r := &JobReconciler{Deps: Deps{Client: c, Clock: clk}, Options: DefaultOptions()}
	key := client.ObjectKeyFromObject(job)
	r.released.Store(key, releasedJob{uid: job.UID, at: now.Add(-time.Second)})

	res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != releaseEcho-time.Second {
		t.Errorf("Reconcile of a job just released = %+v, %v; want nothing done, a look again in %s", res, err, releaseEcho-time.Second)
	}
	for name, tc := range map[string]struct {
		job  func(*batchv1alpha1.Job)
		wait time.Duration
	}{
		"released in the cache":        {job: func(j *batchv1alpha1.Job) { j.Finalizers = nil }},
		"created again under its name": {job: func(j *batchv1alpha1.Job) { j.UID = "new-uid" }},
		"waited for long enough":       {wait: releaseEcho},
	} {
		r.released.Store(key, releasedJob{uid: job.UID, at: now})
		clk.SetTime(now.Add(tc.wait))
		cached := job.DeepCopy()
		if tc.job != nil {
			tc.job(cached)
		}
		if wait := r.releaseSeen(key, cached); wait != 0 {
			t.Errorf("%s: waits %s, want 0", name, wait)
		}
		if _, ok := r.released.Load(key); ok {
			t.Errorf("%s: the release is still remembered", name)
		}
	}
}

// TestReleaseErrorSaysWhy: the API server refuses a release patch whose test failed with a 422
// whose message says only that the request was in error; the release's error says why.
func TestReleaseErrorSaysWhy(t *testing.T) {
	refused := apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "PATCH", corev1.Resource("pods"), "train-worker-0", "", 0, false)
	if err := releaseError(refused); !errors.Is(err, errReleaseStale) || !errors.Is(err, refused) {
		t.Errorf("releaseError(%v) = %v, want it to say the object changed, and keep the API's error", refused, err)
	}
	conflict := apierrors.NewConflict(corev1.Resource("pods"), "train-worker-0", errors.New("modified"))
	if err := releaseError(conflict); err != conflict {
		t.Errorf("releaseError(%v) = %v, want it unchanged", conflict, err)
	}
}

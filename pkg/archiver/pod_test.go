package archiver

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/shard"
	"github.com/jobvault/jobvault/pkg/tracking"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kuberecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
)

func TestPodRuns(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	done := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: now}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	pod := func(phase corev1.PodPhase, deleting bool, statuses ...corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init"}}, Containers: []corev1.Container{{Name: "app"}, {Name: "side"}}}}
		p.Status.Phase = phase
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: done}}
		p.Status.ContainerStatuses = statuses
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	type row struct {
		Container, Instance string
		Run                 int32
		Never               bool
	}
	rows := func(p *corev1.Pod) []row {
		var out []row
		for _, cr := range podRuns(p) {
			out = append(out, row{cr.container, cr.instance, cr.run, cr.never})
		}
		return out
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want []row
	}{
		"running, no restarts: the running runs": {
			pod:  pod(corev1.PodRunning, false, corev1.ContainerStatus{Name: "app", State: running}, corev1.ContainerStatus{Name: "side", State: running}),
			want: []row{{"init", "current", 0, false}, {"app", "current", 0, false}, {"side", "current", 0, false}},
		},
		"running after a restart: the previous run and the running one": {
			pod: pod(corev1.PodRunning, false, corev1.ContainerStatus{Name: "app", State: running, RestartCount: 1}, corev1.ContainerStatus{Name: "side", State: running}),
			want: []row{{"init", "current", 0, false}, {"app", "previous-1", 0, false}, {"app", "current", 1, false},
				{"side", "current", 0, false}},
		},
		"restarted twice: every run": {
			pod: pod(corev1.PodRunning, false, corev1.ContainerStatus{Name: "app", State: running, RestartCount: 2}, corev1.ContainerStatus{Name: "side", State: running}),
			want: []row{{"init", "current", 0, false}, {"app", "previous-1", 0, false}, {"app", "previous-2", 1, false},
				{"app", "current", 2, false}, {"side", "current", 0, false}},
		},
		"crashed, waiting to restart: its next run has not started": {
			pod:  pod(corev1.PodRunning, false, corev1.ContainerStatus{Name: "app", State: waiting, RestartCount: 1}, corev1.ContainerStatus{Name: "side", State: running}),
			want: []row{{"init", "current", 0, false}, {"app", "previous-1", 0, false}, {"side", "current", 0, false}},
		},
		"deleted while one container never started": {
			pod:  pod(corev1.PodRunning, true, corev1.ContainerStatus{Name: "app", State: running}, corev1.ContainerStatus{Name: "side", State: waiting}),
			want: []row{{"init", "current", 0, false}, {"app", "current", 0, false}, {"side", "current", 0, true}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, rows(tc.pod)); diff != "" {
				t.Errorf("wanted logs (-want +got):\n%s", diff)
			}
		})
	}
}

// The pod reconciler takes on exactly the pods tracking.JobOf names outside the excluded
// namespaces: it records them and backstops their finalizer; any other pod it leaves alone.
func TestPodReconcilerTakesVcJobPodsOnly(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), batchv1alpha1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	vcjob := []metav1.OwnerReference{{APIVersion: jobAPIVersion, Kind: "Job", Name: "train", UID: "job-uid", Controller: ptr.To(true)}}
	pod := func(ns string, labels map[string]string, owners []metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train-w-0", UID: "pod-uid", CreationTimestamp: now,
			Labels: labels, OwnerReferences: owners}}
		p.Status.Phase = corev1.PodRunning
		return p
	}
	volcano := map[string]string{tracking.JobPodLabel: "train"}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"a VcJob's pod, without any label of ours": {pod: pod("ml", volcano, vcjob), want: true},
		"a VcJob's pod in an excluded namespace":   {pod: pod("kube-system", volcano, vcjob)},
		"Volcano's label copied, no VcJob owner":   {pod: pod("ml", volcano, nil)},
		"only our label":                           {pod: pod("ml", map[string]string{tracking.TrackedLabel: tracking.TrackedValue}, vcjob)},
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.pod, trainJob(tc.pod.Namespace, "train", "job-uid")).Build()
			records := &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{}}
			r := &PodReconciler{Deps: Deps{Client: c, Records: records, Recorder: kuberecord.NewFakeRecorder(10),
				Clock: clocktesting.NewFakeClock(now.Time)}, Options: DefaultOptions()}
			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.pod)}); err != nil {
				t.Fatal(err)
			}
			var got corev1.Pod
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(tc.pod), &got); err != nil {
				t.Fatal(err)
			}
			finalized, recorded := slices.Contains(got.Finalizers, tracking.PodFinalizer), len(records.pods) == 1
			if finalized != tc.want || recorded != tc.want {
				t.Errorf("finalizer added %v, pod recorded %v; want %v", finalized, recorded, tc.want)
			}
		})
	}
}

// TestPodReconcilerShardAndPending: a pod of another shard's job is left alone (not recorded, no
// requeue); a pod of this shard's whose containers have not started is recorded and not requeued
// (its start is an event: a periodic requeue made 100,000 pending pods 10,000 reconciles a
// second).
func TestPodReconcilerShardAndPending(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), batchv1alpha1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	const jobUID = "job-uid"
	mine := shard.Of(jobUID, 3)
	pod := func(deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-w-0", UID: "pod-uid", CreationTimestamp: now,
			Labels:          map[string]string{tracking.JobPodLabel: "train"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: jobAPIVersion, Kind: "Job", Name: "train", UID: jobUID, Controller: ptr.To(true)}},
			Finalizers:      []string{tracking.PodFinalizer}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}}
		p.Status.Phase = corev1.PodPending
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	for name, tc := range map[string]struct {
		shard    int
		deleting bool
		recorded bool
		requeue  bool
	}{
		"another shard's":       {shard: (mine + 1) % 3},
		"this shard's, pending": {shard: mine, recorded: true},
	} {
		t.Run(name, func(t *testing.T) {
			p := pod(tc.deleting)
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(p, trainJob("ml", "train", jobUID)).Build()
			records := &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{}}
			o := DefaultOptions()
			o.Shard = shard.Shard{Index: tc.shard, Total: 3}
			r := &PodReconciler{Deps: Deps{Client: c, Records: records, Recorder: kuberecord.NewFakeRecorder(10),
				Clock: clocktesting.NewFakeClock(now.Time)}, Options: o}
			res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
			if err != nil {
				t.Fatal(err)
			}
			if recorded := len(records.pods) == 1; recorded != tc.recorded || (res.RequeueAfter > 0) != tc.requeue {
				t.Errorf("recorded %v, requeue after %s; want recorded %v, requeue %v", recorded, res.RequeueAfter, tc.recorded, tc.requeue)
			}
		})
	}
}

// trainJob is the VcJob the test's pods name as their controller, which the reconciler confirms.
func trainJob(ns, name, uid string) *batchv1alpha1.Job {
	return &batchv1alpha1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
}

package archiver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/jobvault/jobvault/pkg/tracking"
)

// Only a pod's finalizer coming or going, or the pod going, reconciles its job.
func TestPodEventsOfJob(t *testing.T) {
	pod := func(phase corev1.PodPhase, finalizers ...string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Finalizers: finalizers}, Status: corev1.PodStatus{Phase: phase}}
	}
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Pod
		want     bool
	}{
		{"released", pod(corev1.PodSucceeded, tracking.PodFinalizer), pod(corev1.PodSucceeded), true},
		{"finalizer added", pod(corev1.PodPending), pod(corev1.PodPending, tracking.PodFinalizer), true},
		{"phase changed", pod(corev1.PodRunning, tracking.PodFinalizer), pod(corev1.PodSucceeded, tracking.PodFinalizer), false},
		{"another finalizer", pod(corev1.PodRunning, tracking.PodFinalizer), pod(corev1.PodRunning, tracking.PodFinalizer, "other"), false},
	} {
		if got := podEventsOfJob.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.cur}); got != tc.want {
			t.Errorf("%s: update reconciles the job: %v, want %v", tc.name, got, tc.want)
		}
	}
	p := pod(corev1.PodRunning, tracking.PodFinalizer)
	if podEventsOfJob.Create(event.CreateEvent{Object: p}) || !podEventsOfJob.Delete(event.DeleteEvent{Object: p}) || podEventsOfJob.Generic(event.GenericEvent{Object: p}) {
		t.Errorf("create, delete, generic: want false, true, false")
	}
}

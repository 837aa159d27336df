package archiver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestAllTerminated: only containers whose status says terminated count as stopped. A Waiting
// container may be running already: a pod deleted before its Running status was posted writes
// through its grace period.
func TestAllTerminated(t *testing.T) {
	terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	for _, tc := range []struct {
		name   string
		states []corev1.ContainerState
		want   bool
	}{
		{"all terminated", []corev1.ContainerState{terminated, terminated}, true},
		{"one running", []corev1.ContainerState{terminated, {Running: &corev1.ContainerStateRunning{}}}, false},
		{"one waiting (status not posted yet)", []corev1.ContainerState{terminated, {Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{}
			for i, s := range tc.states {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: string(rune('a' + i))})
				pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: string(rune('a' + i)), State: s})
			}
			if got := allTerminated(pod); got != tc.want {
				t.Errorf("allTerminated = %v, want %v", got, tc.want)
			}
		})
	}
}

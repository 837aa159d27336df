package archiver

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWantedLogs(t *testing.T) {
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
	type row struct{ Container, Instance, Unavailable string }
	rows := func(p *corev1.Pod) []row {
		var out []row
		for _, li := range wantedLogs(p) {
			out = append(out, row{li.container, li.instance, li.unavailable})
		}
		return out
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want []row
	}{
		"running, no restarts: nothing due yet": {
			pod: pod(corev1.PodRunning, false, corev1.ContainerStatus{Name: "app", State: running}, corev1.ContainerStatus{Name: "side", State: running}),
		},
		"running after a restart: the previous instance": {
			pod:  pod(corev1.PodRunning, false, corev1.ContainerStatus{Name: "app", State: running, RestartCount: 1}, corev1.ContainerStatus{Name: "side", State: running}),
			want: []row{{"app", "previous-1", ""}},
		},
		"restarted twice unseen: the older instance is gone": {
			pod:  pod(corev1.PodRunning, false, corev1.ContainerStatus{Name: "app", State: running, RestartCount: 2}, corev1.ContainerStatus{Name: "side", State: running}),
			want: []row{{"app", "previous-1", "the container restarted again before this instance was archived"}, {"app", "previous-2", ""}},
		},
		"succeeded: every container, init included": {
			pod:  pod(corev1.PodSucceeded, false, corev1.ContainerStatus{Name: "app", State: done}, corev1.ContainerStatus{Name: "side", State: done}),
			want: []row{{"init", "current", ""}, {"app", "current", ""}, {"side", "current", ""}},
		},
		"deleted while one container never started": {
			pod:  pod(corev1.PodRunning, true, corev1.ContainerStatus{Name: "app", State: running}, corev1.ContainerStatus{Name: "side", State: waiting}),
			want: []row{{"init", "current", ""}, {"app", "current", ""}, {"side", "current", "the container never started"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, rows(tc.pod)); diff != "" {
				t.Errorf("wanted logs (-want +got):\n%s", diff)
			}
		})
	}
}

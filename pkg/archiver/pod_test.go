package archiver

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

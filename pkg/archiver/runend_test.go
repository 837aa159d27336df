package archiver

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/record"
)

// TestRunEndInCrashLoopBackOff (from the review of issue 23, item 5): a kubelet backing off after
// run 1 died shows RestartCount 1, State Waiting and, as LastTerminationState, run 1 (the newest
// dead container), whose log pods/log then serves as the previous one and as the current one.
// Run 0's own container can no longer be asked for: its capture is told its rest is lost, never
// given run 1's container and times to read (before: Previous with run 1's, which stored run 1's
// log as run 0's). Run 1's capture is told it terminated, with its own container and times.
func TestRunEndInCrashLoopBackOff(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	t0 := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "pu"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "main", RestartCount: 1, ContainerID: "containerd://c1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
				ContainerID: "containerd://c1", StartedAt: metav1.NewTime(t0.Add(10 * time.Second)), FinishedAt: metav1.NewTime(t0.Add(11 * time.Second))}},
		}}}}
	r := &PodReconciler{Deps: Deps{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).Build(), Clock: clocktesting.NewFakeClock(t0.Add(20 * time.Second))}}
	end, _, err := r.runEnd(t.Context(), capture.Ref{Namespace: "a", Pod: "p", PodUID: "pu", Container: "main", Run: 0})
	if err != nil {
		t.Fatal(err)
	}
	if !end.Over || end.Previous || end.Lost != record.GapRestarted || end.ContainerID != "" || !end.Limit.Equal(t0.Add(9*time.Second)) {
		t.Errorf("runEnd(run 0) = %+v, want over, lost (%q), not to be read as the previous run, limited a second before run 1's start", end, record.GapRestarted)
	}
	end, _, err = r.runEnd(t.Context(), capture.Ref{Namespace: "a", Pod: "p", PodUID: "pu", Container: "main", Run: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !end.Terminated || end.Over || end.Final || end.ContainerID != "containerd://c1" || !end.FinishedAt.Equal(t0.Add(11*time.Second)) || !end.Limit.IsZero() {
		t.Errorf("runEnd(run 1) = %+v, want terminated (not over, not final: it restarts), its container c1, finished at %s, no limit (no later run yet)", end, t0.Add(11*time.Second))
	}
}

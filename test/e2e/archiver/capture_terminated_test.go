package archiver

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestCaptureReadsATerminatedInitContainerOnce: an init container's run ends while its pod runs on
// for many seconds. Its log, complete, is read once and held until the pod ends names it; the
// archiver keeps no follow stream of it open (a node ends such a stream at once: reopened without
// pause, it was a loop of thousands of requests a second against the API server and the node), and
// reopens nothing. Both logs are archived byte-exact.
func TestCaptureReadsATerminatedInitContainerOnce(t *testing.T) {
	// Not parallel: it counts every pods/log stream open in the cluster.
	s := stack.NewRig(t, objstore.BackendFS)
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	job := testbed.Job(s.NS, "init-done").Task("w", 1, []string{"main"}, testbed.InitContainers("init"), testbed.RunsFor("12s")).Obj()
	pod := testbed.PodName(job.Name, "w", 0)
	initOut, mainOut := stack.SteadyOutput("init", 3, 1<<10), stack.SteadyOutput("main", 20, 1<<10)
	rt.Run(t, s.NS, pod, map[string]testbed.Output{"init": {Runs: [][]testbed.Chunk{initOut}}, "main": {Runs: [][]testbed.Chunk{mainOut}, Every: 400 * time.Millisecond}})
	stack.CreateAs(t, s.Env, "erin", job)
	waitWritten(t, s, rt, pod, 2<<10) // main runs: init has ended
	// For 4 s of main's run: one stream, main's follow.
	polls := 0
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 4*time.Second, true, func(context.Context) (bool, error) {
		polls++
		if n := s.Env.LogStreams(t); n > 1 {
			var p corev1.Pod
			_ = s.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: s.NS, Name: pod}, &p)
			t.Errorf("%d pods/log streams open while only main runs, want main's only (init %+v, main %+v)", n, p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
			return true, nil
		}
		return false, nil
	}); err != nil && polls < 5 {
		// Each poll reads the API server's whole /metrics: on a loaded machine 9 of 20 fit in the
		// 4 s (a make test run, 2026-11-28). Five still see a reopen loop, which holds a second
		// stream open most of the time; the reopen counter below counts it whatever the polls saw.
		t.Fatalf("polled %d times: %v", polls, err)
	}
	if n := seriesSum(t, s.Metrics(t), `jobvault_archiver_follow_reopens_total{cause="ended"}`); n > 3 {
		t.Errorf("%.0f follow streams reopened after the node ended them, want none but a stray one", n)
	}
	j := s.WaitArchived(t, job, 2*time.Minute)
	s.CheckLog(t, logRow(t, s, string(j.UID), "init", record.InstanceCurrent), testbed.Bytes(initOut))
	s.CheckLog(t, logRow(t, s, string(j.UID), "main", record.InstanceCurrent), wroteAll(t, s, rt, pod, mainOut))
}

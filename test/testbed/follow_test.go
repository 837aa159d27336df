package testbed_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/jobvault/jobvault/test/testbed"
)

// followEnd bounds how long after its container is seen terminated a follow stream may take to
// end: the kubelet's reader asks the runtime whether the container runs each time it reaches the
// end of the file, and at least every second (logForceCheckPeriod) while it waits there; the node
// model sees the status at its next poll. The rest is margin for a loaded machine.
const followEnd = 5 * time.Second

// stillOpen is how long a follow of a running container must stay open to show that it does not
// end: more than two of the reader's one-second checks.
const stillOpen = 3 * time.Second

type streamed struct {
	data []byte
	err  error
	at   time.Time // when the stream ended
}

// follow opens pods/log?follow=true of the container (its previous run with previous) and reports
// what it delivered once it ends; the stream is closed when the test ends.
func follow(t *testing.T, cs kubernetes.Interface, ns, pod, container string, previous bool) <-chan streamed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rc, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true, Previous: previous}).Stream(ctx)
	if err != nil {
		t.Fatalf("follow %s/%s: %v", pod, container, err)
	}
	done := make(chan streamed, 1)
	go func() {
		defer rc.Close()
		b, err := io.ReadAll(rc)
		done <- streamed{data: b, err: err, at: time.Now()}
	}()
	return done
}

// endsAfter waits for the follow stream to end within followEnd of since, and checks it delivered
// what the run wrote (asked once it ended), cleanly.
func endsAfter(t *testing.T, what string, done <-chan streamed, since time.Time, written func() []byte) {
	t.Helper()
	select {
	case s := <-done:
		took := s.at.Sub(since)
		t.Logf("%s: the follow ended %s after the container was seen stopped", what, took.Round(10*time.Millisecond))
		if took < -time.Second {
			t.Errorf("%s: the follow ended %s before the container was seen stopped; want it open while the container runs", what, -took.Round(10*time.Millisecond))
		}
		want := written()
		if s.err != nil || !bytes.Equal(s.data, want) {
			t.Errorf("%s: the follow delivered %d bytes (%v), want the %d written, ending cleanly at EOF (first difference at %d)", what, len(s.data), s.err, len(want), firstDiff(s.data, want))
		}
	case <-time.After(time.Until(since.Add(followEnd))):
		t.Errorf("%s: the follow is still open %s after the container was seen stopped; a kubelet ends it at EOF", what, followEnd)
	}
}

// staysOpen checks that a follow of a running container does not end.
func staysOpen(t *testing.T, what string, done <-chan streamed) {
	t.Helper()
	select {
	case s := <-done:
		t.Errorf("%s: the follow of a running container ended after %d bytes (%v); want it open while the container runs", what, len(s.data), s.err)
	case <-time.After(stillOpen):
	}
}

func initState(p *corev1.Pod) corev1.ContainerState {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == "init" {
			return s.State
		}
	}
	return corev1.ContainerState{}
}

// TestNodeFollowEndsWhenContainerStops: as a kubelet's, the node's follow stream (pods/log
// ?follow=true) ends at EOF once the container it follows is not running: an init container that
// completed (its pod still running), a container killed at its pod's deletion, and a run that was
// restarted; a follow opened after the container stopped ends at once. A follow of a running
// container stays open.
func TestNodeFollowEndsWhenContainerStops(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	cs := clientset(t, env)
	ns, node := env.Namespace(t), env.AddNode(t)
	rt := env.Runtime(t, testbed.RuntimeOptions{})

	t.Run("init and killed", func(t *testing.T) {
		rt.Run(t, ns, "stops", map[string]testbed.Output{
			"init": {Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: []byte("init starting\n")}, {Stream: "stderr", Data: []byte("init done\n")}}}, Every: 200 * time.Millisecond},
			"main": {Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: []byte("main started\n")}}}, Shutdown: []testbed.Chunk{{Stream: "stderr", Data: []byte("SIGTERM\n")}}, Every: 100 * time.Millisecond},
		})
		pod := barePod(ns, "stops", node, 1, map[string]string{
			// The init container runs 3 s: long enough to open a follow of it while it runs.
			"pod-init-container-running.stage.kwok.x-k8s.io/delay":          "200ms",
			"pod-init-container-running.stage.kwok.x-k8s.io/jitter-delay":   "200ms",
			"pod-init-container-completed.stage.kwok.x-k8s.io/delay":        "3s",
			"pod-init-container-completed.stage.kwok.x-k8s.io/jitter-delay": "3s",
		})
		pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
		release(t, env, pod)
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		waitPod(t, env, pod, "init running", time.Minute, func(p *corev1.Pod) bool { return initState(p).Running != nil })
		initFollow := follow(t, cs, ns, pod.Name, "init", false)
		waitPod(t, env, pod, "init completed", time.Minute, func(p *corev1.Pod) bool { return initState(p).Terminated != nil })
		endsAfter(t, "init container completed", initFollow, time.Now(), func() []byte { return rt.Written(ns, pod.Name, "init", 0) })

		waitPod(t, env, pod, "running", time.Minute, running)
		late := time.Now()
		endsAfter(t, "init container followed after it completed", follow(t, cs, ns, pod.Name, "init", false), late, func() []byte { return rt.Written(ns, pod.Name, "init", 0) })

		if n := env.LogRequests(ns, pod.Name, "init"); n != 2 {
			t.Errorf("the node served %d pods/log requests for the init container, want the test's 2", n)
		}

		mainFollow := follow(t, cs, ns, pod.Name, "main", false)
		staysOpen(t, "main running", mainFollow)
		if err := env.Client.Delete(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		waitPod(t, env, pod, "killed", 30*time.Second, func(p *corev1.Pod) bool { return mainState(p).Terminated != nil })
		endsAfter(t, "main killed at its grace period's end", mainFollow, time.Now(), func() []byte { return rt.Written(ns, pod.Name, "main", 0) })
	})

	t.Run("restarted", func(t *testing.T) {
		rt.Run(t, ns, "restarts", map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{
			{{Stream: "stdout", Data: []byte("run 0\n")}}, {{Stream: "stdout", Data: []byte("run 1\n")}}}}})
		// Restarted twice, each run lasting 8 s: run 1 runs on while run 0's follow must end.
		pod := barePod(ns, "restarts", node, 1, map[string]string{"restarts.runtime.jobvault.io": "2", "restart-after.runtime.jobvault.io": "8s"})
		pod.Labels = map[string]string{testbed.RestartOnceLabel: "true"}
		release(t, env, pod)
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		waitPod(t, env, pod, "running", time.Minute, running)
		run0 := follow(t, cs, ns, pod.Name, "main", false)
		waitPod(t, env, pod, "restarted", 30*time.Second, func(p *corev1.Pod) bool {
			return running(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1
		})
		restarted := time.Now()
		run1 := follow(t, cs, ns, pod.Name, "main", false)
		endsAfter(t, "run 0 restarted", run0, restarted, func() []byte { return rt.Written(ns, pod.Name, "main", 0) })
		select {
		case s := <-run1:
			t.Errorf("the follow of run 1, running, ended after %d bytes (%v)", len(s.data), s.err)
		default:
		}
	})
}

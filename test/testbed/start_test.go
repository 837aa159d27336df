package testbed_test

import (
	"bufio"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/test/testbed"
)

// runKey names one run (restart count) of a container of a pod.
type runKey struct {
	pod, container string
	run            int32
}

// watchStarts records every startedAt the statuses of the namespace's pods show for each run of
// their containers, polled until the returned function is called (it returns them): the running
// or terminated state's, of the run the restart count names, and the last state's, of the run
// before. A kubelet takes a run's start before its process runs and never changes it.
func watchStarts(t *testing.T, env *testbed.Env, ns string) func() map[runKey][]time.Time {
	t.Helper()
	var (
		mu   sync.Mutex
		seen = map[runKey][]time.Time{}
		stop = make(chan struct{})
		done = make(chan struct{})
	)
	note := func(pod string, s corev1.ContainerStatus) {
		add := func(run int32, at metav1.Time) {
			k := runKey{pod, s.Name, run}
			if !at.IsZero() && !contains(seen[k], at.Time) {
				seen[k] = append(seen[k], at.Time)
			}
		}
		if r := s.State.Running; r != nil {
			add(s.RestartCount, r.StartedAt)
		}
		if r := s.State.Terminated; r != nil {
			add(s.RestartCount, r.StartedAt)
		}
		if r := s.LastTerminationState.Terminated; r != nil {
			add(s.RestartCount-1, r.StartedAt)
		}
	}
	go func() {
		defer close(done)
		for {
			var list corev1.PodList
			if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err == nil {
				mu.Lock()
				for _, p := range list.Items {
					for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
						note(p.Name, s)
					}
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() map[runKey][]time.Time {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// firstStamp is the timestamp of the first line pods/log serves of the container's current run (or
// with previous the run before); false if it serves none.
func firstStamp(t *testing.T, cs kubernetes.Interface, ns, pod, container string, previous bool) (time.Time, bool) {
	t.Helper()
	rc, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: previous, Timestamps: true}).Stream(t.Context())
	if err != nil {
		t.Fatalf("pods/log of %s/%s (previous %t): %v", pod, container, previous, err)
	}
	defer rc.Close()
	line, err := bufio.NewReader(rc).ReadString('\n')
	if line == "" {
		return time.Time{}, false
	}
	ts, _, _ := strings.Cut(line, " ")
	at, perr := time.Parse(time.RFC3339Nano, ts)
	if perr != nil {
		t.Fatalf("pods/log?timestamps=true of %s/%s: first line %q (%v): %v", pod, container, line, err, perr)
	}
	return at, true
}

// TestNodeRunStartsBeforeItsOutput: as on a kubelet, whose containerd records a container's start
// as soon as its process was let run, no run's first line is stamped before the startedAt its
// status shows (whole seconds, as the API keeps them), whenever the status is read:
// while it runs, once it ended, or as the last state after a restart. KWOK's stages are slowed
// (2 s) so that a run's output and its status are seconds apart: output written all at once, a
// first run and a restart; output written over time; init containers; a completed pod; a failed
// container beside one still running. Before, output written all at once was stamped when the
// test handed it to the runtime, seconds before the pod ran, and KWOK's stages restamped a run's
// start at its end (completed, failed, init container completed) or at a neighbour's failure.
func TestNodeRunStartsBeforeItsOutput(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	cs := clientset(t, env)
	ns, node := env.Namespace(t), env.AddNode(t)
	rt := env.Runtime(t, testbed.RuntimeOptions{})
	starts := watchStarts(t, env, ns)
	lines := func(tag string, n int) []testbed.Chunk {
		var out []testbed.Chunk
		for i := range n {
			out = append(out, testbed.Chunk{Stream: []string{"stdout", "stderr"}[i%2], Data: []byte(tag + " line\n")})
		}
		return out
	}
	slow := func(stages ...string) map[string]string {
		a := map[string]string{}
		for _, s := range stages {
			a[s+".stage.kwok.x-k8s.io/delay"], a[s+".stage.kwok.x-k8s.io/jitter-delay"] = "2s", "2s"
		}
		return a
	}
	paced := func(tag string) testbed.Output {
		return testbed.Output{Runs: [][]testbed.Chunk{lines(tag, 5)}, Every: 100 * time.Millisecond}
	}

	// Written all at once, restarted once by the runtime; its init container too.
	rt.Run(t, ns, "atonce", map[string]testbed.Output{
		"init": {Runs: [][]testbed.Chunk{lines("init", 3)}},
		"main": {Runs: [][]testbed.Chunk{lines("run 0", 3), lines("run 1", 3)}},
	})
	atonce := barePod(ns, "atonce", node, 1, slow("pod-init-container-running", "pod-init-container-completed", "pod-ready"))
	atonce.Labels = map[string]string{testbed.RestartOnceLabel: "true"}
	atonce.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}

	// Written over time; the pod fails one container while the other runs on.
	rt.Run(t, ns, "failed", map[string]testbed.Output{"main": paced("main"), "side": paced("side")})
	failed := barePod(ns, "failed", node, 1, slow("pod-container-running-failed"))
	failed.Labels = map[string]string{"pod-container-running-failed.stage.kwok.x-k8s.io": "true"}
	failed.Annotations["pod-container-running-failed.stage.kwok.x-k8s.io/container-name"] = "main"
	failed.Spec.Containers = append(failed.Spec.Containers, corev1.Container{Name: "side", Image: "busybox"})

	for _, pod := range []*corev1.Pod{atonce, failed} {
		release(t, env, pod)
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
	// Written over time by a Volcano job's pod (KWOK completes only pods a Job owns), an init
	// container's too.
	job := testbed.Job(ns, "done").Task("w", 1, []string{"main"}, testbed.InitContainers("init"), testbed.RunsFor("2s"),
		func(p *corev1.PodTemplateSpec) {
			for k, v := range slow("pod-init-container-completed") {
				p.Annotations[k] = v
			}
		}).Obj()
	done := testbed.PodName(job.Name, "w", 0)
	rt.Run(t, ns, done, map[string]testbed.Output{"init": paced("init"), "main": paced("main")})
	if err := env.Client.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}

	waitPod(t, env, atonce, "completed after its restart", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	waitPod(t, env, failed, "failed", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	waitPod(t, env, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: done}}, "completed", 2*time.Minute,
		func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	// The runs' statuses as they end up, and the side container's while it runs on.
	time.Sleep(200 * time.Millisecond)
	seen := starts()

	want := []runKey{{"atonce", "init", 0}, {"atonce", "main", 0}, {"atonce", "main", 1}, {"failed", "main", 0},
		{"failed", "side", 0}, {done, "init", 0}, {done, "main", 0}}
	for _, k := range want {
		var p corev1.Pod
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: k.pod}, &p); err != nil {
			t.Fatal(err)
		}
		current := int32(0)
		for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if s.Name == k.container {
				current = s.RestartCount
			}
		}
		first, ok := firstStamp(t, cs, ns, k.pod, k.container, k.run < current)
		switch {
		case !ok:
			t.Errorf("%s/%s run %d: pods/log served no line", k.pod, k.container, k.run)
		case len(seen[k]) == 0:
			t.Errorf("%s/%s run %d: no status showed its start", k.pod, k.container, k.run)
		}
		for _, started := range seen[k] {
			if first.Before(started) {
				t.Errorf("%s/%s run %d: first line stamped %s, %s before the startedAt %s a status showed (all shown: %v)",
					k.pod, k.container, k.run, first.UTC().Format(time.RFC3339Nano), started.Sub(first).Round(time.Millisecond),
					started.UTC().Format(time.RFC3339), seen[k])
			}
		}
		t.Logf("%s/%s run %d: first line %s, startedAt shown %v", k.pod, k.container, k.run, first.UTC().Format(time.RFC3339Nano), seen[k])
	}
}

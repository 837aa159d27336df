package testbed_test

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/jobvault/jobvault/test/testbed"
)

// answer is what pods/log answered one request (no follow): its status code and body; the pod's name and container IDs replaced by
// placeholders, so that the real node's and the model's answers compare.
type answer struct {
	Code int32
	Body string
}

func (a answer) String() string { return fmt.Sprintf("%d %q", a.Code, a.Body) }

var containerIDs = regexp.MustCompile(`containerd://[0-9a-f]+`)

// ask reads the container's log once, as pods/log serves it.
func ask(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, container string) answer {
	t.Helper()
	b, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).Do(t.Context()).Raw()
	a := answer{Code: 200, Body: string(b)}
	var st apierrors.APIStatus
	switch {
	case errors.As(err, &st):
		// The API server relays the kubelet's error body as it is (not a Status).
		a.Code = st.Status().Code
	case err != nil:
		t.Fatalf("pods/log of %s/%s: %v", pod.Name, container, err)
	}
	a.Body = strings.ReplaceAll(a.Body, pod.Name, "<pod>")
	a.Body = containerIDs.ReplaceAllString(a.Body, "containerd://<id>")
	return a
}

// realPod is a pod bound to the real node with the hold finalizer, its init containers and
// containers running the workload image as given.
func realPod(rn *testbed.RealNode, ns, name string, inits, containers map[string]testbed.Workload) *corev1.Pod {
	all := map[string]testbed.Workload{}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeName: rn.Name, RestartPolicy: corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](5)}}
	for c, w := range inits {
		tmpl.Spec.InitContainers, all[c] = append(tmpl.Spec.InitContainers, corev1.Container{Name: c}), w
	}
	for c, w := range containers {
		tmpl.Spec.Containers, all[c] = append(tmpl.Spec.Containers, corev1.Container{Name: c}), w
	}
	rn.Pods(all)(&tmpl)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{holdFinalizer}}, Spec: tmpl.Spec}
}

// onBoth runs the scenario on the real node and on the model at once, and returns what each saw.
func onBoth[R any](t *testing.T, real, model func(t *testing.T) R) (onReal, onModel R) {
	t.Helper()
	var wg sync.WaitGroup
	for _, s := range []struct {
		name string
		run  func(t *testing.T) R
		out  *R
	}{{"real node", real, &onReal}, {"model", model, &onModel}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(s.name, func(t *testing.T) { *s.out = s.run(t) })
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return onReal, onModel
}

// TestNodeModelMatchesRealNode runs the same scenarios on the real node (kubelet v1.33, containerd,
// runc) and on the node model (KWOK with Runtime) and compares what pods/log answers: the model's
// proof of faithfulness, for the behaviours API.md lists as once different.
func TestNodeModelMatchesRealNode(t *testing.T) {
	env := testbed.Cluster(t)
	cs := clientset(t, env)
	rn := env.RealNode(t, testbed.RealNodeOptions{})
	ns, node := env.Namespace(t), env.AddNode(t)
	rt := env.Runtime(t, testbed.RuntimeOptions{})
	create := func(t *testing.T, pod *corev1.Pod) {
		t.Helper()
		release(t, env, pod)
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
	}
	// writing starts a pod whose container writes 1 KiB and runs until deleted, on the real node,
	// and waits until it has written; it returns the pod and its UID.
	writing := func(t *testing.T, name string) (*corev1.Pod, string) {
		t.Helper()
		pod := realPod(rn, ns, name, nil, map[string]testbed.Workload{"main": {Bytes: 1 << 10, Hold: time.Hour}})
		create(t, pod)
		var uid string
		waitPod(t, env, pod, "written", time.Minute, func(p *corev1.Pod) bool {
			uid = string(p.UID)
			return len(rn.Written(ns, uid, "main", 0)) == 1<<10 && running(p)
		})
		return pod, uid
	}
	// modelWriting is writing on the model: a container that exits at once on SIGTERM.
	modelWriting := func(t *testing.T, name string) *corev1.Pod {
		t.Helper()
		rt.Run(t, ns, name, map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: bytes.Repeat([]byte("x\n"), 512)}}}}})
		pod := barePod(ns, name, node, 1, map[string]string{"sigterm-exit.stage.jobvault.io/after": "0s"})
		create(t, pod)
		return pod
	}

	// A container whose init container still runs has not started: the kubelet refuses its log.
	t.Run("container not started", func(t *testing.T) {
		onReal, onModel := onBoth(t, func(t *testing.T) answer {
			pod := realPod(rn, ns, "waits-real", map[string]testbed.Workload{"init": {Hold: 20 * time.Second}}, map[string]testbed.Workload{"main": {}})
			create(t, pod)
			waitPod(t, env, pod, "init running", time.Minute, func(p *corev1.Pod) bool { return initState(p).Running != nil })
			return ask(t, cs, pod, "main")
		}, func(t *testing.T) answer {
			rt.Run(t, ns, "waits-model", map[string]testbed.Output{"init": {}, "main": {Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: []byte("out\n")}}}}})
			pod := barePod(ns, "waits-model", node, 1, map[string]string{
				"pod-init-container-completed.stage.kwok.x-k8s.io/delay":        "20s",
				"pod-init-container-completed.stage.kwok.x-k8s.io/jitter-delay": "20s",
			})
			pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
			create(t, pod)
			waitPod(t, env, pod, "init running", time.Minute, func(p *corev1.Pod) bool { return initState(p).Running != nil })
			return ask(t, cs, pod, "main")
		})
		t.Logf("real node: %s", onReal)
		if onModel != onReal {
			t.Errorf("pods/log of a container not started: the model answers %s, the real node %s", onModel, onReal)
		}
	})

	// A deleted pod held by a finalizer: once its container has stopped the kubelet removes it
	// and its logs within seconds, and answers pods/log 200 with an error text as the body.
	t.Run("deleted pod collected", func(t *testing.T) {
		onReal, onModel := onBoth(t, func(t *testing.T) collection {
			pod, uid := writing(t, "gone-real")
			return collected(t, env, cs, pod, func() bool { return rn.Collected(ns, pod.Name, uid) })
		}, func(t *testing.T) collection {
			pod := modelWriting(t, "gone-model")
			return collected(t, env, cs, pod, func() bool { return rt.Collected(ns, pod.Name) })
		})
		t.Logf("real node: logs gone %s after the container stopped; then %s", onReal.after(), onReal.Answer)
		if onReal.After < 0 {
			t.Fatalf("the real node did not collect the deleted pod's logs within %s", collectionWait)
		}
		if onModel.After < 0 || onModel.After > onReal.After+modelGCMargin || onModel.After < onReal.After-modelGCMargin {
			t.Errorf("the model collected the deleted pod's logs %s after its container stopped, the real node %s; want within %s of it",
				onModel.after(), onReal.after(), modelGCMargin)
		}
		// The kubelet answers 200 either way, its text by what is gone when asked: the log file
		// only (the reader's error), or the container too (the runtime's).
		if !collectedAnswer.MatchString(onReal.Answer.Body) || onReal.Answer.Code != 200 {
			t.Errorf("pods/log of a collected container: the real node answers %s, not one of the answers the model knows", onReal.Answer)
		}
		if onModel.Answer.Code != onReal.Answer.Code || !collectedAnswer.MatchString(onModel.Answer.Body) {
			t.Errorf("pods/log of a collected container: the model answers %s, the real node %s", onModel.Answer, onReal.Answer)
		}
	})

	// A follow open while its deleted pod's container stops and is collected: how it ends.
	t.Run("follow of a deleted pod", func(t *testing.T) {
		followEnd := func(t *testing.T, pod *corev1.Pod, written func() []byte) string {
			done := follow(t, cs, ns, pod.Name, "main", false)
			time.Sleep(500 * time.Millisecond) // the stream is open, at the end of the file
			if err := env.Client.Delete(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			select {
			case s := <-done:
				if rest, ok := bytes.CutPrefix(s.data, written()); ok && s.err == nil {
					return fmt.Sprintf("ended cleanly after everything written, then %q", containerIDs.ReplaceAllString(string(rest), "containerd://<id>"))
				}
				return fmt.Sprintf("ended with %d bytes (%v), written %d", len(s.data), s.err, len(written()))
			case <-time.After(collectionWait):
				return "still open"
			}
		}
		onReal, onModel := onBoth(t, func(t *testing.T) string {
			pod, uid := writing(t, "followed-real")
			return followEnd(t, pod, func() []byte { return rn.Written(ns, uid, "main", 0) })
		}, func(t *testing.T) string {
			pod := modelWriting(t, "followed-model")
			waitPod(t, env, pod, "running", time.Minute, running)
			return followEnd(t, pod, func() []byte { return rt.Written(ns, pod.Name, "main", 0) })
		})
		t.Logf("real node: %s", onReal)
		if onModel != onReal {
			t.Errorf("a follow of a deleted pod: on the model it %s; on the real node it %s", onModel, onReal)
		}
	})

	// A crash loop backs off between runs: what the status names as the container's last state
	// then (the capture reads a run's rest as "previous" by it).
	t.Run("crash loop back-off", func(t *testing.T) {
		onReal, onModel := onBoth(t, func(t *testing.T) string {
			pod := realPod(rn, ns, "loop-real", nil, map[string]testbed.Workload{"main": {Bytes: 100, Hold: 2 * time.Second, Exit: 1, ExitRuns: 3}})
			pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			create(t, pod)
			return backOffStatus(t, env, pod)
		}, func(t *testing.T) string {
			rt.Run(t, ns, "loop-model", map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: []byte("out\n")}}}}})
			tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
			testbed.Restarts(3, 300*time.Millisecond)(tmpl)
			testbed.BackOff(2 * time.Second)(tmpl)
			pod := barePod(ns, "loop-model", node, 1, tmpl.Annotations)
			pod.Labels = tmpl.Labels
			create(t, pod)
			return backOffStatus(t, env, pod)
		})
		t.Logf("real node: %s", onReal)
		if onModel != onReal {
			t.Errorf("a crash loop backing off: on the model the status shows %s; on the real node %s", onModel, onReal)
		}
	})

	// containerd holds a line without its newline until the newline comes, 16 KiB fill up or the
	// stream closes at the container's exit; only then does pods/log serve it.
	t.Run("unfinished line", func(t *testing.T) {
		onReal, onModel := onBoth(t, func(t *testing.T) held {
			pod := realPod(rn, ns, "unfinished-real", nil, map[string]testbed.Workload{"main": {Bytes: 300, Lines: []int{100}, NoFinalNewline: true, Hold: 3 * time.Second}})
			create(t, pod)
			var uid string
			waitPod(t, env, pod, "written", time.Minute, func(p *corev1.Pod) bool {
				uid = string(p.UID)
				return len(rn.Written(ns, uid, "main", 0)) == 300 && running(p)
			})
			written := rn.Written(ns, uid, "main", 0)
			var h held
			h.Running = servedOf(ask(t, cs, pod, "main"), written)
			waitPod(t, env, pod, "exited", time.Minute, func(p *corev1.Pod) bool { return mainState(p).Terminated != nil })
			h.Exited = servedOf(ask(t, cs, pod, "main"), written)
			return h
		}, func(t *testing.T) held {
			// Its own runtime, whose GC waits: the pod is deleted to end its container.
			rt := env.Runtime(t, testbed.RuntimeOptions{GCDelay: time.Minute})
			rt.Run(t, ns, "unfinished-model", map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{{
				{Stream: "stdout", Data: []byte("line 1\nline 2\nunfin")}, {Stream: "stdout", Data: []byte("ished")}}}}})
			pod := barePod(ns, "unfinished-model", node, 1, map[string]string{"sigterm-exit.stage.jobvault.io/after": "0s"})
			create(t, pod)
			// As on the real node, the output comes after the start: wait until it is written.
			waitPod(t, env, pod, "written", time.Minute, func(p *corev1.Pod) bool {
				return running(p) && string(rt.Written(ns, pod.Name, "main", 0)) == "line 1\nline 2\nunfinished"
			})
			written := rt.Written(ns, pod.Name, "main", 0)
			var h held
			h.Running = servedOf(ask(t, cs, pod, "main"), written)
			if err := env.Client.Delete(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			waitPod(t, env, pod, "exited", time.Minute, func(p *corev1.Pod) bool { return mainState(p).Terminated != nil })
			h.Exited = servedOf(ask(t, cs, pod, "main"), written)
			return h
		})
		t.Logf("real node: served %+v", onReal)
		if onModel != onReal {
			t.Errorf("an unfinished line: the model served %+v, the real node %+v", onModel, onReal)
		}
	})
}

// backOffStatus describes how the status names a crash-looping container's runs while it backs
// off after a run died (not the first: a kubelet restarts after the first death at once).
func backOffStatus(t *testing.T, env *testbed.Env, pod *corev1.Pod) string {
	t.Helper()
	ids := map[int32]string{} // the container ID of each run, as seen while it ran
	var seen string
	waitPod(t, env, pod, "backing off after a later run died", 3*time.Minute, func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses
		if len(s) == 0 {
			return false
		}
		c := s[0]
		switch {
		case c.State.Running != nil && c.ContainerID != "":
			ids[c.RestartCount] = c.ContainerID
		case c.State.Terminated != nil && c.State.Terminated.ContainerID != "":
			ids[c.RestartCount] = c.State.Terminated.ContainerID
		}
		if l := c.LastTerminationState.Terminated; l != nil && c.State.Waiting == nil && l.ContainerID != "" {
			ids[c.RestartCount-1] = l.ContainerID
		}
		w, last := c.State.Waiting, c.LastTerminationState.Terminated
		if w == nil || last == nil || c.RestartCount < 1 || ids[c.RestartCount] == "" {
			return false
		}
		named := "another run"
		switch last.ContainerID {
		case ids[c.RestartCount]:
			named = "the run that died last (its number the restart count)"
		case ids[c.RestartCount-1]:
			named = "the run before the one that died last"
		}
		seen = fmt.Sprintf("Waiting (%s); its last state names %s", w.Reason, named)
		return true
	})
	return seen
}

// held is what a scenario saw of an unfinished line (no newline) at the end of a container's
// output: what pods/log served of it while the container ran, and after it exited.
type held struct{ Running, Exited string }

// servedOf says which part of written a pods/log answer served: "all", "all but the unfinished
// line", or what it was.
func servedOf(a answer, written []byte) string {
	complete := written[:bytes.LastIndexByte(written, '\n')+1]
	switch {
	case a.Code == 200 && a.Body == string(written):
		return "all"
	case a.Code == 200 && a.Body == string(complete):
		return "all but the unfinished line"
	}
	return a.String()
}

// collectedAnswer matches what a kubelet writes after its 200 for a collected container: the
// runtime's error once the container is gone, or, between the removal of its log file and of the
// container, the reader's.
var collectedAnswer = regexp.MustCompile(`^(unable to retrieve container logs for containerd://<id>|failed to try resolving symlinks in path "[^"]+": lstat [^:]+: no such file or directory)$`)

// modelGCMargin is how far the model's collection of a deleted pod's logs may be from the real
// node's: the kubelet's relist (every second) and the polls of both.
const modelGCMargin = 2 * time.Second

// collection is what a scenario saw of a deleted pod's container GC: how long after its container
// was seen terminated its logs were gone (or that they were not within the wait), and what
// pods/log answered then, the pod still held by its finalizer.
type collection struct {
	After  time.Duration
	Answer answer
}

func (c collection) after() string {
	if c.After < 0 {
		return fmt.Sprintf("not within %s", collectionWait)
	}
	return c.After.Round(100 * time.Millisecond).String()
}

// collectionWait bounds the wait for a deleted pod's logs to be collected.
const collectionWait = 20 * time.Second

// collected deletes the running pod, waits for its container to be seen terminated and then for
// gone() (polled), and asks pods/log once they are gone.
func collected(t *testing.T, env *testbed.Env, cs kubernetes.Interface, pod *corev1.Pod, gone func() bool) collection {
	t.Helper()
	waitPod(t, env, pod, "running", time.Minute, running)
	if err := env.Client.Delete(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	waitPod(t, env, pod, "terminated", time.Minute, func(p *corev1.Pod) bool { return mainState(p).Terminated != nil })
	stopped := time.Now()
	for !gone() {
		if time.Since(stopped) > collectionWait {
			return collection{After: -1}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return collection{After: time.Since(stopped), Answer: ask(t, cs, pod, "main")}
}

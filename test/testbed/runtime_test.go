package testbed_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/jobvault/jobvault/test/testbed"
)

// holdFinalizer stands in for jobvault's pod finalizer: it keeps a deleted pod's object.
const holdFinalizer = "testbed.jobvault.io/hold"

// barePod is a pod bound to node, running container "main" until deleted (KWOK completes only the
// clientset is a typed client of env's API server, with the admin's credentials.
func clientset(t *testing.T, env *testbed.Env) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// pods a Job owns), with the given grace period.
func barePod(ns, name, node string, grace int64, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{holdFinalizer}, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

// release removes the hold finalizer when the test ends, so the namespace can go.
func release(t *testing.T, env *testbed.Env, pod *corev1.Pod) {
	t.Cleanup(func() {
		var p corev1.Pod
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
			return
		}
		patch := client.MergeFrom(p.DeepCopy())
		controllerutil.RemoveFinalizer(&p, holdFinalizer)
		_ = env.Client.Patch(context.Background(), &p, patch)
	})
}

func waitPod(t *testing.T, env *testbed.Env, pod *corev1.Pod, what string, timeout time.Duration, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var p corev1.Pod
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), &p)
		if err == nil && ok(&p) {
			return &p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: not %s within %s (phase %s, statuses %+v, err %v)", pod.Name, what, timeout, p.Status.Phase, p.Status.ContainerStatuses, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mainState(p *corev1.Pod) corev1.ContainerState {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "main" {
			return s.State
		}
	}
	return corev1.ContainerState{}
}

func running(p *corev1.Pod) bool { return mainState(p).Running != nil }

func readLog(ctx context.Context, cs kubernetes.Interface, ns, pod string, follow bool) ([]byte, error) {
	rc, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "main", Follow: follow}).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// busyOutput is a container's output of n chunks, each about size bytes: stdout and stderr
// interleaved, a line over 16 KiB (split into partial records), bytes that are not UTF-8, and a
// last line without newline.
func busyOutput(n, size int) []testbed.Chunk {
	var chunks []testbed.Chunk
	for i := range n {
		stream := "stdout"
		if i%3 == 2 {
			stream = "stderr"
		}
		var b bytes.Buffer
		for b.Len() < size {
			fmt.Fprintf(&b, "chunk %d line %d: %s\n", i, b.Len(), strings.Repeat("x", 60))
		}
		chunks = append(chunks, testbed.Chunk{Stream: stream, Data: b.Bytes()})
	}
	chunks = append(chunks,
		testbed.Chunk{Stream: "stdout", Data: []byte(strings.Repeat("L", 20_000) + "\n")},
		testbed.Chunk{Stream: "stderr", Data: []byte{0xff, 0xfe, 0x00, 0x01, '\n'}},
		testbed.Chunk{Stream: "stdout", Data: []byte("last line without newline")})
	return chunks
}

// TestNodeRotatesLogs: the runtime rotates a container's log at MaxSize and keeps MaxFiles files;
// a read without follow then returns only the current file, while one follow stream opened at the
// start delivers every byte, across every rotation (the nodes' kubelet endpoint serves logs with
// the kubelet's own reader, which reopens the file it follows when it is rotated).
func TestNodeRotatesLogs(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	cs := clientset(t, env)
	ns, node := env.Namespace(t), env.AddNode(t)
	rt := env.Runtime(t, testbed.RuntimeOptions{MaxSize: 64 << 10, MaxFiles: 3})
	out := busyOutput(40, 8<<10)
	rt.Run(t, ns, "rotating", map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{out}, Every: 20 * time.Millisecond}})
	pod := barePod(ns, "rotating", node, 1, nil)
	release(t, env, pod)
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	waitPod(t, env, pod, "running", time.Minute, running)

	followed := make(chan []byte, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		b, _ := readLog(ctx, cs, ns, pod.Name, true)
		followed <- b
	}()

	want := testbed.Bytes(out)
	deadline := time.Now().Add(time.Minute)
	for !bytes.Equal(rt.Written(ns, pod.Name, "main", 0), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the runtime wrote %d of %d bytes within a minute", len(rt.Written(ns, pod.Name, "main", 0)), len(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The last line has no newline: while the container runs, its stream holds it back.
	want = want[:bytes.LastIndexByte(want, '\n')+1]
	current, err := readLog(t.Context(), cs, ns, pod.Name, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(current) == 0 || len(current) >= len(want) || !bytes.HasSuffix(want, current) {
		t.Errorf("a read after rotation returned %d bytes, want a proper suffix of the %d written: the current file only", len(current), len(want))
	}
	time.Sleep(time.Second) // let the follow stream catch up, then end it
	cancel()
	got := <-followed
	if !bytes.Equal(got, want) {
		t.Errorf("follow across rotation delivered %d bytes, want all %d written (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
}

// TestNodeGracefulTermination: a deleted pod's container keeps running, and writing, through its
// grace period; only then is it terminated (137 when killed at the end of the grace period, 143
// when it exits on SIGTERM) and the pod Failed, with the finalizer still holding it. After the GC
// delay its logs are gone, finalizer or not, and pods/log fails. Not parallel: the sigterm case
// has about half a second to see the shutdown output served before the container exits.
func TestNodeGracefulTermination(t *testing.T) {
	env := testbed.Cluster(t)
	cs := clientset(t, env)
	ns, node := env.Namespace(t), env.AddNode(t)
	rt := env.Runtime(t, testbed.RuntimeOptions{GCDelay: 2 * time.Second})
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		exitCode    int32
		// minRun is how long the container must keep running after the delete.
		minRun time.Duration
	}{
		// deletionTimestamp, which KWOK waits for, has whole seconds: the grace period here is up
		// to a second shorter than the kubelet's, which counts it from when it sees the delete.
		{name: "killed", exitCode: 137, minRun: 2 * time.Second},
		{name: "sigterm", annotations: map[string]string{"sigterm-exit.stage.jobvault.io/after": "1s"}, exitCode: 143, minRun: 800 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var shutdown []testbed.Chunk
			for i := range 4 {
				shutdown = append(shutdown, testbed.Chunk{Stream: "stderr", Data: []byte(fmt.Sprintf("SIGTERM received, flushing %d\n", i))})
			}
			rt.Run(t, ns, tc.name, map[string]testbed.Output{"main": {
				Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: []byte("started\n")}}}, Shutdown: shutdown, Every: 200 * time.Millisecond}})
			pod := barePod(ns, tc.name, node, 3, tc.annotations)
			release(t, env, pod)
			if err := env.Client.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			waitPod(t, env, pod, "running", time.Minute, running)
			for !bytes.Equal(rt.Written(ns, pod.Name, "main", 0), []byte("started\n")) {
				time.Sleep(50 * time.Millisecond)
			}
			deleted := time.Now()
			if err := env.Client.Delete(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			// Shutdown output is served while the container still runs.
			want := "started\n" + string(testbed.Bytes(shutdown[:2]))
			for {
				p := waitPod(t, env, pod, "present", time.Second, func(*corev1.Pod) bool { return true })
				if !running(p) {
					t.Fatalf("container terminated %s after the delete, before writing its shutdown output", time.Since(deleted))
				}
				if got, err := readLog(t.Context(), cs, ns, pod.Name, false); err == nil && strings.HasPrefix(string(got), want) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			p := waitPod(t, env, pod, "terminated", 10*time.Second, func(p *corev1.Pod) bool { return mainState(p).Terminated != nil })
			took := time.Since(deleted)
			if code := mainState(p).Terminated.ExitCode; code != tc.exitCode || p.Status.Phase != corev1.PodFailed || took < tc.minRun {
				t.Errorf("terminated %s after the delete with exit code %d, phase %s; want at least %s, %d, Failed", took, code, p.Status.Phase, tc.minRun, tc.exitCode)
			}
			t.Logf("container ran %s after the delete and wrote %d bytes", took.Round(10*time.Millisecond), len(rt.Written(ns, pod.Name, "main", 0)))

			// Container GC: the pod object stays (finalizer), its logs do not.
			if got, err := readLog(t.Context(), cs, ns, pod.Name, false); err != nil || !bytes.Equal(got, rt.Written(ns, pod.Name, "main", 0)) {
				t.Errorf("before GC: pods/log = %q, %v; want everything written", got, err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !rt.Collected(ns, pod.Name) {
				if time.Now().After(deadline) {
					t.Fatal("logs not collected within 10s of termination (GC delay 2s)")
				}
				time.Sleep(50 * time.Millisecond)
			}
			// As a kubelet: 200, with its error as the body.
			if got, err := readLog(t.Context(), cs, ns, pod.Name, false); err != nil || !strings.HasPrefix(string(got), "unable to retrieve container logs for containerd://") {
				t.Errorf("after GC: pods/log = %q, %v; want the kubelet's \"unable to retrieve container logs for containerd://<id>\"", got, err)
			}
			waitPod(t, env, pod, "still held by its finalizer", time.Second, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
		})
	}
}

// TestNodeLoss: pods/log for a pod of a lost node fails; how long it takes is logged.
func TestNodeLoss(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	cs := clientset(t, env)
	ns, node := env.Namespace(t), env.AddNode(t)
	rt := env.Runtime(t, testbed.RuntimeOptions{})
	rt.Run(t, ns, "stranded", map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: []byte("hello\n")}}}}})
	pod := barePod(ns, "stranded", node, 1, nil)
	release(t, env, pod)
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	waitPod(t, env, pod, "running", time.Minute, running)
	for len(rt.Written(ns, pod.Name, "main", 0)) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := readLog(t.Context(), cs, ns, pod.Name, false); err != nil || string(got) != "hello\n" {
		t.Fatalf("before the loss: pods/log = %q, %v", got, err)
	}
	env.LoseNode(t, node)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	start := time.Now()
	got, err := readLog(ctx, cs, ns, pod.Name, false)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("pods/log of a pod on a lost node returned %q, want an error", got)
	}
	t.Logf("pods/log of a pod on a lost node failed after %s: %v", took.Round(10*time.Millisecond), err)
}

// TestNodeWritesThroughAPIServerRestart: while kube-apiserver restarts (down 5 s), the node's
// containers keep writing, as they do on a real node; afterwards the same clients (the admin's and
// a user's kubeconfig) work again and pods/log serves what was written in the outage too.
func TestNodeWritesThroughAPIServerRestart(t *testing.T) {
	env := testbed.Cluster(t)
	cs := clientset(t, env)
	user, err := kubernetes.NewForConfig(env.UserConfig(t, "restart-user"))
	if err != nil {
		t.Fatal(err)
	}
	ns, node := env.Namespace(t), env.AddNode(t)
	rt := env.Runtime(t, testbed.RuntimeOptions{})
	out := busyOutput(600, 100)
	rt.Run(t, ns, "writer", map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{out}, Every: 100 * time.Millisecond}})
	pod := barePod(ns, "writer", node, 1, nil)
	release(t, env, pod)
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	waitPod(t, env, pod, "running", time.Minute, running)
	// The runtime sees the pod running at its next list, which may come after ours: wait for it
	// to write, or an outage that starts now would find the container not yet started.
	for len(rt.Written(ns, pod.Name, "main", 0)) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	before := len(rt.Written(ns, pod.Name, "main", 0))
	start := time.Now()
	env.RestartAPIServer(t, 5*time.Second)
	took := time.Since(start)
	// 10 chunks a second; the runtime may be late at a few polls.
	rate := 10 * float64(len(testbed.Bytes(out[:600]))) / 600
	if n, want := len(rt.Written(ns, pod.Name, "main", 0))-before, took.Seconds()*rate; float64(n) < 0.7*want {
		t.Errorf("the container wrote %d bytes in the %s the API server took to restart, want about %.0f", n, took.Round(100*time.Millisecond), want)
	}
	written := rt.Written(ns, pod.Name, "main", 0)
	got, err := readLog(t.Context(), cs, ns, pod.Name, false)
	if err != nil {
		t.Fatalf("read the log as the admin after the restart: %v", err)
	}
	if !bytes.HasPrefix(got, written) {
		t.Errorf("pods/log after the restart returned %d bytes, want the %d written first (first difference at %d)", len(got), len(written), firstDiff(got, written))
	}
	if _, err := user.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("a user's kubeconfig made before the restart: %v", err)
	}
}

// TestNodeWritesOutOfOrderTimestamps: the runtime writes records whose timestamps go back, as a
// real node's file holds them (containerd stamps stdout and stderr in separate goroutines before
// taking its write lock; a node clock is stepped back), and pods/log serves them in file order;
// Written is what was written, in write order.
func TestNodeWritesOutOfOrderTimestamps(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	cs := clientset(t, env)
	ns, node := env.Namespace(t), env.AddNode(t)
	rt := env.Runtime(t, testbed.RuntimeOptions{})
	base := time.Now().Truncate(time.Millisecond)
	us := time.Microsecond
	// All at once (Every 0): explicit times. Then paced: the clock stepped back 10 s.
	rt.Run(t, ns, "stamped", map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{{
		{Stream: "stdout", Data: []byte("two\n"), Time: base.Add(2 * us)},
		{Stream: "stderr", Data: []byte("one\n"), Time: base.Add(us)},
		{Stream: "stdout", Data: []byte("three\n"), Time: base.Add(3 * us)},
	}}}})
	rt.Run(t, ns, "stepped", map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{{
		{Stream: "stdout", Data: []byte("before\n")},
		{Stream: "stderr", Data: []byte("stepped back\n"), TimeOffset: -10 * time.Second},
		{Stream: "stdout", Data: []byte("after\n")},
	}}, Every: 100 * time.Millisecond}})
	for name, want := range map[string]string{"stamped": "two\none\nthree\n", "stepped": "before\nstepped back\nafter\n"} {
		pod := barePod(ns, name, node, 1, nil)
		release(t, env, pod)
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		waitPod(t, env, pod, "running", time.Minute, running)
		deadline := time.Now().Add(30 * time.Second)
		for string(rt.Written(ns, name, "main", 0)) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Written = %q, want %q in write order", name, rt.Written(ns, name, "main", 0), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rc, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: "main", Timestamps: true}).Stream(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		var stamps []time.Time
		var text string
		for _, line := range strings.SplitAfter(string(b), "\n") {
			if line == "" {
				continue
			}
			ts, rest, _ := strings.Cut(line, " ")
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				t.Fatalf("%s: pods/log?timestamps=true line %q: %v", name, line, err)
			}
			stamps, text = append(stamps, at), text+rest
		}
		if text != want || len(stamps) != 3 {
			t.Fatalf("%s: pods/log served %q, want %q", name, text, want)
		}
		switch name {
		case "stamped":
			if got := []time.Duration{stamps[0].Sub(base), stamps[1].Sub(base), stamps[2].Sub(base)}; !slices.Equal(got, []time.Duration{2 * us, us, 3 * us}) {
				t.Errorf("stamped: records at %v after the base, want 2µs, 1µs, 3µs in file order", got)
			}
		case "stepped":
			if back := stamps[0].Sub(stamps[1]); back < 5*time.Second || !stamps[2].After(stamps[0]) {
				t.Errorf("stepped: records at %v; want the second about 10 s before the first, the third after the first", stamps)
			}
		}
	}
}

package testbed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// apiServerGrace is how long kube-apiserver (and etcd) may take to stop before they are killed.
const apiServerGrace = 5 * time.Second

// RestartAPIServer restarts kube-apiserver as a control-plane node's kubelet restarts its pod:
// SIGTERM, and SIGKILL apiServerGrace later if it has not exited by then (it will not while
// pods/log streams are open: its graceful shutdown waits up to a minute for them). It stays down
// for down, then starts again on the same address with the same certificates, etcd and data, so
// that every kubeconfig still works, and RestartAPIServer returns once it is ready. Clients, parts
// and the programs under test reconnect by themselves; nothing is restarted for them. Some take
// their time (client-go's reflectors back off up to 30 s), so whether the cluster works again is
// checked when the test ends, for the tests after it: every part still runs, and a canary VcJob
// in kube-system is scheduled and completed (Volcano, KWOK) and its pod removed once it is deleted
// (kube-controller-manager's garbage collector). The cluster is the binary's: call it from a test
// that does not run in parallel with others.
func (e *Env) RestartAPIServer(t T, down time.Duration) {
	t.Helper()
	api := e.env.ControlPlane.GetAPIServer()
	logs := filepath.Join(WorkDir(), "kube-apiserver.log")
	// envtest reports the kill at the end of the grace period as an error; any other is one.
	if err := api.Stop(); err != nil && !strings.Contains(err.Error(), "timeout waiting for process kube-apiserver to stop") {
		t.Fatalf("testbed: stop kube-apiserver: %v (log: %s)", err, logs)
	}
	time.Sleep(down)
	if err := api.Start(); err != nil {
		t.Fatalf("testbed: restart kube-apiserver: %v (log: %s)", err, logs)
	}
	if err := e.waitReady(time.Minute); err != nil {
		t.Fatalf("testbed: kube-apiserver not ready after its restart: %v (log: %s)", err, logs)
	}
	t.Cleanup(func() {
		if err := e.waitWorking(t, 5*time.Minute); err != nil {
			t.Fatalf("testbed: the cluster does not work after the API server's restart: %v", err)
		}
	})
}

// waitReady waits until the API server answers /readyz.
func (e *Env) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	return poll(ctx, func() error {
		_, err := cs.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// waitWorking waits until every part of the control plane works: it still runs, and a canary job
// runs to completion and its pod is removed once it is deleted.
func (e *Env) waitWorking(t T, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, p := range []*Process{e.ControllerManager, e.KWOK, e.Scheduler, e.Controller} {
		if p.Exited() {
			return p.failure(errors.New("exited while the API server restarted"))
		}
	}
	// A job submitted while Volcano's controller is still re-listing after the restart can stay
	// Pending for good: the controller creates pods when it sees its PodGroup's update to Inqueue,
	// and a re-list delivers the PodGroup as an addition instead. Nothing else comes back to such a
	// job, which is Volcano's behaviour on any cluster, not the testbed's; what the tests after
	// need is that new jobs run, so while a canary may be stuck that way a new one is submitted
	// beside it every canaryEvery, and the first to complete ends the wait. Volcano's informers
	// take up to about two minutes to list again (client-go's backoff, doubled by its jitter, for
	// each of them), hence the budget.
	return e.canaries(ctx, t)
}

// canaryAttempt is how long one canary job may take: a few seconds when the cluster works.
const canaryAttempt = 40 * time.Second

// canaryEvery is how long a canary runs alone before the next one is submitted beside it: one that
// works completes in a few seconds; one submitted before Volcano re-listed never does, and the
// canary submitted after the re-list need not wait for the stuck one's canaryAttempt to end.
const canaryEvery = 10 * time.Second

// canaries runs canary jobs, a new one every canaryEvery while none has completed, each for at
// most canaryAttempt, until one completes (nil) or ctx ends (the last error). It returns once
// every canary it started has ended and its job has been deleted.
func (e *Env) canaries(ctx context.Context, t T) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan error)
	running := 0
	start := func() {
		running++
		go func() {
			attempt, stop := context.WithTimeout(ctx, canaryAttempt)
			defer stop()
			results <- e.canary(attempt)
		}()
	}
	start()
	next := time.NewTicker(canaryEvery)
	defer next.Stop()
	done := false
	var last error
	for running > 0 {
		select {
		case err := <-results:
			running--
			if err == nil {
				done = true
				cancel() // the other canaries end: their polls stop and their jobs are deleted
			} else if !done {
				last = err
				t.Logf("testbed: a canary job did not complete in %s after the API server's restart: %v", canaryAttempt, err)
			}
			if !done && running == 0 && ctx.Err() == nil {
				start() // every canary failed early: the next one now
			}
		case <-next.C:
			if !done && ctx.Err() == nil {
				start()
			}
		}
	}
	if done {
		return nil
	}
	return last
}

// canary runs a one-pod VcJob in kube-system (which jobvault's webhook leaves alone) to
// completion, then deletes it and waits until the garbage collector has removed its pod.
func (e *Env) canary(ctx context.Context) error {
	job := Job("kube-system", "").Task("c", 1, []string{"main"}).Obj()
	job.GenerateName = "testbed-canary-"
	// kube-system is outside Volcano's admission webhook too: set what it would default.
	job.Spec.Queue, job.Spec.SchedulerName, job.Spec.MinAvailable = "default", "volcano", 1
	if err := e.Client.Create(ctx, job); err != nil {
		return fmt.Errorf("create canary job: %w", err)
	}
	// Deleted in any case: a stuck canary must not be left to Volcano.
	defer func() { _ = e.Client.Delete(context.Background(), job, client.PropagationPolicy("Background")) }()
	if err := poll(ctx, func() error {
		var j batchv1alpha1.Job
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
			return err
		}
		if j.Status.State.Phase != batchv1alpha1.Completed {
			return fmt.Errorf("canary job %s in phase %q, want Completed (Volcano and KWOK run it)", job.Name, j.Status.State.Phase)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%w; %s", err, e.describeCanary(job))
	}
	if err := e.Client.Delete(ctx, job, client.PropagationPolicy("Background")); err != nil {
		return fmt.Errorf("delete canary job: %w", err)
	}
	return poll(ctx, func() error {
		var pod corev1.Pod
		err := e.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: PodName(job.Name, "c", 0)}, &pod)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod of the deleted canary job still there (kube-controller-manager's garbage collector removes it): %v", err)
	})
}

// describeCanary says how far Volcano and KWOK took a stuck canary: its PodGroup's phase (the
// scheduler enqueues it, then the controller creates the pod) and its pod's node and phase.
func (e *Env) describeCanary(job *batchv1alpha1.Job) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var groups schedulingv1beta1.PodGroupList
	var pods corev1.PodList
	in := client.InNamespace(job.Namespace)
	if err := e.Client.List(ctx, &groups, in); err != nil {
		return fmt.Sprintf("list its PodGroups: %v", err)
	}
	if err := e.Client.List(ctx, &pods, in); err != nil {
		return fmt.Sprintf("list its pods: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "PodGroups:")
	for _, g := range groups.Items {
		if metav1.IsControlledBy(&g, job) {
			fmt.Fprintf(&b, " %s %s %v", g.Name, g.Status.Phase, g.Status.Conditions)
		}
	}
	fmt.Fprintf(&b, "; pods:")
	for _, p := range pods.Items {
		if metav1.IsControlledBy(&p, job) {
			fmt.Fprintf(&b, " %s on %q %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
	}
	return b.String()
}

// poll calls f every 100 ms until it succeeds or ctx ends, and returns f's last error then (the
// one before ctx ended, which says more than the deadline).
func poll(ctx context.Context, f func() error) error {
	var last error
	for {
		err := f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil && last != nil {
			return last
		}
		last = err
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LogStreams is how many pods/log requests the API server is serving now (its
// apiserver_longrunning_requests gauge): the follow streams open through it, whoever the clients.
func (e *Env) LogStreams(t T) int {
	t.Helper()
	return int(e.podLogMetric(t, "apiserver_longrunning_requests"))
}

// PodLogRequests is how many pods/log requests the API server has served since it started, whoever
// the clients and whatever the answers (its apiserver_request_total counter): opened streams, not
// open ones; a client that reopens a stream in a loop shows here.
func (e *Env) PodLogRequests(t T) int {
	t.Helper()
	return int(e.podLogMetric(t, "apiserver_request_total"))
}

// podLogMetric sums the API server's series of the gauge or counter name for pods/log.
func (e *Env) podLogMetric(t T, name string) float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("testbed: read the API server's metrics: %v", err)
	}
	// Parse only this family's lines: the whole exposition is megabytes.
	var family strings.Builder
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, "# HELP "+name+" ") || strings.HasPrefix(line, "# TYPE "+name+" ") {
			family.WriteString(line)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(family.String()))
	if err != nil {
		t.Fatalf("testbed: parse the API server's %s: %v", name, err)
	}
	var n float64
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["resource"] == "pods" && labels["subresource"] == "log" {
			n += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return n
}

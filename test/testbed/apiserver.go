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
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
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
		if err := e.waitWorking(2 * time.Minute); err != nil {
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
func (e *Env) waitWorking(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, p := range []*Process{e.ControllerManager, e.KWOK, e.Scheduler, e.Controller} {
		if p.Exited() {
			return p.failure(errors.New("exited while the API server restarted"))
		}
	}
	return e.canary(ctx)
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
		return err
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

// poll calls f every 100 ms until it succeeds or ctx ends, and returns f's last error then.
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
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
	const name = "apiserver_longrunning_requests"
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
		if strings.Contains(line, name) {
			family.WriteString(line)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(family.String()))
	if err != nil {
		t.Fatalf("testbed: parse the API server's %s: %v", name, err)
	}
	n := 0
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["resource"] == "pods" && labels["subresource"] == "log" {
			n += int(m.GetGauge().GetValue())
		}
	}
	return n
}

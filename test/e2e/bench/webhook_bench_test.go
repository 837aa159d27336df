package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	utilptr "k8s.io/utils/ptr"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/admission"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Targets (see the issue): handler p99 under 1 ms; creating a VcJob through the API server with
// the webhook at most 1.25 times slower at p99 than without. A missed target is logged, not
// failed: this machine's neighbours make absolute timings noisy.
const (
	handlerP99Target = time.Millisecond
	e2eRatioTarget   = 1.25
)

// BenchmarkHandler measures one admission review through the webhook's HTTP handler (the mux the
// server registers: AdmissionReview decode, mutation, patch, encode; TLS and network excluded),
// reporting reviews/s and p50/p99 latency.
func BenchmarkHandler(b *testing.B) {
	admission.TuneGC() // as the webhook binary runs
	srv := webhook.NewServer(webhook.Options{})
	if err := admission.Register(srv, clock.RealClock{}); err != nil {
		b.Fatal(err)
	}
	mux := srv.WebhookMux()

	job := testbed.Job("ml", "").Task("worker", 8, []string{"main", "sidecar"}).Task("ps", 2, []string{"main"}).Obj()
	job.GenerateName = "bench-"
	job.Labels = map[string]string{"team": "a"}
	job.TypeMeta = metav1.TypeMeta{APIVersion: batchv1alpha1.SchemeGroupVersion.String(), Kind: "Job"}
	pod := testbed.Job("ml", "bench").Task("worker", 1, []string{"main"}).Obj().Spec.Tasks[0].Template
	podObj := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		// As Volcano's job controller creates it: its job label and the VcJob as controller.
		"metadata": map[string]any{"name": "bench-worker-0", "namespace": "ml", "labels": map[string]any{tracking.JobPodLabel: "bench"},
			"ownerReferences": []any{map[string]any{"apiVersion": batchv1alpha1.SchemeGroupVersion.String(), "kind": "Job", "name": "bench",
				"uid": "6f1c2b1e-0000-4000-8000-000000000001", "controller": true, "blockOwnerDeletion": true}}},
		"spec": pod.Spec,
	}
	for _, tc := range []struct {
		name, path string
		resource   metav1.GroupVersionResource
		kind       metav1.GroupVersionKind
		object     any
	}{
		{"VcJob", admission.JobPath, metav1.GroupVersionResource{Group: "batch.volcano.sh", Version: "v1alpha1", Resource: "jobs"},
			metav1.GroupVersionKind{Group: "batch.volcano.sh", Version: "v1alpha1", Kind: "Job"}, job},
		{"Pod", admission.PodPath, metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, podObj},
	} {
		b.Run(tc.name, func(b *testing.B) {
			raw, err := json.Marshal(tc.object)
			if err != nil {
				b.Fatal(err)
			}
			body, err := json.Marshal(admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{
					UID: "bench", Kind: tc.kind, Resource: tc.resource, Namespace: "ml", Operation: admissionv1.Create,
					UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"team-a", "system:authenticated"}},
					Object:   runtime.RawExtension{Raw: raw},
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			serve := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, tc.path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, req)
				return rec
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(serve().Body.Bytes(), &out); err != nil || out.Response == nil || !out.Response.Allowed || len(out.Response.Patch) == 0 {
				b.Fatalf("the review is not mutated: %+v (%v)", out.Response, err)
			}

			latencies := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				t0 := time.Now()
				serve()
				latencies = append(latencies, time.Since(t0))
			}
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(latencies)
			p50, p99 := quantile(latencies, 0.50), quantile(latencies, 0.99)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "reviews/s")
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			if b.N >= 100 && p99 > handlerP99Target {
				b.Logf("p99 %v misses the %v target", p99, handlerP99Target)
			}
		})
	}
}

// serverLatency reads the sum (seconds) and count of controller-runtime's webhook latency
// histogram for path from the in-process registry.
func serverLatency(b *testing.B, path string) (float64, uint64) {
	b.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_webhook_latency_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "webhook" && l.GetValue() == path {
					return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0, 0
}

// createRate is the pace of BenchmarkCreateVcJob: creates per second, all namespaces together.
var createRate = flag.Float64("create-rate", 20, "VcJob creates per second in BenchmarkCreateVcJob, spread evenly over its four namespaces")

// BenchmarkCreateVcJob creates VcJobs through the real API server in four namespaces in turn:
//   - with: our webhook is registered for it (config/webhook's configuration);
//   - onepatch: a webhook on the same server that answers with one constant patch operation, the
//     floor of any mutating webhook: the API server applies the patch, and because the object
//     changed it runs its whole mutating admission chain a second time;
//   - noop: a webhook on the same server that allows without a patch, the floor of any webhook;
//   - without: no webhook.
//
// All four see the same API server, etcd and Volcano load in the same run. Reports p50/p99 of
// each, each p99 over the p99 without (the target is ours, p99-ratio), the webhook calls as the
// API server timed them, the time our handler spent, and the machine's CPU use. Each iteration
// is one create in each namespace; use e.g. -benchtime=1000x for a stable p99, and run it alone
// (-run='^$'): another suite's cluster-wide webhook registration would blur the baseline, so it
// skips if one is present.
//
// The load is open-loop at -create-rate, as Kubernetes' own API latency SLOs are measured
// (clusterloader2 creates at a fixed QPS): each create starts on schedule whether or not the
// previous one has returned, so a slow create is not hidden by delaying the next. The flag goes
// after the package: go test -run '^$' -bench CreateVcJob -benchtime 1000x ./test/e2e/bench -create-rate=10
func BenchmarkCreateVcJob(b *testing.B) {
	admission.TuneGC() // the webhook server runs in this process, as the webhook binary would
	env := testbed.Cluster(b)
	ctx := context.Background()
	var mwcs admissionregistrationv1.MutatingWebhookConfigurationList
	if err := env.Client.List(ctx, &mwcs); err != nil {
		b.Fatal(err)
	}
	// The benchmark's namespaces, as a namespaceSelector sees them (names aside).
	benchNS := labels.Set{testbed.VolcanoAdmissionOffLabel: "off"}
	for _, cfg := range mwcs.Items {
		for _, w := range cfg.Webhooks {
			if sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector); err == nil && !sel.Matches(benchNS) {
				continue // never sees the benchmark's namespaces: Volcano's
			}
			for _, r := range w.Rules {
				if slices.Contains(r.APIGroups, batchv1alpha1.SchemeGroupVersion.Group) || slices.Contains(r.APIGroups, "*") {
					b.Skipf("MutatingWebhookConfiguration %s already handles VcJobs, so there is no baseline; run this benchmark alone (-run='^$')", cfg.Name)
				}
			}
		}
	}
	if *createRate <= 0 {
		b.Fatalf("-create-rate must be positive, not %v", *createRate)
	}

	srv := stack.ServeWebhook(b, env)
	c := stack.Unthrottled(b, env, env.Config)
	type arm struct {
		name string
		ns   string
		hook string // the webhook's name in the API server's metrics, "" for none
		lat  []time.Duration
	}
	const floorAnnotation = "e2e.jobvault.io/floor"
	floors := map[string]cradmission.Response{
		"onepatch": cradmission.Patched("", jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{floorAnnotation: "true"})),
		"noop":     cradmission.Allowed(""),
	}
	var arms []*arm
	for _, name := range []string{"with", "onepatch", "noop", "without"} {
		// Without Volcano's admission: it would refuse absentQueue.
		a := &arm{name: name, ns: env.NamespaceWithoutVolcanoAdmission(b), lat: make([]time.Duration, b.N)}
		b.Cleanup(func() { stack.ReleaseNamespace(b, env, a.ns) })
		arms = append(arms, a)
		switch resp, floor := floors[name]; {
		case name == "with":
			srv.Register(b, env, []string{a.ns}, func(w *admissionregistrationv1.MutatingWebhook) {
				if isJobHook(w) {
					a.hook = w.Name
				}
			})
		case floor:
			path := "/e2e-" + name
			srv.Server.Register(path, &cradmission.Webhook{Handler: cradmission.HandlerFunc(
				func(context.Context, cradmission.Request) cradmission.Response { return resp })})
			srv.Register(b, env, []string{a.ns}, func(w *admissionregistrationv1.MutatingWebhook) {
				if isJobHook(w) {
					a.hook = name + ".e2e.jobvault.io"
					w.Name, w.ClientConfig.URL = a.hook, utilptr.To("https://"+srv.Addr+path)
				}
			})
		}
	}

	create := func(a *arm, i int) time.Duration {
		job := testbed.Job(a.ns, fmt.Sprintf("bench-%d", i)).Task("main", 1, []string{"main"}).Obj()
		job.Spec.Queue = absentQueue
		t0 := time.Now()
		if err := c.Create(ctx, job); err != nil {
			b.Errorf("create VcJob in %s: %v", a.ns, err)
			return 0
		}
		took := time.Since(t0)
		tracked, floored := slices.Contains(job.Finalizers, tracking.JobFinalizer), job.Annotations[floorAnnotation] != ""
		if tracked != (a.name == "with") || floored != (a.name == "onepatch") {
			b.Errorf("VcJob in the %s namespace %s: finalizer %v, floor annotation %v", a.name, a.ns, tracked, floored)
		}
		return took
	}
	// Warm every path: connections, the webhook clients, caches.
	for i := range 5 {
		for n, a := range arms {
			create(a, -1-n-len(arms)*i)
		}
	}

	// Each round of four creates visits every arm, in the order of a row of a balanced Latin
	// square: over four rounds each arm takes every position once and follows every other arm
	// once, so that none benefits from another's warm-up or load.
	order := [4][4]int{{0, 1, 3, 2}, {1, 2, 0, 3}, {2, 3, 1, 0}, {3, 0, 2, 1}}
	interval := time.Duration(float64(time.Second) / *createRate)
	serverSum, serverCount := serverLatency(b, admission.JobPath)
	callsBefore := apiServerCallLatency(b, env)
	cpu0 := cpuTimes(b)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range len(arms) * b.N {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		a, round := arms[order[(i/len(arms))%len(order)][i%len(arms)]], i/len(arms)
		wg.Go(func() { a.lat[round] = create(a, i) })
	}
	wg.Wait()
	b.StopTimer()
	cpu1 := cpuTimes(b)
	if b.Failed() {
		return
	}

	ms := func(sec float64) float64 { return sec * 1000 }
	// The webhook calls as the API server timed them (request encoding, the HTTPS round trip, the
	// patch applied) and, within ours, the time our handler spent.
	calls := apiServerCallLatency(b, env)
	for _, a := range arms {
		if after, before := calls[a.hook], callsBefore[a.hook]; a.hook != "" && after.count > before.count {
			b.ReportMetric(ms((after.sum-before.sum)/(after.count-before.count)), "call-mean-ms-"+a.name)
		}
	}
	if sum, count := serverLatency(b, admission.JobPath); count > serverCount {
		b.ReportMetric(ms((sum-serverSum)/float64(count-serverCount)), "server-mean-ms")
	}
	b.ReportMetric(busy(cpu0, cpu1), "cpu-busy-%")
	p99 := map[string]time.Duration{}
	for _, a := range arms {
		slices.Sort(a.lat)
		p99[a.name] = quantile(a.lat, 0.99)
		b.ReportMetric(quantile(a.lat, 0.50).Seconds()*1000, "p50-ms-"+a.name)
		b.ReportMetric(p99[a.name].Seconds()*1000, "p99-ms-"+a.name)
	}
	for _, name := range []string{"onepatch", "noop"} {
		b.ReportMetric(float64(p99[name])/float64(p99["without"]), "p99-ratio-"+name)
	}
	ratio := float64(p99["with"]) / float64(p99["without"])
	b.ReportMetric(ratio, "p99-ratio")
	if b.N >= 100 && ratio > e2eRatioTarget {
		b.Logf("p99 ratio %.2f misses the %.2f target (with %v, without %v; one-patch webhook %v, no-op webhook %v)",
			ratio, e2eRatioTarget, p99["with"], p99["without"], p99["onepatch"], p99["noop"])
	}
}

// isJobHook reports whether w is the configuration's VcJob webhook.
func isJobHook(w *admissionregistrationv1.MutatingWebhook) bool {
	return slices.ContainsFunc(w.Rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return slices.Contains(r.APIGroups, batchv1alpha1.SchemeGroupVersion.Group)
	})
}

// absentQueue is the Volcano queue of BenchmarkCreateVcJob's jobs. It does not exist, so the
// Volcano scheduler leaves them out of its snapshot and the job controller creates no PodGroup or
// pods for them: Volcano's work does not depend on the webhook and does not grow with the number
// of jobs the benchmark has created. Kept pending in a real queue, every job joins every
// scheduling cycle: the scheduler's CPU doubled within a minute, both cores were saturated, and
// that load, not the webhook, decided the latency. Volcano's admission webhook refuses a job whose
// queue does not exist, so the benchmark's namespaces are left out of it: the arms compare our
// webhook with none, as before the testbed ran Volcano's.
const absentQueue = "jobvault-bench-absent"

// histogram is the sum (seconds) and count of a latency histogram.
type histogram struct{ sum, count float64 }

// apiServerCallLatency reads the API server's histogram of calls to each mutating webhook on
// CREATE (apiserver_admission_webhook_admission_duration_seconds), by webhook name.
func apiServerCallLatency(b *testing.B, env *testbed.Env) map[string]histogram {
	b.Helper()
	const name = "apiserver_admission_webhook_admission_duration_seconds"
	byHook := map[string]histogram{}
	for _, m := range apiServerMetrics(b, env, name)[name].GetMetric() {
		if l := metricLabels(m); l["operation"] == "CREATE" {
			h := byHook[l["name"]]
			h.sum += m.GetHistogram().GetSampleSum()
			h.count += float64(m.GetHistogram().GetSampleCount())
			byHook[l["name"]] = h
		}
	}
	return byHook
}

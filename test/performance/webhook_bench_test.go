package performance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/utils/clock"
	utilptr "k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/admission"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// Target (targets.yaml): handler p99 under 1 ms. A missed target is logged, not failed: this
// machine's neighbours make absolute timings noisy.
var handlerP99Target = targetDuration("handlerP99")

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

// The paces of the end-to-end benchmarks: creates per second through the API server, all arms
// together (each arm gets its share; see createArms).
var (
	createRates = flag.String("create-rates", "20,50,100",
		"VcJob creates per second in BenchmarkCreateVcJob, comma-separated, one sub-benchmark each; all four arms together")
	podCreateRate = flag.Float64("pod-create-rate", 200, "pod creates per second in BenchmarkCreatePod, all four arms together")
	createRounds  = flag.Int("create-rounds", 5,
		"rounds the creates of BenchmarkCreateVcJob and BenchmarkCreatePod are cut into, one p99 ratio each: the verdict is on their median")
)

// BenchmarkCreateVcJob creates VcJobs through the real API server, paced open-loop at each of
// -create-rates, with our webhook and the floors of any webhook (see createArms). The jobs use a
// queue that does not exist (absentQueue), so Volcano does no work for them.
//
// The flags go after the package: go test -run '^$' -bench CreateVcJob -benchtime 1000x ./test/performance -create-rates=10,20
func BenchmarkCreateVcJob(b *testing.B) {
	var rates []float64
	for _, f := range strings.Split(*createRates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			b.Fatalf("-create-rates=%q: want positive numbers separated by commas", *createRates)
		}
		rates = append(rates, r)
	}
	for _, rate := range rates {
		b.Run(fmt.Sprintf("rate=%g", rate), func(b *testing.B) {
			createArms(b, createTarget{
				kind: "VcJob", group: batchv1alpha1.SchemeGroupVersion.Group, path: admission.JobPath, rate: rate, isHook: isJobHook,
				objects: func(b *testing.B, _ client.Client, ns string) func(i int) client.Object {
					return func(i int) client.Object {
						job := testbed.Job(ns, fmt.Sprintf("bench-%d", i)).Task("main", 1, []string{"main"}).Obj()
						job.Spec.Queue = absentQueue
						return job
					}
				},
				ours: func(o client.Object) bool { return slices.Contains(o.GetFinalizers(), tracking.JobFinalizer) },
			})
		})
	}
}

// BenchmarkCreatePod creates pods of a VcJob through the real API server, paced open-loop at
// -pod-create-rate, with our pod webhook and the floors of any webhook (see createArms). Each
// arm's pods are controlled by a VcJob of their namespace (in absentQueue, so Volcano creates
// none itself) and carry Volcano's job label, as the pods Volcano creates do; their scheduler
// does not exist, so no node runs them.
func BenchmarkCreatePod(b *testing.B) {
	if *podCreateRate <= 0 {
		b.Fatalf("-pod-create-rate must be positive, not %v", *podCreateRate)
	}
	createArms(b, createTarget{
		kind: "Pod", group: "", path: admission.PodPath, rate: *podCreateRate, isHook: isPodHook,
		objects: func(b *testing.B, c client.Client, ns string) func(i int) client.Object {
			owner := testbed.Job(ns, "owner").Task("main", 1, []string{"main"}).Obj()
			owner.Spec.Queue = absentQueue
			if err := c.Create(context.Background(), owner); err != nil {
				b.Fatalf("create the pods' VcJob in %s: %v", ns, err)
			}
			spec := owner.Spec.Tasks[0].Template.Spec
			spec.SchedulerName = "jobvault-bench-none"
			return func(i int) client.Object {
				return &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{
						Name: fmt.Sprintf("owner-main-%d", i), Namespace: ns,
						Labels: map[string]string{tracking.JobPodLabel: owner.Name},
						OwnerReferences: []metav1.OwnerReference{{APIVersion: batchv1alpha1.SchemeGroupVersion.String(), Kind: "Job",
							Name: owner.Name, UID: owner.UID, Controller: utilptr.To(true), BlockOwnerDeletion: utilptr.To(true)}},
					},
					Spec: *spec.DeepCopy(),
				}
			}
		},
		ours: func(o client.Object) bool { return slices.Contains(o.GetFinalizers(), tracking.PodFinalizer) },
	})
}

// createTarget is what createArms creates, and how our webhook for it is recognised.
type createTarget struct {
	kind  string  // "VcJob" or "Pod", for the output
	group string  // its API group
	path  string  // our handler's path
	rate  float64 // creates per second, all arms together
	// isHook picks our webhook for the kind out of config/webhook's configuration.
	isHook func(*admissionregistrationv1.MutatingWebhook) bool
	// objects prepares namespace ns and returns the i-th object to create in it.
	objects func(b *testing.B, c client.Client, ns string) func(i int) client.Object
	// ours reports whether our webhook mutated the created object.
	ours func(client.Object) bool
}

// Target of the end-to-end benchmarks (targets.yaml): at p99, our webhook costs a create at
// most 1.10 times what a webhook answering one constant patch does, in the same run.
var onePatchRatioTarget = targetNumber("onePatchRatio")

// saturatedP50 marks a run whose pace the API server could not keep up with: a create without any
// webhook normally takes a few milliseconds here, so a median beyond this means creates queue,
// and the p99s then compare queueing, not webhooks. Such a run's verdict is INCONCLUSIVE.
const saturatedP50 = 50 * time.Millisecond

// createArms creates objects through the real API server in four namespaces in turn:
//   - with: our webhook is registered for it (config/webhook's configuration);
//   - onepatch: a webhook on the same server that answers with one constant patch operation, the
//     floor of any mutating webhook: the API server applies the patch, and because the object
//     changed it runs its whole mutating admission chain a second time;
//   - noop: a webhook on the same server that allows without a patch, the floor of any webhook;
//   - without: no webhook.
//
// All four see the same API server, etcd and Volcano load in the same run. Reports p50/p99 of
// each, our p99 over the one-patch p99 (the target) and each p99 over the p99 without, the
// webhook calls as the API server timed them (its own histogram, mean and p99 from its buckets),
// the time our handler spent, and the machine's CPU use. Each iteration is one create in each
// namespace; use e.g. -benchtime=1000x for a stable p99, and run it alone (-run='^$'): another
// suite's cluster-wide webhook registration would blur the baseline, so it skips if one is present.
//
// The load is open-loop, as Kubernetes' own API latency SLOs are measured (clusterloader2 creates
// at a fixed QPS): each create starts on schedule whether or not the previous one has returned,
// so a slow create is not hidden by delaying the next.
func createArms(b *testing.B, tgt createTarget) {
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
				if slices.Contains(r.APIGroups, tgt.group) || slices.Contains(r.APIGroups, "*") {
					b.Skipf("MutatingWebhookConfiguration %s already handles %ss, so there is no baseline; run this benchmark alone (-run='^$')", cfg.Name, tgt.kind)
				}
			}
		}
	}

	srv := stack.ServeWebhook(b, env)
	c := stack.Unthrottled(b, env, env.Config)
	type arm struct {
		name string
		ns   string
		hook string // the webhook's name in the API server's metrics, "" for none
		lat  []time.Duration
		// timedOut counts the creates that failed for overload (see overloaded): the API server's
		// own deadline, a call to the arm's webhook that did not answer in time, a broken connection.
		timedOut atomic.Int64
		// unpatched counts the creates that came back without the arm's patch. The VcJob webhook
		// fails open (failurePolicy Ignore), so a call that timed out on a saturated machine
		// leaves the object as it was; after the run, these are weighed against the calls the
		// API server says failed open.
		unpatched atomic.Int64
		object    func(i int) client.Object
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
				if tgt.isHook(w) {
					a.hook = w.Name
				}
			})
		case floor:
			path := "/e2e-" + name
			srv.Server.Register(path, &cradmission.Webhook{Handler: cradmission.HandlerFunc(
				func(context.Context, cradmission.Request) cradmission.Response { return resp })})
			srv.Register(b, env, []string{a.ns}, func(w *admissionregistrationv1.MutatingWebhook) {
				if tgt.isHook(w) {
					a.hook = name + ".e2e.jobvault.io"
					w.Name, w.ClientConfig.URL = a.hook, utilptr.To("https://"+srv.Addr+path)
				}
			})
		}
		a.object = tgt.objects(b, c, a.ns)
	}

	create := func(a *arm, i int) time.Duration {
		obj := a.object(i)
		t0 := time.Now()
		err := c.Create(ctx, obj)
		took := time.Since(t0)
		if overloaded(err) {
			// A saturated API server's answer, whichever the arm: its time counts, as a client
			// waited it, and the run is reported as saturated.
			a.timedOut.Add(1)
			return took
		}
		if err != nil {
			b.Errorf("create %s in %s: %v", tgt.kind, a.ns, err)
			return 0
		}
		ours, floored := tgt.ours(obj), obj.GetAnnotations()[floorAnnotation] != ""
		switch {
		case ours && a.name != "with" || floored && a.name != "onepatch":
			b.Errorf("%s in the %s namespace %s: ours %v, floor annotation %v", tgt.kind, a.name, a.ns, ours, floored)
		case ours != (a.name == "with") || floored != (a.name == "onepatch"):
			a.unpatched.Add(1)
		}
		return took
	}
	// Warm every path: connections, the webhook clients, caches.
	for i := range 5 {
		for n, a := range arms {
			create(a, 1_000_000+n+len(arms)*i)
		}
	}

	// Each round of four creates visits every arm, in the order of a row of a balanced Latin
	// square: over four rounds each arm takes every position once and follows every other arm
	// once, so that none benefits from another's warm-up or load.
	order := [4][4]int{{0, 1, 3, 2}, {1, 2, 0, 3}, {2, 3, 1, 0}, {3, 0, 2, 1}}
	interval := time.Duration(float64(time.Second) / tgt.rate)
	serverSum, serverCount := serverLatency(b, tgt.path)
	callsBefore := apiServerCallLatency(b, env)
	failedOpenBefore := webhookFailedOpen(b, env)
	cpu0 := cpuTimes(b)
	b.ResetTimer()
	start := time.Now()
	var late time.Duration // how far behind schedule the pacer fell at worst
	var inFlight atomic.Int64
	var peak int64 // creates in flight at once, at most
	var wg sync.WaitGroup
	for i := range len(arms) * b.N {
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		late = max(late, time.Since(at))
		a, round := arms[order[(i/len(arms))%len(order)][i%len(arms)]], i/len(arms)
		n := inFlight.Add(1)
		peak = max(peak, n)
		wg.Go(func() {
			defer inFlight.Add(-1)
			a.lat[round] = create(a, i)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu1 := cpuTimes(b)
	failedOpen := webhookFailedOpen(b, env)
	for _, a := range arms {
		// A create without its arm's patch is the overload's doing only as far as the API server
		// counted calls to that webhook that failed open; beyond that the webhook is at fault.
		if n, open := a.unpatched.Load(), failedOpen[a.hook]-failedOpenBefore[a.hook]; n > int64(open) {
			b.Errorf("%d %ss in the %s namespace %s came back without their webhook's patch, and only %.0f calls to %s failed open",
				n, tgt.kind, a.name, a.ns, open, a.hook)
		} else {
			a.timedOut.Add(n)
		}
	}
	if b.Failed() {
		return
	}

	ms := func(sec float64) float64 { return sec * 1000 }
	// Before the latencies are sorted below: the rounds are cut in the order of the creates.
	inOrder := map[string][]time.Duration{}
	for _, a := range arms {
		inOrder[a.name] = a.lat
	}
	rounds := roundRatios(inOrder["with"], inOrder["onepatch"], *createRounds)
	p50, p99, hooks := map[string]time.Duration{}, map[string]time.Duration{}, map[string]string{}
	for _, a := range arms {
		slices.Sort(a.lat)
		p50[a.name], p99[a.name], hooks[a.name] = quantile(a.lat, 0.50), quantile(a.lat, 0.99), a.hook
		b.ReportMetric(ms(p50[a.name].Seconds()), "p50-ms-"+a.name)
		b.ReportMetric(ms(p99[a.name].Seconds()), "p99-ms-"+a.name)
	}
	for _, name := range []string{"with", "onepatch", "noop"} {
		b.ReportMetric(float64(p99[name])/float64(p99["without"]), "p99-ratio-"+name)
	}
	ratio := float64(p99["with"]) / float64(p99["onepatch"])
	b.ReportMetric(ratio, "p99-over-onepatch")
	b.ReportMetric(rounds.median, "p99-over-onepatch-median")
	b.ReportMetric(busy(cpu0, cpu1), "cpu-busy-%")
	if b.N < 100 {
		return // the framework's first, one-iteration run: too few for a p99
	}
	achieved := float64(len(arms)*b.N) / elapsed.Seconds()
	b.Logf("%s creates at %.0f/s (achieved %.1f/s, pacer at most %v late, at most %d in flight; machine %.0f%% busy, load %s), %d per arm:",
		tgt.kind, tgt.rate, achieved, late.Round(time.Millisecond), peak, busy(cpu0, cpu1), loadAvg(), b.N)
	// The webhook calls as the API server timed them (request encoding, the HTTPS round trip, the
	// patch applied), beside the client's figure of the whole create.
	calls := apiServerCallLatency(b, env)
	var timedOut int64
	for _, a := range arms {
		line := fmt.Sprintf("  %-8s client p50 %6.2f ms  p99 %6.2f ms  p99/without %.2f  overloaded %d", a.name,
			ms(p50[a.name].Seconds()), ms(p99[a.name].Seconds()), float64(p99[a.name])/float64(p99["without"]), a.timedOut.Load())
		timedOut += a.timedOut.Load()
		if a.hook != "" {
			d := calls[a.hook].minus(callsBefore[a.hook])
			if d.count > 0 {
				b.ReportMetric(ms(d.sum/d.count), "call-mean-ms-"+a.name)
				line += fmt.Sprintf("  |  API server's webhook call (%s): %.0f calls, mean %.2f ms, p99 %s",
					a.hook, d.count, ms(d.sum/d.count), d.quantileString(0.99))
			}
		}
		b.Log(line)
	}
	if sum, count := serverLatency(b, tgt.path); count > serverCount {
		b.ReportMetric(ms((sum-serverSum)/float64(count-serverCount)), "server-mean-ms")
		b.Logf("  our handler, as controller-runtime timed it: mean %.3f ms", ms((sum-serverSum)/float64(count-serverCount)))
	}
	// The mean webhook call as the API server timed it is the steadier figure (no queueing of the
	// rest of the create in it): printed beside the p99 target, not instead of it.
	callMean := func(name string) float64 { return calls[hooks[name]].minus(callsBefore[hooks[name]]).mean() }
	callRatio := callMean("with") / callMean("onepatch")
	verdict := "PASS"
	switch {
	case timedOut > 0:
		verdict = fmt.Sprintf("INCONCLUSIVE: saturated, %d creates failed, or their webhook call failed open, for overload", timedOut)
	case p50["without"] > saturatedP50:
		verdict = fmt.Sprintf("INCONCLUSIVE: saturated, a create without any webhook took %v at p50 (over %v): the p99s measure queueing",
			p50["without"].Round(time.Millisecond), saturatedP50)
	case rounds.median > onePatchRatioTarget:
		verdict = "MISS"
	}
	b.Logf("  %s at %.0f/s: our p99 / one-patch p99, median of %d rounds = %.2f (spread %.2f–%.2f; whole run %.2f) (target <= %.2f) %s; API server's mean call, ours / one-patch = %.2f",
		tgt.kind, tgt.rate, len(rounds.ratios), rounds.median, rounds.min, rounds.max, ratio, onePatchRatioTarget, verdict, callRatio)
}

// ratioRounds are the p99 ratios of the rounds of a run, with their median and spread.
type ratioRounds struct {
	ratios           []float64
	median, min, max float64
}

// roundRatios cuts the creates of two arms (in the order they were made, interleaved with each
// other's) into n rounds of consecutive creates and returns the p99 ratio of ours over floor in
// each: one round's p99 can be decided by a single stall of the machine, the median of n by no
// fewer than n/2+1 of them, so the verdict stops flipping between runs of the same code.
func roundRatios(ours, floor []time.Duration, n int) ratioRounds {
	n = max(1, min(n, len(ours), len(floor)))
	var r ratioRounds
	for i := range n {
		o := slices.Clone(ours[i*len(ours)/n : (i+1)*len(ours)/n])
		f := slices.Clone(floor[i*len(floor)/n : (i+1)*len(floor)/n])
		slices.Sort(o)
		slices.Sort(f)
		r.ratios = append(r.ratios, float64(quantile(o, 0.99))/float64(quantile(f, 0.99)))
	}
	sorted := slices.Sorted(slices.Values(r.ratios))
	r.min, r.max = sorted[0], sorted[len(sorted)-1]
	r.median = sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		r.median = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	return r
}

// overloaded reports whether a create failed because the machine could not carry the load: the
// API server (or a webhook it called) did not answer in time, or the connection to the API server
// broke (a TLS handshake that timed out, a reset, a stream the server dropped).
func overloaded(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsConnectionReset(err) ||
		apierrors.IsInternalError(err) && strings.Contains(msg, "context deadline exceeded") ||
		strings.Contains(msg, "TLS handshake timeout") || strings.Contains(msg, "INTERNAL_ERROR; received from peer")
}

// isJobHook reports whether w is the configuration's VcJob webhook.
func isJobHook(w *admissionregistrationv1.MutatingWebhook) bool {
	return slices.ContainsFunc(w.Rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return slices.Contains(r.APIGroups, batchv1alpha1.SchemeGroupVersion.Group)
	})
}

// isPodHook reports whether w is the configuration's pod webhook.
func isPodHook(w *admissionregistrationv1.MutatingWebhook) bool {
	return slices.ContainsFunc(w.Rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "pods")
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

// histogram is a latency histogram: the sum (seconds), the count and the cumulative buckets.
type histogram struct {
	sum, count float64
	buckets    map[float64]float64 // upper bound (seconds) → cumulative count
}

// mean is the mean observation, NaN without any.
func (h histogram) mean() float64 { return h.sum / h.count }

// minus is the histogram of what was observed since before.
func (h histogram) minus(before histogram) histogram {
	d := histogram{sum: h.sum - before.sum, count: h.count - before.count, buckets: map[float64]float64{}}
	for le, n := range h.buckets {
		d.buckets[le] = n - before.buckets[le]
	}
	return d
}

// quantileString estimates the q-quantile as Prometheus' histogram_quantile does (linear within
// the bucket it falls in) and says which bucket that is: the API server's buckets are coarse (5 ms,
// 25 ms, 100 ms, ...), so the estimate is only as good as them.
func (h histogram) quantileString(q float64) string {
	bounds := slices.Sorted(maps.Keys(h.buckets))
	rank, lower, below := q*h.count, 0.0, 0.0
	for _, le := range bounds {
		if n := h.buckets[le]; n >= rank {
			if math.IsInf(le, 1) {
				return fmt.Sprintf("> %g ms", lower*1000)
			}
			est := lower + (le-lower)*(rank-below)/max(n-below, 1)
			return fmt.Sprintf("~%.1f ms (in the %g–%g ms bucket)", est*1000, lower*1000, le*1000)
		} else {
			lower, below = le, n
		}
	}
	return "?"
}

// webhookFailedOpen reads how many calls to each webhook failed open so far (the API server's
// apiserver_admission_webhook_fail_open_count), by webhook name.
func webhookFailedOpen(b *testing.B, env *testbed.Env) map[string]float64 {
	b.Helper()
	const name = "apiserver_admission_webhook_fail_open_count"
	byHook := map[string]float64{}
	for _, m := range apiServerMetrics(b, env, name)[name].GetMetric() {
		byHook[metricLabels(m)["name"]] += m.GetCounter().GetValue()
	}
	return byHook
}

// apiServerCallLatency reads the API server's histogram of calls to each mutating webhook on
// CREATE (apiserver_admission_webhook_admission_duration_seconds), by webhook name.
func apiServerCallLatency(b *testing.B, env *testbed.Env) map[string]histogram {
	b.Helper()
	const name = "apiserver_admission_webhook_admission_duration_seconds"
	byHook := map[string]histogram{}
	for _, m := range apiServerMetrics(b, env, name)[name].GetMetric() {
		if l := metricLabels(m); l["operation"] == "CREATE" {
			h := byHook[l["name"]]
			if h.buckets == nil {
				h.buckets = map[float64]float64{}
			}
			h.sum += m.GetHistogram().GetSampleSum()
			h.count += float64(m.GetHistogram().GetSampleCount())
			for _, bk := range m.GetHistogram().GetBucket() {
				h.buckets[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
			}
			h.buckets[math.Inf(1)] = h.count
			byHook[l["name"]] = h
		}
	}
	return byHook
}

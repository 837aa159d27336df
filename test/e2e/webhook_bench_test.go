package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/admission"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/testbed"
)

// Targets (see the issue): handler p99 under 1 ms; creating a VcJob through the API server with
// the webhook at most 1.25 times slower at p99 than without. A missed target is logged, not
// failed: this machine's neighbours make absolute timings noisy.
const (
	whHandlerP99Target = time.Millisecond
	whE2ERatioTarget   = 1.25
)

// whQuantile returns the q-quantile of sorted durations (nearest rank).
func whQuantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

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
		"metadata": map[string]any{"name": "bench-worker-0", "namespace": "ml", "labels": map[string]any{tracking.TrackedLabel: tracking.TrackedValue}},
		"spec":     pod.Spec,
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
			p50, p99 := whQuantile(latencies, 0.50), whQuantile(latencies, 0.99)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "reviews/s")
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			if b.N >= 100 && p99 > whHandlerP99Target {
				b.Logf("p99 %v misses the %v target", p99, whHandlerP99Target)
			}
		})
	}
}

// whServerLatency reads the sum (seconds) and count of controller-runtime's webhook latency
// histogram for path from the in-process registry.
func whServerLatency(b *testing.B, path string) (float64, uint64) {
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

// BenchmarkCreateVcJob creates VcJobs through the real API server, alternating between a namespace
// the webhook is registered for and one it is not, so that both see the same API server, etcd
// and Volcano load in the same run. Reports p50/p99 of each and the p99 ratio. Each iteration is
// one create of each; use e.g. -benchtime=300x for stable quantiles, and run it alone
// (-run='^$'): another suite's cluster-wide webhook registration would blur the baseline, so it
// skips if one is present.
func BenchmarkCreateVcJob(b *testing.B) {
	admission.TuneGC() // the webhook server runs in this process, as the webhook binary would
	env := testbed.Cluster(b)
	ctx := context.Background()
	var mwcs admissionregistrationv1.MutatingWebhookConfigurationList
	if err := env.Client.List(ctx, &mwcs); err != nil {
		b.Fatal(err)
	}
	for _, cfg := range mwcs.Items {
		for _, w := range cfg.Webhooks {
			for _, r := range w.Rules {
				if slices.Contains(r.APIGroups, batchv1alpha1.SchemeGroupVersion.Group) || slices.Contains(r.APIGroups, "*") {
					b.Skipf("MutatingWebhookConfiguration %s already handles VcJobs, so there is no baseline; run this benchmark alone (-run='^$')", cfg.Name)
				}
			}
		}
	}
	with, without := env.Namespace(b), env.Namespace(b)
	b.Cleanup(func() { whRelease(b, env, with); whRelease(b, env, without) })
	whStart(b, env).register(b, env, []string{with}, nil)
	c := whUnthrottled(b, env, env.Config)

	create := func(ns string, i int) time.Duration {
		job := testbed.Job(ns, fmt.Sprintf("bench-%d", i)).Task("main", 1, []string{"main"}, whBigRequests).Obj()
		t0 := time.Now()
		if err := c.Create(ctx, job); err != nil {
			b.Fatalf("create VcJob in %s: %v", ns, err)
		}
		took := time.Since(t0)
		if tracked := slices.Contains(job.Finalizers, tracking.JobFinalizer); tracked != (ns == with) {
			b.Fatalf("VcJob in %s has the finalizer: %v", ns, tracked)
		}
		return took
	}
	// Warm both paths: connections, the webhook client, caches.
	for i := range 5 {
		create(with, -1-2*i)
		create(without, -2-2*i)
	}

	latWith, latWithout := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	serverSum, serverCount := whServerLatency(b, admission.JobPath)
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first so that neither benefits from the other's warm-up.
		if i%2 == 0 {
			latWith = append(latWith, create(with, i))
			latWithout = append(latWithout, create(without, i))
		} else {
			latWithout = append(latWithout, create(without, i))
			latWith = append(latWith, create(with, i))
		}
	}
	b.StopTimer()
	// The time our server spent per review (controller-runtime's webhook latency histogram): the
	// rest of the difference is the API server's call and the hops between processes.
	if sum, count := whServerLatency(b, admission.JobPath); count > serverCount {
		b.ReportMetric((sum-serverSum)/float64(count-serverCount)*1000, "server-mean-ms")
	}
	slices.Sort(latWith)
	slices.Sort(latWithout)
	p99With, p99Without := whQuantile(latWith, 0.99), whQuantile(latWithout, 0.99)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(whQuantile(latWithout, 0.50)), "p50-ms-without")
	b.ReportMetric(ms(whQuantile(latWith, 0.50)), "p50-ms-with")
	b.ReportMetric(ms(p99Without), "p99-ms-without")
	b.ReportMetric(ms(p99With), "p99-ms-with")
	ratio := float64(p99With) / float64(p99Without)
	b.ReportMetric(ratio, "p99-ratio")
	if b.N >= 100 && ratio > whE2ERatioTarget {
		b.Logf("p99 ratio %.2f misses the %.2f target (with %v, without %v)", ratio, whE2ERatioTarget, p99With, p99Without)
	}
}

// Package admission is jobvault's mutating admission webhook. It stamps the contract of
// pkg/tracking on new VcJobs (job finalizer, tracking label, submitter annotations) and on the
// pods Volcano creates for any VcJob (pod finalizer).
//
// Objects are mutated as untyped JSON and only under metadata, and each change is recorded as the
// JSON patch operation the response carries (object.go). A typed round trip through
// volcano.sh/apis would drop fields newer than our apis version and renormalise quantities, and
// Volcano's own webhook may run before or after us (reinvocationPolicy IfNeeded), so every
// mutation here is idempotent.
package admission

import (
	"crypto/tls"
	"errors"
	"os"
	"runtime/debug"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const (
	// JobPath is where the VcJob mutator is served. config/webhook points the vcjobs webhook here.
	JobPath = "/mutate-batch-volcano-sh-v1alpha1-job"
	// PodPath is where the Pod mutator is served. config/webhook points the pods webhook here.
	PodPath = "/mutate-v1-pod"
)

// GCPercent is the garbage-collection target the webhook runs with (unless GOGC is set). Its live
// heap is a few MiB, so collecting four times less often than Go's default costs little memory and
// trims the admission latency tail, which garbage-collection pauses make on a small node (the
// docs/performance.md has the figures and the benchmark that measures them).
const GCPercent = 400

// TuneGC applies GCPercent unless the operator chose GOGC.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
}

// ServerOptions configures the webhook server: TLS from certDir (reloaded when the files change),
// on host:port. Unless enableHTTP2, the server offers only HTTP/1.1, as kubebuilder scaffolds: the
// API server keeps a pool of HTTP/1.1 connections to a webhook, so HTTP/2 buys nothing here, and
// it brings the stream-reset attacks (CVE-2023-44487, CVE-2023-39325) and more goroutine handoffs
// per request, which make each round trip slower.
func ServerOptions(host string, port int, certDir string, enableHTTP2 bool) webhook.Options {
	o := webhook.Options{Host: host, Port: port, CertDir: certDir}
	if !enableHTTP2 {
		o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return o
}

// SetupWithManager serves the VcJob and Pod mutators on the manager's webhook server, with the
// real clock.
func SetupWithManager(mgr ctrl.Manager) error {
	if mgr == nil {
		return errors.New("setup admission webhooks: mgr is nil")
	}
	return Register(mgr.GetWebhookServer(), clock.RealClock{})
}

// Register serves the VcJob mutator at JobPath and the Pod mutator at PodPath on srv. clk stamps
// the admission time.
func Register(srv webhook.Server, clk clock.PassiveClock) error {
	if srv == nil {
		return errors.New("register admission webhooks: srv is nil")
	}
	jobs, err := NewJobMutator(clk)
	if err != nil {
		return err
	}
	srv.Register(JobPath, &cradmission.Webhook{Handler: jobs})
	srv.Register(PodPath, &cradmission.Webhook{Handler: NewPodMutator()})
	return nil
}

package admission

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of an admission, the values of the result label.
const (
	resultMutated   = "mutated"   // allowed with a patch
	resultUnchanged = "unchanged" // allowed as is
	resultDenied    = "denied"    // bad request: malformed, wrong kind or resource
)

var (
	admissionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobvault_webhook_admissions_total",
		Help: "Admission requests answered by the jobvault webhook, by kind (VcJob, Pod) and result (mutated, unchanged, denied).",
	}, []string{"kind", "result"})
	admissionDurationSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "jobvault_webhook_admission_duration_seconds",
		Help:    "Time the jobvault webhook took to decide an admission request once decoded, by kind (VcJob, Pod).",
		Buckets: []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1},
	}, []string{"kind"})
)

func init() {
	metrics.Registry.MustRegister(admissionsTotal, admissionDurationSeconds)
	// Start every series at zero so that rate() and absent-alerts work before the first event.
	for _, kind := range []string{jobTarget.name, podTarget.name} {
		for _, result := range []string{resultMutated, resultUnchanged, resultDenied} {
			admissionsTotal.WithLabelValues(kind, result)
		}
		admissionDurationSeconds.WithLabelValues(kind)
	}
}

func observe(kind, result string, took time.Duration) {
	admissionsTotal.WithLabelValues(kind, result).Inc()
	admissionDurationSeconds.WithLabelValues(kind).Observe(took.Seconds())
}

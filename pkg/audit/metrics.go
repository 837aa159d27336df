package audit

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// digestsSignedTotal counts the signer's attempts by result (signed, error).
var digestsSignedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "jobvault_archiver_audit_digests_signed_total", Help: "Signed digests of the audit chain head, by result (signed, error).",
}, []string{"result"})

func init() {
	metrics.Registry.MustRegister(digestsSignedTotal)
}

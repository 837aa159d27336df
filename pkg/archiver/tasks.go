package archiver

import (
	"context"

	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/metrics"
	"github.com/jobvault/jobvault/pkg/periodic"
)

// SignerTask is the periodic task of the audit chain's signer (audit.Signer.Pass), each pass
// counted in jobvault_archiver_audit_digests_signed_total by result.
func SignerTask(s *audit.Signer) periodic.Task {
	return func(ctx context.Context) error {
		err := s.Pass(ctx)
		result := "signed"
		if err != nil {
			result = "error"
		}
		metrics.AuditDigestsSignedTotal.WithLabelValues(result).Inc()
		return err
	}
}

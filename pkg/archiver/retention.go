package archiver

import "time"

// retainUntil is the retain-until date of the final objects (log objects, job.json,
// manifest.json) of a job or pod finalized at finalizedAt: finalizedAt + Retention, or zero (no
// lock, no retention) when Retention is zero. The store locks them until then when it has a lock
// mode (--store-lock-mode). Capture segments are never retained: they are deleted once composed.
//
// The one place the date is derived, so that per-namespace overrides and legal holds can be added
// here.
func (o Options) retainUntil(finalizedAt time.Time) time.Time {
	if o.Retention <= 0 {
		return time.Time{}
	}
	return finalizedAt.UTC().Add(o.Retention)
}

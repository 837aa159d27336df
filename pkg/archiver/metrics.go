package archiver

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics on controller-runtime's registry, labelled only by bounded values. Every name is
// jobvault_archiver_<noun>_<verb or unit>, and each Go variable is named after its series. Queue
// depth, work duration and retries per controller come from controller-runtime's own workqueue
// metrics.
var (
	jobsArchivedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_archiver_jobs_archived_total", Help: "VcJobs whose archive was completed and finalizer released.",
	})
	podsArchivedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_archiver_pods_archived_total", Help: "Pods whose logs were archived and finalizer released.",
	})
	logBytesArchivedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_archiver_log_bytes_archived_total", Help: "Uncompressed bytes of container logs stored.",
	})
	transitionsRecordedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_archiver_transitions_recorded_total", Help: "Job phase transitions newly recorded.",
	})
	archiveFailuresTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobvault_archiver_archive_failures_total", Help: "Failed archive attempts by reason (store, database, log-unreadable).",
	}, []string{"reason"})
	releasesIncompleteTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobvault_archiver_releases_incomplete_total", Help: "Finalizers released without a complete archive, by kind (job, pod) and first cause (operator, pods, unavailable, gap, untracked).",
	}, []string{"kind", "cause"})
	logGapsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobvault_archiver_log_gaps_total", Help: "Container logs recorded with missing output (a gap) or unavailable, by reason.",
	}, []string{"reason"})
	captureLagSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "jobvault_archiver_capture_lag_seconds", Help: "How far behind its container each followed log line arrives (the node's timestamp to now). Past the time a container takes to fill a rotated file, the node's reader skips files unseen.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	})
	followReopensTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobvault_archiver_follow_reopens_total", Help: "Follow streams of running containers reopened, by why they ended: ended (closed by the node), broken, open (could not be opened), store (a segment could not be recorded), status.",
	}, []string{"cause"})
	jobsBackstoppedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_archiver_jobs_backstopped_total", Help: "VcJobs the webhook missed, given their finalizer by the archiver.",
	})
	resweepEnqueuedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobvault_archiver_resweep_enqueued_total", Help: "Jobs and pods the periodic resweep found behind their record and enqueued, by kind (job, pod). Steady growth means events are being missed.",
	}, []string{"kind"})
	releaseLatencySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "jobvault_archiver_release_latency_seconds", Help: "Time from a job's terminal phase to the release of its finalizer.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	})
)

func init() {
	metrics.Registry.MustRegister(jobsArchivedTotal, podsArchivedTotal, logBytesArchivedTotal, transitionsRecordedTotal,
		archiveFailuresTotal, releasesIncompleteTotal, logGapsTotal, captureLagSeconds, followReopensTotal, jobsBackstoppedTotal, releaseLatencySeconds,
		resweepEnqueuedTotal)
}

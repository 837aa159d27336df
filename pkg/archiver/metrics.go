package archiver

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics on controller-runtime's registry, labelled only by bounded values. Queue depth, work
// duration and retries per controller come from controller-runtime's own workqueue metrics.
var (
	jobsArchived = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_archived_jobs_total", Help: "VcJobs whose archive was completed and finalizer released.",
	})
	podsArchived = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_archived_pods_total", Help: "Pods whose logs were archived and finalizer released.",
	})
	bytesArchived = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_archived_log_bytes_total", Help: "Uncompressed bytes of container logs stored.",
	})
	transitionsRecorded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_recorded_transitions_total", Help: "Job phase transitions newly recorded.",
	})
	failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobvault_archive_failures_total", Help: "Failed archive attempts by reason (store, database, log-unreadable).",
	}, []string{"reason"})
	releases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobvault_incomplete_releases_total", Help: "Finalizers released without a complete archive, by kind (job, pod) and cause (deadline, operator).",
	}, []string{"kind", "cause"})
	backstops = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "jobvault_backstopped_jobs_total", Help: "VcJobs the webhook missed, given their finalizer by the archiver.",
	})
	releaseLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "jobvault_release_latency_seconds", Help: "Time from a job's terminal phase to the release of its finalizer.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	})
)

func init() {
	metrics.Registry.MustRegister(jobsArchived, podsArchived, bytesArchived, transitionsRecorded, failures, releases, backstops, releaseLatency)
}

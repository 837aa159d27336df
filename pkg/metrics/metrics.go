// Package metrics defines every Prometheus series the archiver exports, and registers them in one
// place (Register). Every name is jobvault_archiver_<noun>_<verb or unit>, each Go variable is
// named after its series, and labels take only bounded values. The reference,
// docs/reference/metrics.md, is generated from the same definitions (Definitions, by make docs). Queue depth,
// work duration and retries per controller come from controller-runtime's own workqueue metrics.
package metrics

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/jobvault/jobvault/pkg/record"
)

// Registry is controller-runtime's registry, which the manager's /metrics serves.
var Registry = ctrlmetrics.Registry

// Values of the kind label of the held-finalizer gauges, of releases_incomplete_total and of
// resweep_enqueued_total.
const (
	KindJob = "job"
	KindPod = "pod"
)

// Series types, as the reference names them.
const (
	typeCounter   = "counter"
	typeGauge     = "gauge"
	typeHistogram = "histogram"
)

// Definition describes one metric family for the reference.
type Definition struct {
	Name, Help, Type string
	// Labels are the family's label names, each with the values it takes.
	Labels []Label
}

// Label is a label of a family and every value it takes.
type Label struct {
	Name   string
	Values []string
}

var (
	definitions []Definition
	// collectors are the event metrics, registered as they are; the scrape-time gauges are
	// collectors of their own, given to Register.
	collectors []prometheus.Collector
	// zeroes create, at Register, the series that must exist before their first event.
	zeroes []func()
)

func define(c prometheus.Collector, name, help, typ string, labels []Label) {
	definitions = append(definitions, Definition{Name: name, Help: help, Type: typ, Labels: labels})
	if c != nil {
		collectors = append(collectors, c)
	}
}

func labelNames(labels []Label) []string {
	names := make([]string, len(labels))
	for i, l := range labels {
		names[i] = l.Name
	}
	return names
}

func newCounter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	define(c, name, help, typeCounter, nil)
	return c
}

func newCounterVec(name, help string, labels ...Label) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labelNames(labels))
	define(c, name, help, typeCounter, labels)
	return c
}

// newZeroedCounterVec is newCounterVec of one label whose every value exists from the start.
func newZeroedCounterVec(name, help string, label Label) *prometheus.CounterVec {
	c := newCounterVec(name, help, label)
	zeroes = append(zeroes, func() {
		for _, v := range label.Values {
			c.WithLabelValues(v)
		}
	})
	return c
}

func newHistogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	define(h, name, help, typeHistogram, nil)
	return h
}

func newHistogramVec(name, help string, buckets []float64, labels ...Label) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labelNames(labels))
	define(h, name, help, typeHistogram, labels)
	return h
}

// newGaugeDesc defines a gauge computed when Prometheus scrapes, by a collector given to Register.
func newGaugeDesc(name, help string, labels ...Label) *prometheus.Desc {
	define(nil, name, help, typeGauge, labels)
	return prometheus.NewDesc(name, help, labelNames(labels), nil)
}

var (
	kinds      = Label{"kind", []string{KindJob, KindPod}}
	gapReasons = Label{"reason", []string{string(record.GapRotated), string(record.GapCollected), string(record.GapNodeLost),
		string(record.GapUnreadable), string(record.GapRestarted), string(record.GapMaybeRotated), string(record.GapReleased)}}
	// incompleteCauses are the first causes of a release without a complete archive, by kind.
	incompleteCauses = map[string][]string{
		KindJob: {"operator", "pods", "unavailable", "gap"},
		KindPod: {"operator", "unavailable", "gap", "untracked"},
	}
)

// The archiver's event metrics.
var (
	JobsArchivedTotal = newCounter("jobvault_archiver_jobs_archived_total",
		"VcJobs whose archive was completed and finalizer released.")
	PodsArchivedTotal = newCounter("jobvault_archiver_pods_archived_total",
		"Pods whose logs were archived and finalizer released.")
	LogBytesArchivedTotal = newCounter("jobvault_archiver_log_bytes_archived_total",
		"Uncompressed bytes of container logs stored.")
	TransitionsRecordedTotal = newCounter("jobvault_archiver_transitions_recorded_total",
		"Job phase transitions newly recorded.")
	ArchiveFailuresTotal = newZeroedCounterVec("jobvault_archiver_archive_failures_total",
		"Failed archive attempts by reason (store, database, log-unreadable).",
		Label{"reason", []string{"store", "database", "log-unreadable"}})
	ReleasesIncompleteTotal = newCounterVec("jobvault_archiver_releases_incomplete_total",
		"Finalizers released without a complete archive, by kind (job, pod) and first cause (operator, pods, unavailable, gap, untracked).",
		kinds, Label{"cause", []string{"operator", "pods", "unavailable", "gap", "untracked"}})
	LogGapsTotal = newZeroedCounterVec("jobvault_archiver_log_gaps_total",
		"Container logs recorded with missing output (a gap) or unavailable, by reason.", gapReasons)
	CaptureLagSeconds = newHistogram("jobvault_archiver_capture_lag_seconds",
		"How far behind its container each followed log line arrives (the node's timestamp to now). Past the time a container takes to fill a rotated file, the node's reader skips files unseen.",
		[]float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60})
	FollowReopensTotal = newZeroedCounterVec("jobvault_archiver_follow_reopens_total",
		"Follow streams of running containers reopened, by why they ended: ended (closed by the node), broken, open (could not be opened), store (a segment could not be recorded), status.",
		Label{"cause", []string{"ended", "broken", "open", "store", "status"}})
	JobsBackstoppedTotal = newCounter("jobvault_archiver_jobs_backstopped_total",
		"VcJobs the webhook missed, given their finalizer by the archiver.")
	ResweepEnqueuedTotal = newCounterVec("jobvault_archiver_resweep_enqueued_total",
		"Jobs and pods the missed-event sweep (--missed-event-sweep-period) found behind their record and enqueued, by kind (job, pod). Steady growth means events are being missed.",
		kinds)
	ReleaseLatencySeconds = newHistogram("jobvault_archiver_release_latency_seconds",
		"Time from a job's terminal phase to the release of its finalizer.", prometheus.ExponentialBuckets(0.05, 2, 16))
	FinalizeStepSeconds = newHistogramVec("jobvault_archiver_finalize_step_seconds",
		"Time each step of a job's finalization took once its last pod was released: record (its row as it ended), captures (its captures stopped), seal (job.json, the logs' hashes, the chain, the manifest), release (the job's PATCH); and out-of-view (the API server's list of the job's pods outside the archiver's cache), which runs beside record, captures and seal, and which the seal waits for before the chain.",
		prometheus.ExponentialBuckets(0.005, 2, 12), Label{"step", []string{"out-of-view", "record", "captures", "seal", "release"}})
	ChainLockSeconds = newHistogram("jobvault_archiver_chain_lock_seconds",
		"Time each job finalization held the audit chain head locked (finalizations of a cluster are serialized on it).",
		prometheus.ExponentialBuckets(0.0005, 2, 12))
	StatementsPreparedTotal = newCounter("jobvault_archiver_db_statements_prepared_total",
		"Database statements prepared for the archiver's pod and job calls (design record 0013), each once, on a connection of its own outside any transaction: Postgres counts each as a transaction.")
	SegmentsSweptTotal = newCounter("jobvault_archiver_segments_swept_total",
		"Segment objects of finished pods left in the store (stored but never recorded, or never deleted) and deleted when their job was finalized.")
	RunsClaimedTotal = newZeroedCounterVec("jobvault_archiver_runs_claimed_total",
		"Container runs given their capture, by owner: agent (the node agent, from the files) or api (pods/log, no healthy agent on the node).",
		Label{"owner", []string{record.CapturedByAgent, record.CapturedByAPI}})
	RunsTakenOverTotal = newZeroedCounterVec("jobvault_archiver_runs_taken_over_total",
		"Container runs taken over from their node agent by the API capture, by reason: silent (no heartbeat), released (the agent gave the run up), deadline (not complete within the log deadline).",
		Label{"reason", []string{"silent", "released", "deadline"}})
	PrunedJobsTotal = newCounterVec("jobvault_archiver_pruned_jobs_total",
		"Finalized jobs the retention pruner deleted (pruned) or tried to and could not (error: retried at the next period).",
		Label{"result", []string{"pruned", "error"}})
	AuditDigestsSignedTotal = newCounterVec("jobvault_archiver_audit_digests_signed_total",
		"Signed digests of the audit chain head, by result (signed, error).",
		Label{"result", []string{"signed", "error"}})
)

// The archiver's state metrics: gauges computed when Prometheus scrapes, by the collectors given
// to Register.
var (
	FinalizersHeld = newGaugeDesc("jobvault_archiver_finalizers_held",
		"Objects due for release (a job terminal or being deleted; a pod ended, or being deleted past its grace period) that still hold jobvault's finalizer, by kind (job, pod).",
		kinds)
	FinalizerHeldOldestSeconds = newGaugeDesc("jobvault_archiver_finalizer_held_oldest_seconds",
		"How long the oldest object due for release has held jobvault's finalizer since it became due, by kind (job, pod); 0 when none waits.",
		kinds)
	BackendUp = newGaugeDesc("jobvault_archiver_backend_up",
		"Whether the backend (database, store) answered the archiver's last ping (every 10 s, the same that /readyz reports): 1 yes, 0 no.",
		Label{"backend", []string{"database", "store"}})
)

// Register registers every series of the archiver on reg: the event metrics, and the collectors
// of the state metrics (which collect FinalizersHeld, FinalizerHeldOldestSeconds and BackendUp).
// The event counters whose alerts fire on their first increase get every series at zero first:
// increase() over a series that first appears at 1 is 0.
func Register(reg prometheus.Registerer, state ...prometheus.Collector) error {
	for _, c := range append(append([]prometheus.Collector{}, collectors...), state...) {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register the archiver's metrics: %w", err)
		}
	}
	for _, zero := range zeroes {
		zero()
	}
	for kind, causes := range incompleteCauses {
		for _, cause := range causes {
			ReleasesIncompleteTotal.WithLabelValues(kind, cause)
		}
	}
	return nil
}

// Definitions returns the definition of every series the archiver exports, by name: what
// docs/reference/metrics.md lists (make docs).
func Definitions() []Definition {
	out := slices.Clone(definitions)
	slices.SortFunc(out, func(a, b Definition) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

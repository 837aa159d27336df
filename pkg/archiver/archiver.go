// Package archiver holds jobvault's controllers: the job reconciler records every VcJob and its
// phase transitions and finalizes its archive; the pod reconciler streams the logs of every pod
// of a tracked job into object storage before it releases the pod's finalizer.
package archiver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/retention"
	"github.com/jobvault/jobvault/pkg/shard"
)

// Records is what the archiver needs of the database (implemented by *db.DB). Every method is an
// idempotent upsert or a read.
type Records interface {
	UpsertJob(ctx context.Context, j record.Job) error
	// RecordJob is UpsertJob (unless the row is nil) and RecordTransitions in one transaction.
	RecordJob(ctx context.Context, row *record.Job, jobUID string, ts []record.Transition) (int, error)
	RecordTransitions(ctx context.Context, jobUID string, ts []record.Transition) (int, error)
	UpsertPod(ctx context.Context, p record.Pod) error
	UpsertPods(ctx context.Context, pods []record.Pod) error
	PutLogObject(ctx context.Context, l record.LogObject) error
	// StartRuns and RecordRunLog are runs' captures' start and a run's log's record, each one
	// transaction (db.StartRuns, db.RecordRunLog).
	StartRuns(ctx context.Context, runs []db.RunToStart, healthyWithin time.Duration) ([]db.RunStart, error)
	RecordRunLog(ctx context.Context, l record.LogObject, sources []record.SourceRange, pod *db.PodArchive) error
	// JobForSeal reads what a job's seal reads of its record in one transaction (sealRecords).
	JobForSeal(ctx context.Context, uid string) (db.SealRead, error)
	PodLogObjects(ctx context.Context, podUID string) ([]record.LogObject, error)
	LogObjects(ctx context.Context, jobUID string) ([]record.LogObject, error)
	MarkPodArchived(ctx context.Context, podUID string, at time.Time, releaseReason string) error
	MarkJobArchived(ctx context.Context, jobUID, location string, at time.Time, releaseReason string) error
	Job(ctx context.Context, uid string) (record.Job, error)
	Pod(ctx context.Context, uid string) (record.Pod, error)
	Pods(ctx context.Context, jobUID string) ([]record.Pod, error)
	PodsByUID(ctx context.Context, uids []string) ([]record.Pod, error)
	Gaps(ctx context.Context, jobUID string) ([]record.Gap, error)
	// The audit chain (see audit.Sealer).
	audit.SealerRecords
	capture.Records
	RunOwners
}

// KubeLogs is the capture.Source of a real cluster: pods/log with per-line timestamps.
type KubeLogs struct {
	Clientset kubernetes.Interface
	// OpenTimeout bounds the wait for the stream's first bytes (headers): a lost node's kubelet
	// must not hold a capture; the stream itself is unbounded.
	OpenTimeout time.Duration
}

// Open streams the container's log with timestamps, from opts.Since.
func (k KubeLogs) Open(ctx context.Context, ref capture.Ref, opts capture.OpenOptions) (io.ReadCloser, error) {
	o := &corev1.PodLogOptions{Container: ref.Container, Follow: opts.Follow, Previous: opts.Previous, Timestamps: true}
	if !opts.Since.IsZero() {
		o.SinceTime = &metav1.Time{Time: opts.Since}
	}
	ctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(cmp.Or(k.OpenTimeout, DefaultOptions().LogOpenTimeout), cancel)
	rc, err := k.Clientset.CoreV1().Pods(ref.Namespace).GetLogs(ref.Pod, o).Stream(ctx)
	if !timer.Stop() || err != nil {
		cancel()
		if err == nil {
			rc.Close()
			err = context.DeadlineExceeded
		}
		return nil, err
	}
	return cancelOnClose{rc, cancel}, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Options tune the archiver; see the archiver's flags for their meaning and defaults.
type Options struct {
	// Cluster names this cluster in the records (several clusters may share one database).
	Cluster string
	// LogDeadline is how long a log that cannot be read is retried, counted from when the
	// container ended or the pod began deletion, before it is recorded as unavailable.
	LogDeadline time.Duration
	// LogOpenTimeout bounds the opening of a container's log stream.
	LogOpenTimeout time.Duration
	// TerminationMargin is how long past the end of a deleted pod's grace period its containers
	// may still show running before their logs are read as they are (the node is probably gone).
	TerminationMargin time.Duration
	// NodeLostAfter is how long a node may not be Ready before the pods being deleted on it are
	// released at once (see PodReconciler.nodeLost).
	NodeLostAfter time.Duration
	// MaxStreams bounds the container logs captured at once; the others wait for a slot.
	MaxStreams int
	// Capture tunes each capture's segments.
	Capture capture.Config
	// CaptureMemory bounds the segments of all captures together, in bytes (capture.Budget); 0
	// leaves them unbounded (each capture holds up to one segment).
	CaptureMemory int64
	// PodWorkers and JobWorkers are the reconcilers' parallelism (PodWorkers bounds concurrent uploads).
	PodWorkers, JobWorkers int
	// Namespaces, when not empty, are the only ones archived (the cache watches only them).
	Namespaces []string
	// UntrackedPodSweepPeriod is how often pods holding the pod finalizer outside the archiver's
	// view (untracked) are looked for, from the API server, and let go (see
	// PodReconciler.sweepOnce).
	UntrackedPodSweepPeriod time.Duration
	// MissedEventSweepPeriod is how often tracked jobs and pods whose record is behind the
	// archiver's cache (an event was missed) are looked for and enqueued (see resweep).
	MissedEventSweepPeriod time.Duration
	// ExcludeNamespaces are never tracked, neither their VcJobs nor their pods (the webhook's
	// namespaceSelector excludes the same).
	ExcludeNamespaces []string
	// Layout names the archive's objects.
	Layout archive.Layout
	// Redact replaces every string of a job outside the allow-list of fields audits need by its
	// sha256 marker before the job is recorded (see redact.Job).
	Redact bool
	// Retention is how long final objects are kept from their job's or pod's finalization (see
	// retention.Until); zero keeps them without a retain-until date.
	Retention time.Duration
	// Shard is this replica's share of the jobs (and so of their pods): the others are left to the
	// replicas of the other shards. The zero value and a Total of 1 archive everything.
	Shard shard.Shard
}

// excluded reports whether jobvault never tracks the VcJobs, and so the pods, of namespace ns.
func (o Options) excluded(ns string) bool { return slices.Contains(o.ExcludeNamespaces, ns) }

// DefaultOptions are the defaults of the archiver's flags.
func DefaultOptions() Options {
	return Options{LogDeadline: 24 * time.Hour, LogOpenTimeout: 30 * time.Second, TerminationMargin: 30 * time.Second,
		NodeLostAfter: 5 * time.Minute, UntrackedPodSweepPeriod: 10 * time.Minute, MissedEventSweepPeriod: 2 * time.Minute, MaxStreams: 2000, Capture: capture.DefaultConfig,
		PodWorkers: 8, JobWorkers: 8, ExcludeNamespaces: []string{"kube-system", "jobvault-system"}, Redact: true,
		Shard: shard.Shard{Index: 0, Total: 1}}
}

// DefaultCaptureMemory is the default of Options.CaptureMemory for a process whose soft memory
// limit (GOMEMLIMIT, math.MaxInt64 if none) is limit: a quarter of it, which leaves the rest to
// the cache (most of the heap), the captures' fixed costs and the garbage collector's slack; or
// 512 MiB without a limit.
func DefaultCaptureMemory(limit int64) int64 {
	if limit <= 0 || limit == math.MaxInt64 {
		return 512 << 20
	}
	return limit / 4
}

// Validate lists every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	if o.LogDeadline <= 0 {
		errs = append(errs, fmt.Errorf("log deadline must be positive, got %s", o.LogDeadline))
	}
	if o.NodeLostAfter <= 0 || o.UntrackedPodSweepPeriod <= 0 || o.MissedEventSweepPeriod <= 0 {
		errs = append(errs, fmt.Errorf("node lost after, untracked pod sweep period and missed event sweep period must be positive, got %s, %s and %s",
			o.NodeLostAfter, o.UntrackedPodSweepPeriod, o.MissedEventSweepPeriod))
	}
	if o.LogOpenTimeout <= 0 || o.TerminationMargin < 0 {
		errs = append(errs, fmt.Errorf("log open timeout must be positive and termination margin not negative, got %s and %s", o.LogOpenTimeout, o.TerminationMargin))
	}
	if o.MaxStreams < 1 || o.Capture.SegmentBytes < 1 || o.Capture.SegmentAge <= 0 {
		errs = append(errs, fmt.Errorf("max streams and segment bytes must be at least 1 and segment age positive, got %d, %d and %s",
			o.MaxStreams, o.Capture.SegmentBytes, o.Capture.SegmentAge))
	}
	if o.CaptureMemory < 0 {
		errs = append(errs, fmt.Errorf("capture memory must not be negative, got %d", o.CaptureMemory))
	}
	if o.Capture.NodeLogMaxSize < 0 {
		errs = append(errs, fmt.Errorf("node log max size must not be negative, got %d", o.Capture.NodeLogMaxSize))
	}
	errs = append(errs, o.Layout.Validate())
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("retention must not be negative, got %s", o.Retention))
	}
	if o.Shard != (shard.Shard{}) {
		errs = append(errs, o.Shard.Validate())
	}
	if o.PodWorkers < 1 || o.JobWorkers < 1 {
		errs = append(errs, fmt.Errorf("pod and job workers must be at least 1, got %d and %d", o.PodWorkers, o.JobWorkers))
	}
	return errors.Join(errs...)
}

// retainUntilIn is the retain-until date of the final objects of a job or pod of namespace
// finalized at finalizedAt: Retention, or the namespace's own (retention.UntilIn).
func (o Options) retainUntilIn(ctx context.Context, c client.Reader, namespace string, finalizedAt time.Time) time.Time {
	return retention.UntilIn(ctx, c, namespace, o.Retention, finalizedAt)
}

// Deps are the archiver's collaborators. Every field is required.
type Deps struct {
	Client client.Client
	// APIReader reads from the API server directly, for what is not cached (nodes).
	APIReader client.Reader
	Records   Records
	Store     objstore.Store
	Logs      capture.Source
	Recorder  kuberecord.EventRecorder
	Clock     clock.Clock

	// owners remembers the owner claims the API server denied (set up by SetupWithManager).
	owners *ownerMisses
}

func (d Deps) validate() error {
	var errs []error
	for name, v := range map[string]any{"Client": d.Client, "APIReader": d.APIReader, "Records": d.Records, "Store": d.Store, "Logs": d.Logs,
		"Recorder": d.Recorder, "Clock": d.Clock} {
		if v == nil {
			errs = append(errs, fmt.Errorf("archiver: %s is nil", name))
		}
	}
	return errors.Join(errs...)
}

// Package archiver holds jobvault's controllers: the job reconciler records every VcJob and its
// phase transitions and finalizes its archive; the pod reconciler streams the logs of every pod
// of a tracked job into object storage before it releases the pod's finalizer.
package archiver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// Records is what the archiver needs of the database (implemented by *db.DB). Every method is an
// idempotent upsert or a read.
type Records interface {
	UpsertJob(ctx context.Context, j record.Job) error
	RecordTransitions(ctx context.Context, jobUID string, ts []record.Transition) (int, error)
	UpsertPod(ctx context.Context, p record.Pod) error
	PutLogObject(ctx context.Context, l record.LogObject) error
	PodLogObjects(ctx context.Context, podUID string) ([]record.LogObject, error)
	LogObjects(ctx context.Context, jobUID string) ([]record.LogObject, error)
	MarkPodArchived(ctx context.Context, podUID string, at time.Time, releaseReason string) error
	MarkJobArchived(ctx context.Context, jobUID, location string, at time.Time, releaseReason string) error
	Job(ctx context.Context, uid string) (record.Job, error)
	Pods(ctx context.Context, jobUID string) ([]record.Pod, error)
}

// LogSource opens the log of a container through the API server's pods/log.
type LogSource interface {
	Open(ctx context.Context, namespace, pod, container string, previous bool) (io.ReadCloser, error)
}

// KubeLogs is the LogSource of a real cluster.
type KubeLogs struct{ Clientset kubernetes.Interface }

// Open streams the container's log (the previous instance's when previous is set).
func (k KubeLogs) Open(ctx context.Context, namespace, pod, container string, previous bool) (io.ReadCloser, error) {
	return k.Clientset.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: previous}).Stream(ctx)
}

// Options tune the archiver; see the archiver's flags for their meaning and defaults.
type Options struct {
	// Cluster names this cluster in the records (several clusters may share one database).
	Cluster string
	// LogDeadline is how long a log that cannot be read is retried, counted from when the
	// container ended or the pod began deletion, before it is recorded as unavailable.
	LogDeadline time.Duration
	// LogTimeout bounds the upload of one container log.
	LogTimeout time.Duration
	// PodWorkers and JobWorkers are the reconcilers' parallelism (PodWorkers bounds concurrent uploads).
	PodWorkers, JobWorkers int
	// ExcludeNamespaces are never tracked (the webhook's namespaceSelector excludes the same).
	ExcludeNamespaces []string
	// Layout names the archive's objects.
	Layout archive.Layout
}

// DefaultOptions are the defaults of the archiver's flags.
func DefaultOptions() Options {
	return Options{LogDeadline: 24 * time.Hour, LogTimeout: 30 * time.Minute,
		PodWorkers: 8, JobWorkers: 4, ExcludeNamespaces: []string{"kube-system", "jobvault-system"}}
}

// Validate lists every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	if o.LogDeadline <= 0 {
		errs = append(errs, fmt.Errorf("log deadline must be positive, got %s", o.LogDeadline))
	}
	if o.LogTimeout <= 0 {
		errs = append(errs, fmt.Errorf("log timeout must be positive, got %s", o.LogTimeout))
	}
	errs = append(errs, o.Layout.Validate())
	if o.PodWorkers < 1 || o.JobWorkers < 1 {
		errs = append(errs, fmt.Errorf("pod and job workers must be at least 1, got %d and %d", o.PodWorkers, o.JobWorkers))
	}
	return errors.Join(errs...)
}

// Deps are the archiver's collaborators. Every field is required.
type Deps struct {
	Client   client.Client
	Records  Records
	Store    objstore.Store
	Logs     LogSource
	Recorder kuberecord.EventRecorder
	Clock    clock.PassiveClock
}

func (d Deps) validate() error {
	var errs []error
	for name, v := range map[string]any{"Client": d.Client, "Records": d.Records, "Store": d.Store, "Logs": d.Logs,
		"Recorder": d.Recorder, "Clock": d.Clock} {
		if v == nil {
			errs = append(errs, fmt.Errorf("archiver: %s is nil", name))
		}
	}
	return errors.Join(errs...)
}

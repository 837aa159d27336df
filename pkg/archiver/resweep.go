package archiver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// resweep is the missed-event sweep: it finds, every MissedEventSweepPeriod, the tracked jobs and
// pods whose record is behind what the archiver's cache shows, and enqueues them, so that a reconcile that never happened (an event
// lost or filtered, a reconcile that ended waiting for an event that never came) is repaired
// within a period:
//   - a pod holding the pod finalizer that is finished (ended, being deleted, released by an
//     operator): it should be released within seconds;
//   - a pod holding it with a container running whose capture does not run;
//   - a job whose current version (UID and resourceVersion) is not the one last recorded;
//   - a tracked job that is finalizable (terminal, being deleted, released) and still holds the
//     job finalizer, or a job the webhook missed (no finalizer, never archived).
//
// It compares the cache, not the API server, with what was recorded: controller-runtime's
// SyncPeriod only replays the cache to the handlers, which our predicates then filter, and a
// list from the API server of 100,000 pods every period would cost the API server more than the
// archiver's whole steady state. A watch event lost below the informer (kubernetes#123072) leaves
// the cache itself stale until the informer lists again (at a restart, or when its watch expires
// too old): then the resweep repairs the rest as soon as the cache catches up.
type resweep struct {
	client   client.Client
	jobs     *JobReconciler
	captures *capture.Manager
	opts     Options
	// jobEvents and podEvents feed the job and pod controllers (WatchesRawSource).
	jobEvents, podEvents chan event.GenericEvent
}

func newResweep(c client.Client, jobs *JobReconciler, captures *capture.Manager, opts Options) *resweep {
	return &resweep{client: c, jobs: jobs, captures: captures, opts: opts,
		jobEvents: make(chan event.GenericEvent, 1024), podEvents: make(chan event.GenericEvent, 1024)}
}

// run is the periodic task (a periodic.Runnable, on the leader) of once.
func (s *resweep) run(ctx context.Context) error {
	jobs, pods, err := s.once(ctx)
	if jobs+pods > 0 {
		ctrl.LoggerFrom(ctx).Info("Enqueued jobs and pods whose record was behind", "jobs", jobs, "pods", pods)
	}
	if err != nil {
		return fmt.Errorf("resweep: %w", err)
	}
	return nil
}

// once resweeps the cache once and reports how many jobs and pods it enqueued.
func (s *resweep) once(ctx context.Context) (jobs, pods int, err error) {
	// The cache's own objects (read only): the resweep looks at every tracked object.
	var jl batchv1alpha1.JobList
	if err := s.client.List(ctx, &jl, client.UnsafeDisableDeepCopy); err != nil {
		return 0, 0, fmt.Errorf("list jobs: %w", err)
	}
	for i := range jl.Items {
		// Another shard's objects are cached as their identity only, and are not ours to repair.
		if j := &jl.Items[i]; s.opts.mine(j) && s.jobBehind(j) {
			if !s.send(ctx, s.jobEvents, j) {
				return jobs, pods, ctx.Err()
			}
			jobs++
		}
	}
	resweepEnqueuedTotal.WithLabelValues("job").Add(float64(jobs))
	var pl corev1.PodList
	if err := s.client.List(ctx, &pl, client.UnsafeDisableDeepCopy); err != nil {
		return jobs, 0, fmt.Errorf("list pods: %w", err)
	}
	for i := range pl.Items {
		if p := &pl.Items[i]; s.opts.mine(p) && s.podBehind(p) {
			if !s.send(ctx, s.podEvents, p) {
				return jobs, pods, ctx.Err()
			}
			pods++
		}
	}
	resweepEnqueuedTotal.WithLabelValues("pod").Add(float64(pods))
	return jobs, pods, nil
}

func (s *resweep) send(ctx context.Context, ch chan<- event.GenericEvent, obj client.Object) bool {
	select {
	case ch <- event.GenericEvent{Object: obj}:
		return true
	case <-ctx.Done():
		return false
	}
}

// jobBehind reports whether the job's record is behind the cached job (see resweep).
func (s *resweep) jobBehind(j *batchv1alpha1.Job) bool {
	if s.opts.excluded(j.Namespace) {
		return false
	}
	if !tracked(j) {
		return j.DeletionTimestamp == nil // the webhook missed it: the reconciler backstops it
	}
	if !s.jobs.recorded.same(client.ObjectKeyFromObject(j), string(j.UID)+"/"+j.ResourceVersion) {
		return true
	}
	return controllerutil.ContainsFinalizer(j, tracking.JobFinalizer) && finalizable(j)
}

// podBehind reports whether the pod holds the pod finalizer and is finished, or runs a container
// whose capture does not run (see resweep).
func (s *resweep) podBehind(p *corev1.Pod) bool {
	if s.opts.excluded(p.Namespace) || !controllerutil.ContainsFinalizer(p, tracking.PodFinalizer) {
		return false
	}
	if podEnded(p) || p.DeletionTimestamp != nil || releaseReason(p) != "" {
		return true
	}
	for _, cs := range statuses(p) {
		ref := capture.Ref{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Container: cs.Name, Run: cs.RestartCount}
		if cs.State.Running != nil && !s.captures.Active(captureKey(ref)) {
			return true
		}
	}
	return false
}

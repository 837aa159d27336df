package archiver

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/metrics"
	"github.com/jobvault/jobvault/pkg/periodic"
)

// rateLimiter retries failed reconciles from half a second up to a minute apart, so an outage of
// the store or database is noticed within a minute of its end.
func rateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](500*time.Millisecond, time.Minute)
}

// SetupWithManager registers the job and pod reconcilers, the pod owner index, the periodic
// tasks, the archiver's metrics and the readiness check of the backends ("backends").
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, deps Deps, opts Options) error {
	if err := deps.validate(); err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	deps.owners = newOwnerMisses(ownerMissesMax)
	opts.Capture.ObserveLag = func(d time.Duration) { captureLagSeconds.Observe(d.Seconds()) }
	opts.Capture.ObserveReopen = func(cause string) { followReopensTotal.WithLabelValues(cause).Inc() }
	if opts.CaptureMemory > 0 {
		opts.Capture.Memory = capture.NewBudget(opts.CaptureMemory)
	}
	backends := newProber(deps.Records, deps.Store)
	if err := metrics.Register(metrics.Registry, heldCollector{deps.Clock}, backends); err != nil {
		return err
	}
	probe, err := periodic.New("backend-prober", probePeriod, backends.probe, deps.Clock, ctrl.Log.WithName("backend-prober"))
	if err != nil {
		return err
	}
	probe.AllReplicas = true
	if err := errors.Join(mgr.Add(probe), mgr.AddReadyzCheck("backends", backends.Check)); err != nil {
		return err
	}
	if err := errors.Join(trackHeld(ctx, mgr.GetCache(), &batchv1alpha1.Job{}, heldJobs, jobDue, opts.excluded),
		trackHeld(ctx, mgr.GetCache(), &corev1.Pod{}, heldPods, podDue, opts.excluded)); err != nil {
		return fmt.Errorf("watch held finalizers: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podOwnerIndex, func(o client.Object) []string {
		if ref, ok := ownerJob(o.(*corev1.Pod)); ok {
			return []string{ref.UID}
		}
		return nil
	}); err != nil {
		return err
	}
	// No GenerationChangedPredicate: VcJob status is a subresource, and phase changes are exactly
	// the updates that matter.
	captures := capture.NewManager(opts.MaxStreams)
	jobs := &JobReconciler{Deps: deps, Options: opts, Captures: captures}
	resweep := newResweep(deps.Client, jobs, captures, opts)
	if err := ctrl.NewControllerManagedBy(mgr).Named("vcjob").
		For(&batchv1alpha1.Job{}, builder.WithPredicates(jobEvents)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &batchv1alpha1.Job{}, handler.OnlyControllerOwner()),
			builder.WithPredicates(podEventsOfJob)).
		WatchesRawSource(source.Channel(resweep.jobEvents, &handler.EnqueueRequestForObject{})).
		WithEventFilter(opts.shardFilter()).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.JobWorkers, RateLimiter: rateLimiter()}).
		Complete(jobs); err != nil {
		return err
	}
	pods := &PodReconciler{Deps: deps, Options: opts, Captures: captures}
	// Two repair loops: the untracked-pod sweep lists the API server for pods held outside the
	// cache; the missed-event sweep compares the cache with the records.
	sweep, err := periodic.New("untracked-pod-sweep", opts.UntrackedPodSweepPeriod, pods.sweep, deps.Clock, ctrl.Log.WithName("untracked-pod-sweep"))
	if err != nil {
		return err
	}
	missed, err := periodic.New("missed-event-sweep", opts.MissedEventSweepPeriod, resweep.run, deps.Clock, ctrl.Log.WithName("missed-event-sweep"))
	if err != nil {
		return err
	}
	// The informers' initial list enqueues every object at start: the first missed-event sweep
	// waits.
	missed.FirstAfterPeriod = true
	if err := errors.Join(mgr.Add(captures), mgr.Add(missed), mgr.Add(sweep)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("pod").
		For(&corev1.Pod{}).
		WithEventFilter(opts.shardFilter()).
		WatchesRawSource(source.Channel(captures.Events(), &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(resweep.podEvents, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.PodWorkers, RateLimiter: rateLimiter()}).
		Complete(pods)
}

package archiver

// The metrics operations alert on (config/monitoring): what the event counters of pkg/metrics
// cannot say. How long objects have been waiting for a release is a state, not an event: a gauge
// computed when Prometheus scrapes. Whether the backends answer is the prober's (probe.go).

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/metrics"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// heldJobs and heldPods are what the held-finalizer gauges report (heldCollector).
var heldJobs, heldPods = newHeld(), newHeld()

// held is the set of objects of one kind that are due for release and still hold the finalizer,
// with the time each became due. It is kept up to date from the informers' events, so that a
// scrape reads a few entries instead of listing 100,000 cached pods.
type held struct {
	mu  sync.Mutex
	due map[types.UID]time.Time
}

func newHeld() *held { return &held{due: map[types.UID]time.Time{}} }

func (h *held) set(uid types.UID, since time.Time, due bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if due {
		h.due[uid] = since
	} else {
		delete(h.due, uid)
	}
}

// stats counts the objects due by now and the age of the oldest. An entry due in the future (a
// pod within its grace period) is not counted yet.
func (h *held) stats(now time.Time) (n int, oldest time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, since := range h.due {
		if age := now.Sub(since); age >= 0 {
			n, oldest = n+1, max(oldest, age)
		}
	}
	return n, oldest
}

// jobDue: a job holding the finalizer is due for release once terminal (since its last phase
// change) or being deleted (since then). Aborted is not terminal: Volcano can resume it.
func jobDue(job *batchv1alpha1.Job) (time.Time, bool) {
	if !controllerutil.ContainsFinalizer(job, tracking.JobFinalizer) {
		return time.Time{}, false
	}
	if job.DeletionTimestamp != nil {
		return job.DeletionTimestamp.Time, true
	}
	if tracking.IsTerminal(job.Status.State.Phase) {
		return job.Status.State.LastTransitionTime.Time, true
	}
	return time.Time{}, false
}

// podDue: a pod holding the finalizer is due for release once it ended (since its last container
// stopped) or is being deleted (since the end of its grace period, its deletionTimestamp).
func podDue(pod *corev1.Pod) (time.Time, bool) {
	if !controllerutil.ContainsFinalizer(pod, tracking.PodFinalizer) {
		return time.Time{}, false
	}
	var since time.Time
	due := false
	if podEnded(pod) {
		since, due = pod.CreationTimestamp.Time, true
		if last := lastFinish(pod); last != nil {
			since = *last
		}
	}
	if pod.DeletionTimestamp != nil && (!due || pod.DeletionTimestamp.Time.Before(since)) {
		since, due = pod.DeletionTimestamp.Time, true
	}
	return since, due
}

// trackHeld keeps h in step with the informer of obj through its events.
func trackHeld[T client.Object](ctx context.Context, c cache.Cache, obj T, h *held, due func(T) (time.Time, bool), excluded func(string) bool) error {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return err
	}
	update := func(o any) {
		if t, ok := o.(T); ok {
			since, d := due(t)
			h.set(t.GetUID(), since, d && !excluded(t.GetNamespace()))
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, o any) { update(o) },
		DeleteFunc: func(o any) {
			if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = tomb.Obj
			}
			if t, ok := o.(T); ok {
				h.set(t.GetUID(), time.Time{}, false)
			}
		},
	})
	return err
}

// heldCollector reports heldJobs and heldPods.
type heldCollector struct{ clock clock.PassiveClock }

func (heldCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- metrics.FinalizersHeld
	ch <- metrics.FinalizerHeldOldestSeconds
}

func (c heldCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.clock.Now()
	for kind, h := range map[string]*held{kindJob: heldJobs, kindPod: heldPods} {
		n, oldest := h.stats(now)
		ch <- prometheus.MustNewConstMetric(metrics.FinalizersHeld, prometheus.GaugeValue, float64(n), kind)
		ch <- prometheus.MustNewConstMetric(metrics.FinalizerHeldOldestSeconds, prometheus.GaugeValue, oldest.Seconds(), kind)
	}
}

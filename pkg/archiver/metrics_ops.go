package archiver

// The metrics operations alert on (config/monitoring): what the event counters of metrics.go
// cannot say. How long objects have been waiting for a release, and whether the backends answer,
// are states, not events: they are gauges computed when Prometheus scrapes.

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
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
)

// Values of the kind label of the held-finalizer gauges and of releases_incomplete_total.
const (
	kindJob = "job"
	kindPod = "pod"
)

var (
	finalizersHeldDesc = prometheus.NewDesc("jobvault_archiver_finalizers_held",
		"Objects due for release (a job terminal or being deleted; a pod ended, or being deleted past its grace period) that still hold jobvault's finalizer, by kind (job, pod).",
		[]string{"kind"}, nil)
	finalizerHeldOldestSecondsDesc = prometheus.NewDesc("jobvault_archiver_finalizer_held_oldest_seconds",
		"How long the oldest object due for release has held jobvault's finalizer since it became due, by kind (job, pod); 0 when none waits.",
		[]string{"kind"}, nil)
	backendUpDesc = prometheus.NewDesc("jobvault_archiver_backend_up",
		"Whether the backend (database, store) answered a ping at this scrape: 1 yes, 0 no.",
		[]string{"backend"}, nil)

	heldJobs, heldPods = newHeld(), newHeld()
	backends           = &backendProbe{}
)

func init() {
	metrics.Registry.MustRegister(heldCollector{clock.RealClock{}}, backends)
	// Every series of the event counters starts at zero: increase() over a series that first
	// appears at 1 is 0, so an alert on the first gap or failure would never fire.
	for _, reason := range []string{"store", "database", "log-unreadable"} {
		archiveFailuresTotal.WithLabelValues(reason)
	}
	for kind, causes := range map[string][]string{
		kindJob: {"operator", "pods", "unavailable", "gap"},
		kindPod: {"operator", "unavailable", "gap", "untracked"},
	} {
		for _, cause := range causes {
			releasesIncompleteTotal.WithLabelValues(kind, cause)
		}
	}
	for _, reason := range []record.GapReason{record.GapRotated, record.GapCollected, record.GapNodeLost, record.GapUnreadable,
		record.GapRestarted, record.GapMaybeRotated, record.GapReleased} {
		logGapsTotal.WithLabelValues(string(reason))
	}
	for _, cause := range []string{"ended", "broken", "open", "store", "status"} {
		followReopensTotal.WithLabelValues(cause)
	}
}

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
	ch <- finalizersHeldDesc
	ch <- finalizerHeldOldestSecondsDesc
}

func (c heldCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.clock.Now()
	for kind, h := range map[string]*held{kindJob: heldJobs, kindPod: heldPods} {
		n, oldest := h.stats(now)
		ch <- prometheus.MustNewConstMetric(finalizersHeldDesc, prometheus.GaugeValue, float64(n), kind)
		ch <- prometheus.MustNewConstMetric(finalizerHeldOldestSecondsDesc, prometheus.GaugeValue, oldest.Seconds(), kind)
	}
}

// pinger is what both backends offer their readiness checks.
type pinger interface {
	Ping(ctx context.Context) error
}

// backendPingTimeout keeps a scrape within Prometheus' default scrape_timeout (10 s): a backend
// that has not answered by then is down for the alert, rather than the scrape failing.
const backendPingTimeout = 5 * time.Second

// backendProbe pings the backends at each scrape, as an exporter does: the figure is never older
// than the scrape, and nothing runs between scrapes.
type backendProbe struct {
	mu      sync.Mutex
	pingers map[string]pinger
}

func (b *backendProbe) use(records, store any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pingers = map[string]pinger{}
	for name, p := range map[string]any{"database": records, "store": store} {
		if p, ok := p.(pinger); ok {
			b.pingers[name] = p
		}
	}
}

func (b *backendProbe) Describe(ch chan<- *prometheus.Desc) { ch <- backendUpDesc }

func (b *backendProbe) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	pingers := b.pingers
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), backendPingTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for name, p := range pingers {
		wg.Go(func() {
			up := 0.0
			if p.Ping(ctx) == nil {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(backendUpDesc, prometheus.GaugeValue, up, name)
		})
	}
	wg.Wait()
}

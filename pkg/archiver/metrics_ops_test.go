package archiver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/tracking"
)

func TestJobDue(t *testing.T) {
	changed, deleted := time.Unix(1000, 0), time.Unix(2000, 0)
	job := func(phase batchv1alpha1.JobPhase, finalizer, deleting bool) *batchv1alpha1.Job {
		j := &batchv1alpha1.Job{}
		j.Status.State = batchv1alpha1.JobState{Phase: phase, LastTransitionTime: metav1.NewTime(changed)}
		if finalizer {
			j.Finalizers = []string{tracking.JobFinalizer}
		}
		if deleting {
			j.DeletionTimestamp = &metav1.Time{Time: deleted}
		}
		return j
	}
	checkDue(t, jobDue, []dueCase[*batchv1alpha1.Job]{
		{"running", job(batchv1alpha1.Running, true, false), time.Time{}, false},
		{"aborted is resumable", job(batchv1alpha1.Aborted, true, false), time.Time{}, false},
		{"completed: since its last phase change", job(batchv1alpha1.Completed, true, false), changed, true},
		{"failed", job(batchv1alpha1.Failed, true, false), changed, true},
		{"being deleted while running: since then", job(batchv1alpha1.Running, true, true), deleted, true},
		{"released already", job(batchv1alpha1.Completed, false, false), time.Time{}, false},
	})
}

// dueCase is a case of jobDue or podDue: the object, and when it became due if it is.
type dueCase[T any] struct {
	name  string
	obj   T
	since time.Time
	due   bool
}

func checkDue[T any](t *testing.T, due func(T) (time.Time, bool), cases []dueCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			since, ok := due(tc.obj)
			if ok != tc.due || !since.Equal(tc.since) {
				t.Errorf("due = %v, %v; want %v, %v", since, ok, tc.since, tc.due)
			}
		})
	}
}

func TestPodDue(t *testing.T) {
	created, finished, graceEnd := time.Unix(100, 0), time.Unix(1000, 0), time.Unix(2000, 0)
	pod := func(phase corev1.PodPhase, finalizer bool, deletion time.Time, terminated bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		p.Status.Phase = phase
		if finalizer {
			p.Finalizers = []string{tracking.PodFinalizer}
		}
		if !deletion.IsZero() {
			p.DeletionTimestamp = &metav1.Time{Time: deletion}
		}
		if terminated {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(finished)}}}}
		}
		return p
	}
	checkDue(t, podDue, []dueCase[*corev1.Pod]{
		{"running", pod(corev1.PodRunning, true, time.Time{}, false), time.Time{}, false},
		{"ended: since its last container stopped", pod(corev1.PodSucceeded, true, time.Time{}, true), finished, true},
		{"ended without statuses: since its creation", pod(corev1.PodFailed, true, time.Time{}, false), created, true},
		{"being deleted: since its grace period ends", pod(corev1.PodRunning, true, graceEnd, false), graceEnd, true},
		{"ended before its deletion: since it ended", pod(corev1.PodSucceeded, true, graceEnd, true), finished, true},
		{"released already", pod(corev1.PodSucceeded, false, time.Time{}, true), time.Time{}, false},
	})
}

// TestHeldCollector: the gauges count what is due by now and age the oldest; a pod within its
// grace period is not due yet, and a release takes an object out.
func TestHeldCollector(t *testing.T) {
	now := time.Unix(10_000, 0)
	heldJobs.set("a", now.Add(-90*time.Second), true)
	heldJobs.set("b", now.Add(-30*time.Second), true)
	heldPods.set("p", now.Add(10*time.Second), true) // its grace period runs on
	t.Cleanup(func() {
		for _, uid := range []types.UID{"a", "b"} {
			heldJobs.set(uid, time.Time{}, false)
		}
		heldPods.set("p", time.Time{}, false)
	})
	c := heldCollector{clocktesting.NewFakePassiveClock(now)}
	want := `
# HELP jobvault_archiver_finalizer_held_oldest_seconds How long the oldest object due for release has held jobvault's finalizer since it became due, by kind (job, pod); 0 when none waits.
# TYPE jobvault_archiver_finalizer_held_oldest_seconds gauge
jobvault_archiver_finalizer_held_oldest_seconds{kind="job"} 90
jobvault_archiver_finalizer_held_oldest_seconds{kind="pod"} 0
# HELP jobvault_archiver_finalizers_held Objects due for release (a job terminal or being deleted; a pod ended, or being deleted past its grace period) that still hold jobvault's finalizer, by kind (job, pod).
# TYPE jobvault_archiver_finalizers_held gauge
jobvault_archiver_finalizers_held{kind="job"} 2
jobvault_archiver_finalizers_held{kind="pod"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	heldJobs.set("a", time.Time{}, false) // released
	if n, oldest := heldJobs.stats(now); n != 1 || oldest != 30*time.Second {
		t.Errorf("after a release: %d held, oldest %v; want 1, 30s", n, oldest)
	}
}

// countingPinger counts its pings and answers err.
type countingPinger struct {
	pings atomic.Int32
	err   error
}

func (p *countingPinger) Ping(context.Context) error {
	p.pings.Add(1)
	return p.err
}

// TestProberOnePingServesReadinessAndMetric: the readiness check and the backend_up gauge read
// the result of the prober's last pass: however often they are asked, each backend is pinged
// once a pass. Before its first pass the archiver is not ready and exports no backend_up.
func TestProberOnePingServesReadinessAndMetric(t *testing.T) {
	database, store := &countingPinger{}, &countingPinger{err: errors.New("bucket gone")}
	p := newProber(database, store)
	ready := func() error { return p.Check(httptest.NewRequest(http.MethodGet, "/readyz", nil)) }
	if err := ready(); err == nil {
		t.Error("ready before the first probe, want not ready")
	}
	if n := testutil.CollectAndCount(p); n != 0 {
		t.Errorf("before the first probe: %d series, want none", n)
	}
	if err := p.probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP jobvault_archiver_backend_up Whether the backend (database, store) answered the archiver's last ping (every 10 s, the same that /readyz reports): 1 yes, 0 no.
# TYPE jobvault_archiver_backend_up gauge
jobvault_archiver_backend_up{backend="database"} 1
jobvault_archiver_backend_up{backend="store"} 0
`
	for range 3 {
		if err := testutil.CollectAndCompare(p, strings.NewReader(want)); err != nil {
			t.Error(err)
		}
		if err := ready(); err == nil || !strings.Contains(err.Error(), "store: bucket gone") {
			t.Errorf("readiness with the store down = %v, want the store's error", err)
		}
	}
	if d, s := database.pings.Load(), store.pings.Load(); d != 1 || s != 1 {
		t.Errorf("pings after one pass, 3 scrapes and 3 readiness checks: database %d, store %d; want 1 each", d, s)
	}
	store.err = nil
	if err := p.probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := ready(); err != nil {
		t.Errorf("readiness with both backends up = %v, want ready", err)
	}
}

package performance

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// queueDepths reads the archiver's work queue depths (controller-runtime's workqueue_depth) by
// controller.
func queueDepths(b testing.TB, a *stack.Archiver) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	for _, m := range archiverMetrics(b, a)["workqueue_depth"].GetMetric() {
		l := metricLabels(m)
		out[cmp.Or(l["controller"], l["name"])] += m.GetGauge().GetValue()
	}
	return out
}

// jobLatencies are, for every job released, the time from its last container seen terminated
// to its release, keyed by that termination time; and the jobs ended but not yet released.
func (r *releases) jobLatencies() (ended map[types.UID]time.Time, released map[types.UID]time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ended = map[types.UID]time.Time{}
	for pod, t := range r.terminated {
		if job := r.jobOf[pod]; job != "" && t.After(ended[job]) {
			ended[job] = t
		}
	}
	released = map[types.UID]time.Time{}
	for job, t := range r.jobReleased {
		released[job] = t
	}
	return ended, released
}

// minute is what one minute of the sustained run saw.
type minute struct {
	created        int
	lat            []time.Duration // jobs whose last container ended in this minute
	podQ, jobQ     float64         // the deepest work queues sampled
	backlog        int             // the most jobs ended and not released
	outage, active bool
}

// BenchmarkSustained submits VcJobs at a steady rate (JOBVAULT_BENCH_SUSTAINED_RATE jobs/s, 20)
// of JOBVAULT_BENCH_SUSTAINED_PODS pods (5) each writing a small log, for
// JOBVAULT_BENCH_SUSTAINED_MINUTES (15), with MinIO stopped for JOBVAULT_BENCH_SUSTAINED_OUTAGE
// seconds (120; 0 for none) in the middle. Released jobs are deleted, as a TTL would, so the
// cluster holds a steady number of objects. Every minute it prints the jobs created, the p50 and
// p99 from the last container's termination to the job's release (target p99 ≤ 5 s) for the jobs
// that ended in that minute, the deepest work queues and the most jobs ended but not released;
// after the outage, how long the backlog took to drain (target ≤ twice the outage); at the end,
// that every job was archived with every log, none lost. It prints the rate actually achieved:
// on a small machine Volcano and KWOK may not keep up with the rate asked for.
func BenchmarkSustained(b *testing.B) {
	rate := envInt(b, "JOBVAULT_BENCH_SUSTAINED_RATE", 20)
	perJob := int(envInt(b, "JOBVAULT_BENCH_SUSTAINED_PODS", 5))
	minutes := int(envInt(b, "JOBVAULT_BENCH_SUSTAINED_MINUTES", 15))
	outage := time.Duration(envIntZero(b, "JOBVAULT_BENCH_SUSTAINED_OUTAGE", 120)) * time.Second
	for range b.N {
		s := stack.NewRig(b, objstore.BackendS3)
		s.Proc.Stop()
		// Short pods are followed while they run: as many at once as inotify allows here.
		s.Args = append(s.Args, "--max-streams="+strconv.Itoa(followable(b, 100)))
		s.Start(b)
		rt := s.Env.Runtime(b, testbed.RuntimeOptions{})
		seen := watchReleases(b, s)
		c := stack.Unthrottled(b, s.Env, s.Env.Config)

		d := time.Duration(minutes) * time.Minute
		start := time.Now()
		outageAt := start.Add(d/2 - outage/2)
		stats := make([]minute, minutes+60)
		at := func(t time.Time) int { return min(int(t.Sub(start)/time.Minute), len(stats)-1) }
		var (
			mu      sync.Mutex
			jobs    []*batchv1alpha1.Job
			created atomic.Int64
			wg      sync.WaitGroup
		)
		// The generator: one job every 1/rate, each created in its own goroutine so that a slow
		// API server shows as a rate not achieved rather than as a slower clock.
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for i := 0; time.Since(start) < d; i++ {
				<-tick.C
				job := testbed.Job(s.NS, fmt.Sprintf("s-%06d", i)).Task("w", int32(perJob), []string{"main"}).Obj()
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Each pod's output is registered with the node (an API call each) here, not
					// on the generator's clock.
					for r := range perJob {
						pod := testbed.PodName(job.Name, "w", r)
						rt.Run(goroutineT{b}, s.NS, pod, map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: testbed.Bytes(smallLines(pod, 10))}}}}})
					}
					if err := c.Create(b.Context(), job); err != nil {
						b.Errorf("create %s: %v", job.Name, err)
						return
					}
					created.Add(1)
					mu.Lock()
					jobs = append(jobs, job)
					stats[at(time.Now())].created++
					mu.Unlock()
				}()
			}
		}()

		// Every 5 s: queue depths, the backlog, deleting what was released, the outage.
		var (
			stoppedAt, restartedAt, drainedAt time.Time
			deleted                           = map[types.UID]bool{}
			preOutageBacklog                  int
		)
		for time.Since(start) < d+10*time.Minute {
			time.Sleep(5 * time.Second)
			now := time.Now()
			m := &stats[at(now)]
			m.active = true
			q := queueDepths(b, s.Archiver)
			m.podQ, m.jobQ = max(m.podQ, q["pod"]), max(m.jobQ, q["vcjob"])
			ended, released := seen.jobLatencies()
			backlog := 0
			for job := range ended {
				if _, ok := released[job]; !ok {
					backlog++
				}
			}
			m.backlog = max(m.backlog, backlog)
			if outage > 0 && stoppedAt.IsZero() && now.After(outageAt) {
				preOutageBacklog = backlog
				testbed.MinIOInstance(b).Stop()
				stoppedAt = time.Now()
				b.Logf("MinIO stopped at %s with %d jobs ended and not released", stoppedAt.Sub(start).Round(time.Second), backlog)
			}
			if !stoppedAt.IsZero() && restartedAt.IsZero() {
				m.outage = true
				if now.Sub(stoppedAt) >= outage {
					testbed.MinIOInstance(b).Start(b)
					restartedAt = time.Now()
					b.Logf("MinIO started again at %s with %d jobs ended and not released", restartedAt.Sub(start).Round(time.Second), backlog)
				}
			}
			if !restartedAt.IsZero() && drainedAt.IsZero() && backlog <= max(preOutageBacklog, 2*int(rate)) {
				drainedAt = now
			}
			mu.Lock()
			for _, job := range jobs {
				if _, ok := released[job.UID]; ok && !deleted[job.UID] {
					if err := c.Delete(b.Context(), job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
						b.Errorf("delete %s: %v", job.Name, err)
					}
					deleted[job.UID] = true
				}
			}
			all := len(jobs)
			mu.Unlock()
			if time.Since(start) > d && len(released) >= all && int64(all) == created.Load() {
				break
			}
		}
		wg.Wait()
		if !stoppedAt.IsZero() && restartedAt.IsZero() {
			testbed.MinIOInstance(b).Start(b)
		}

		ended, released := seen.jobLatencies()
		var all []time.Duration
		for job, t := range ended {
			if r, ok := released[job]; ok {
				m := &stats[at(t)]
				m.lat = append(m.lat, r.Sub(t))
				all = append(all, r.Sub(t))
			}
		}
		n := int(created.Load())
		achieved := float64(n) / d.Seconds()
		b.Logf("asked %d jobs/s of %d pods for %s: created %d, %.1f jobs/s (%.0f pods/s) achieved; %d released", rate, perJob, d, n, achieved, achieved*float64(perJob), len(released))
		b.Logf("minute  created  ended  p50(s)  p99(s)  max pod queue  max job queue  max not released")
		for i, m := range stats {
			if !m.active && m.created == 0 && len(m.lat) == 0 {
				continue
			}
			slices.Sort(m.lat)
			note := ""
			if m.outage {
				note = "  (MinIO down)"
			}
			b.Logf("%6d  %7d  %5d  %6.2f  %6.2f  %13.0f  %13.0f  %16d%s", i, m.created, len(m.lat), quantile(m.lat, 0.5).Seconds(), quantile(m.lat, 0.99).Seconds(),
				m.podQ, m.jobQ, m.backlog, note)
		}
		slices.Sort(all)
		b.ReportMetric(achieved, "jobs/s-achieved")
		b.ReportMetric(quantile(all, 0.5).Seconds(), "p50-release-s")
		b.ReportMetric(quantile(all, 0.99).Seconds(), "p99-release-s")
		b.Logf("release p99 over the whole run %s (target per minute outside the outage ≤ %s)", quantile(all, 0.99).Round(time.Millisecond), targetDuration("sustainedReleaseP99"))
		if !restartedAt.IsZero() {
			if drainedAt.IsZero() {
				b.Errorf("the backlog never drained after MinIO came back")
			} else {
				drain := drainedAt.Sub(restartedAt)
				b.ReportMetric(drain.Seconds(), "outage-drain-s")
				drainTarget := time.Duration(targetNumber("sustainedDrainRatio") * float64(outage))
				b.Logf("after a MinIO outage of %s the backlog drained in %s (target ≤ %s): %s", outage, drain.Round(time.Second), drainTarget, verdict(drain <= drainTarget))
			}
		}
		if len(released) != n {
			b.Errorf("%d of %d jobs released", len(released), n)
		}
		// Nothing lost: every job's every pod has its log stored, without gaps; a sample byte-exact.
		mu.Lock()
		defer mu.Unlock()
		var sampled []string
		for i, job := range jobs {
			if i%max(1, len(jobs)/20) == 0 {
				sampled = append(sampled, testbed.PodName(job.Name, "w", 0))
			}
			if row, err := s.Records.Job(b.Context(), string(job.UID)); err != nil || row.ArchiveState != record.ArchiveArchived {
				b.Errorf("job %s: archive state %q (%v), want archived", job.Name, row.ArchiveState, err)
			}
		}
		checkArchived(b, s, rt, jobs, n*perJob, sampled)
	}
}

// envIntZero is envInt that also takes 0.
func envIntZero(b testing.TB, name string, def int64) int64 {
	b.Helper()
	if v, err := strconv.ParseInt(strings.TrimSpace(os.Getenv(name)), 10, 64); err == nil && v == 0 {
		return 0
	}
	return envInt(b, name, def)
}

// goroutineT is a testbed.T for goroutines other than the benchmark's own, where FailNow must not
// be called: a fatal error is reported and ends the goroutine only.
type goroutineT struct{ *testing.B }

func (g goroutineT) Fatal(args ...any) { g.Error(args...); runtime.Goexit() }

func (g goroutineT) Fatalf(format string, args ...any) { g.Errorf(format, args...); runtime.Goexit() }

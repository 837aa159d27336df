package performance

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/lib/pq" // the benchmark reads Postgres' own statistics
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// releaseRateTarget is the pods a second one archiver must archive and release (targets.yaml).
var releaseRateTarget = targetNumber("releaseRate")

// archiverCounters are the archiver's own counts of its work, from its /metrics: reconciles by
// controller and its requests to the API server by method.
type archiverCounters struct {
	reconciles    map[string]float64 // by controller (vcjob, pod)
	reconcileSecs map[string]float64 // time spent reconciling, by controller
	requests      map[string]float64 // by HTTP method
	chainLockSecs float64            // time finalizations held the chain head
	finalizedJobs float64
	finalizeSteps map[string]*dto.Histogram // each step of a job's finalization, timed
}

func readArchiverCounters(b testing.TB, a *stack.Archiver) archiverCounters {
	b.Helper()
	families := archiverMetrics(b, a)
	c := archiverCounters{reconciles: map[string]float64{}, reconcileSecs: map[string]float64{}, requests: map[string]float64{},
		finalizeSteps: map[string]*dto.Histogram{}}
	for _, m := range families["jobvault_archiver_finalize_step_seconds"].GetMetric() {
		c.finalizeSteps[metricLabels(m)["step"]] = m.GetHistogram()
	}
	for _, m := range families["controller_runtime_reconcile_total"].GetMetric() {
		c.reconciles[metricLabels(m)["controller"]] += m.GetCounter().GetValue()
	}
	for _, m := range families["controller_runtime_reconcile_time_seconds"].GetMetric() {
		c.reconcileSecs[metricLabels(m)["controller"]] += m.GetHistogram().GetSampleSum()
	}
	for _, m := range families["jobvault_archiver_chain_lock_seconds"].GetMetric() {
		c.chainLockSecs += m.GetHistogram().GetSampleSum()
		c.finalizedJobs += float64(m.GetHistogram().GetSampleCount())
	}
	for _, m := range families["rest_client_requests_total"].GetMetric() {
		c.requests[metricLabels(m)["method"]] += m.GetCounter().GetValue()
	}
	return c
}

func (c archiverCounters) String() string {
	var methods []string
	for m, n := range c.requests {
		methods = append(methods, fmt.Sprintf("%s %.0f", m, n))
	}
	return fmt.Sprintf("reconciles: vcjob %.0f (%.1f s in all), pod %.0f (%.1f s); chain head held %.2f s by %.0f finalizations; API requests: %s",
		c.reconciles["vcjob"], c.reconcileSecs["vcjob"], c.reconciles["pod"], c.reconcileSecs["pod"], c.chainLockSecs, c.finalizedJobs, strings.Join(methods, ", "))
}

// finalizeMeans is the mean time of each step of a job's finalization after its last pod's
// release (jobvault_archiver_finalize_step_seconds): the out-of-view list, and beside it record,
// captures and seal, then release.
func (c archiverCounters) finalizeMeans() string {
	var steps []string
	for _, step := range []string{"out-of-view", "record", "captures", "seal", "release"} {
		if h := c.finalizeSteps[step]; h.GetSampleCount() > 0 {
			steps = append(steps, fmt.Sprintf("%s %.0f ms", step, 1000*h.GetSampleSum()/float64(h.GetSampleCount())))
		}
	}
	return strings.Join(steps, ", ")
}

// dbTransactions is how many transactions the database at dsn committed or rolled back so far, as
// Postgres counts them: every statement outside a transaction is one, so it counts round trips.
// Backends report their counts when they end or within seconds of going idle.
func dbTransactions(b testing.TB, dsn string) float64 {
	b.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var n float64
	if err := db.QueryRowContext(b.Context(), `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		b.Fatalf("read the database's statistics: %v", err)
	}
	return n
}

// patchFloor patches a harmless annotation onto every pod with workers clients in parallel (in a
// child process, floorClient), as fast as the API server takes them: the least any archiver must
// do per pod (one patch releasing it), measured on this machine in this run. It returns the
// patches per second, and the CPU per pod (ms) the API server and the client spent on them.
func patchFloor(b *testing.B, s *stack.Rig, pods []corev1.Pod, workers, apiPID int) (rate, apiMs, clientMs float64) {
	b.Helper()
	spec := floorSpec{Op: floorPatches, Kubeconfig: s.Env.KubeconfigPath, Namespace: s.NS, Pods: podNames(pods), Workers: workers}
	clientMs = floorClient(b, spec, func(run func()) {
		api0, t0 := sampleTrees(b, apiPID), time.Now()
		run()
		rate = float64(len(pods)) / time.Since(t0).Seconds()
		apiMs = sampleTrees(b, apiPID).msPer(api0, apiPID, len(pods))
	})
	return rate, apiMs, clientMs
}

// inParallel calls each for 0 to n-1 from workers goroutines, and returns the first error any
// returned (a worker stops at its error; the others go on).
func inParallel(n, workers int, each func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := each(int(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cpuProfile fetches a CPU profile of the archiver (its --pprof-bind-address) for d into path.
func cpuProfile(addr, path string, d time.Duration) error {
	return fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())), path)
}

// fetch saves what url serves into path.
func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// BenchmarkReleaseThroughput has N pods (JOBVAULT_BENCH_BURST_PODS, 1,000) in VcJobs of
// JOBVAULT_BENCH_BURST_PER_JOB (10) end together while the archiver is stopped, each having
// written a small log (10 lines, 800 bytes), and then starts the archiver: it reports how many
// pods a second it archives and releases (target ≥ 100/s), from its start and from its first
// release, with its jobs. VcJobs, not bare pods: a pod is tracked only as a VcJob's (its
// controlling owner), and the job reconciler's work per pod event is part of what is measured.
// Stopped, not running, so that the burst is as sharp as can be: Volcano and KWOK on this machine
// end pods at a few dozen a second, and the archiver would only follow them.
//
// Baseline in the same run: the same number of pods patched with one annotation by as many
// workers as the archiver reconciles pods with (patchFloor), the API server's floor of any
// archiver. It also prints the work per pod: database transactions (Postgres' own count),
// requests to the API server by method, MinIO's requests by S3 API, and reconciles of each
// controller (is the job reconciled on every pod event?). And what bounds the rate here: the CPU every process on the
// machine spent per pod (the testbed's parts all share its cores), the requests the API server
// served per pod from every client, and when pods and jobs were released (whether jobs are
// released while the backlog drains, or all at its end). JOBVAULT_BENCH_CPU_PROFILE=FILE saves a CPU profile of the
// archiver over the drain. JOBVAULT_BENCH_BURST_WORKERS (8) sets the archiver's --pod-workers and
// the floor's workers; JOBVAULT_BENCH_BURST_JOB_WORKERS and _DB_CONNS, when set, its --job-workers
// and --db-max-open-conns; JOBVAULT_BENCH_ARCHIVER_GODEBUG its GODEBUG (http2debug=1 logs its
// connections to the API server).
func BenchmarkReleaseThroughput(b *testing.B) {
	n := int(envInt(b, "JOBVAULT_BENCH_BURST_PODS", 1000))
	perJob := int(envInt(b, "JOBVAULT_BENCH_BURST_PER_JOB", 10))
	podWorkers := int(envInt(b, "JOBVAULT_BENCH_BURST_WORKERS", 8))
	for range b.N {
		pprofAddr := "127.0.0.1:" + strconv.Itoa(testbed.FreePort(b))
		flags := []string{"--pprof-bind-address=" + pprofAddr, "--pod-workers=" + strconv.Itoa(podWorkers)}
		if os.Getenv("JOBVAULT_BENCH_BURST_JOB_WORKERS") != "" {
			flags = append(flags, "--job-workers="+strconv.Itoa(int(envInt(b, "JOBVAULT_BENCH_BURST_JOB_WORKERS", 4))))
		}
		if os.Getenv("JOBVAULT_BENCH_BURST_DB_CONNS") != "" {
			flags = append(flags, "--db-max-open-conns="+strconv.Itoa(int(envInt(b, "JOBVAULT_BENCH_BURST_DB_CONNS", 10))))
		}
		s := stack.NewRig(b, objstore.BackendS3, flags...)
		s.Proc.Stop()
		rt := s.Env.Runtime(b, testbed.RuntimeOptions{})
		t0 := time.Now()
		jobs, _ := createJobs(b, s, rt, "burst", n, perJob, func(pod string) testbed.Output {
			return testbed.Output{Runs: [][]testbed.Chunk{{{Stream: "stdout", Data: testbed.Bytes(smallLines(pod, 10))}}}}
		})
		pods := waitEnded(b, s, jobs, n, 20*time.Minute)
		b.Logf("%d pods in %d VcJobs ended (Volcano and KWOK) in %s, held by their finalizers", n, len(jobs), time.Since(t0).Round(time.Second))

		// The processes whose CPU jobvault causes, and the API server's, by process id: the
		// machine is shared, and another test's postgres is not this run's.
		pgProfiled := loadPGStatements(b, testbed.PostgresCluster(b), s.DSN)
		apiPID, minioPID, pgPID := s.Env.APIServerPID(b), testbed.MinIOInstance(b).Proc.PID(), testbed.PostgresCluster(b).Proc.PID()
		floor, floorAPIMs, patchClientMs := patchFloor(b, s, pods, podWorkers, apiPID)
		records := measureRecordFloor(b, s, pods, podWorkers, minioPID, pgPID)
		client := clientFloor{logReadMs: logReadFloor(b, s, pods, podWorkers), recordMs: records.clientMs, patchMs: patchClientMs}
		whole := measureArchiveFloor(b, s, pods, int(envInt(b, "JOBVAULT_BENCH_ARCHIVE_FLOOR_WORKERS", int64(4*podWorkers))), minioPID, pgPID)
		seen := watchReleases(b, s)
		tx0 := dbTransactions(b, s.DSN)

		start := time.Now()
		if v := os.Getenv("JOBVAULT_BENCH_ARCHIVER_GODEBUG"); v != "" {
			s.Archiver.Environ = append(s.Archiver.Environ, "GODEBUG="+v)
		}
		s.Start(b)
		ready := time.Since(start)
		archPID := s.Proc.PID()
		arch0, all0, req0 := sampleProc(b, archPID), sampleAllProcs(b), apiServerRequests(b, s.Env)
		minioEndpoint := testbed.MinIOInstance(b).Endpoint
		store0 := minioRequests(b, minioEndpoint)
		own0 := sampleTrees(b, archPID, minioPID, pgPID, apiPID)
		profiled := make(chan error, 1)
		if path := os.Getenv("JOBVAULT_BENCH_CPU_PROFILE"); path != "" {
			secs := envInt(b, "JOBVAULT_BENCH_CPU_PROFILE_SECONDS", 30)
			go func() { profiled <- cpuProfile(pprofAddr, path, time.Duration(secs)*time.Second) }()
		} else {
			profiled <- nil
		}
		var (
			firstPod, lastPod, lastJob time.Time
			podsDone, jobsDone         int
		)
		for deadline := time.Now().Add(20 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			firstPod, lastPod, lastJob, podsDone, jobsDone = seen.released()
			if podsDone >= n && jobsDone >= len(jobs) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d pods and %d of %d jobs released in 20 minutes; archiver log %s", podsDone, n, jobsDone, len(jobs), s.Proc.LogPath)
			}
		}
		if err := <-profiled; err != nil {
			b.Errorf("CPU profile: %v", err)
		}
		counts := readArchiverCounters(b, s.Archiver)
		arch, all, req := sampleProc(b, archPID), sampleAllProcs(b), apiServerRequests(b, s.Env)
		store := minioRequests(b, minioEndpoint)
		own := sampleTrees(b, archPID, minioPID, pgPID, apiPID)
		s.Proc.Stop() // its database sessions end and report their counts
		time.Sleep(2 * time.Second)
		tx := dbTransactions(b, s.DSN) - tx0
		checkArchived(b, s, rt, jobs, n, sample(podNames(pods), 20))

		total := lastJob.Sub(start)
		drain := lastJob.Sub(firstPod)
		rate, drainRate := float64(n)/total.Seconds(), float64(n)/drain.Seconds()
		b.ReportMetric(float64(n), "pods")
		b.ReportMetric(rate, "pods/s-from-start")
		b.ReportMetric(drainRate, "pods/s-drain")
		b.ReportMetric(floor, "floor-patches/s")
		b.ReportMetric(drainRate/floor, "drain/floor")
		b.ReportMetric(tx/float64(n), "db-transactions/pod")
		b.ReportMetric(counts.reconciles["vcjob"]/float64(n), "job-reconciles/pod")
		b.ReportMetric(counts.reconciles["pod"]/float64(n), "pod-reconciles/pod")
		b.ReportMetric(mib(arch.hwm), "archiver-peak-RSS-MiB")
		cpuPerPod := (arch.cpu - arch0.cpu) / float64(n) * 1000
		b.ReportMetric(cpuPerPod, "archiver-cpu-ms/pod")
		b.Logf("%d pods (%d VcJobs of %d) archived and released: %.1f pods/s from the archiver's start (%s, ready after %s, last pod %s, last job %s), "+
			"%.1f pods/s from the first release (target ≥ %.0f/s); floor: %.1f pod patches/s by %d workers, ratio %.2f; "+
			"per pod: %.1f database transactions, %.2f job and %.2f pod reconciles, API requests %s, archiver CPU %.1f ms; archiver peak RSS %.0f MiB; load average %s",
			n, len(jobs), perJob, rate, total.Round(time.Millisecond), ready.Round(time.Millisecond), lastPod.Sub(start).Round(time.Millisecond),
			lastJob.Sub(start).Round(time.Millisecond), drainRate, releaseRateTarget, floor, podWorkers, drainRate/floor,
			tx/float64(n), counts.reconciles["vcjob"]/float64(n), counts.reconciles["pod"]/float64(n), perPod(counts.requests, n), cpuPerPod, mib(arch.hwm), loadAvg())
		b.Logf("archiver totals: %s; %.0f database transactions", counts, tx)
		b.Logf("a job's finalization once its last pod was released, mean by step: %s", counts.finalizeMeans())
		spans := seen.jobSpans(start)
		b.Logf("jobs: %s", spans)
		// The whole testbed shares this machine's cores: what it all spent per pod says what rate
		// the machine can hold at best, whatever the archiver does.
		var byCommand []string
		used, machineMs := cpuByCommand(all0, all), 0.0
		for i, c := range used {
			ms := c.seconds / float64(n) * 1000
			machineMs += ms
			if i < 8 {
				byCommand = append(byCommand, fmt.Sprintf("%s %.2f ms", c.command, ms))
			}
		}
		b.ReportMetric(machineMs, "machine-cpu-ms/pod")
		b.Logf("CPU per pod from the archiver's start to the last release: %.1f ms on the whole machine, so %.0f pods/s would need %.1f cores (it has %d); by process: %s",
			machineMs, releaseRateTarget, machineMs*releaseRateTarget/1000, runtime.NumCPU(), strings.Join(byCommand, ", "))
		b.Logf("API server requests per pod, from every client: %s", perPodDelta(req0, req, n))
		b.Logf("MinIO requests per pod, by API: %s", perPodDelta(store0, store, n))
		if by, ok := podStatusWriters(b, s.Env, s.NS, start); ok {
			b.Logf("writes of pods' status per pod from the archiver's start, by client (the API server's audit log): %s", perPodCounts(by, n))
		} else {
			b.Logf("who writes pods' status: set %s=1 as the cluster starts, and the audit log says", testbed.AuditPodStatusEnv)
		}
		b.Logf("released per half second from the archiver's start (pods/jobs): %s", seen.timeline(start, 500*time.Millisecond))
		cost := podCost{pods: n, perJob: perJob, archiverMs: own.msPer(own0, archPID, n), minioMs: own.msPer(own0, minioPID, n),
			postgresMs: own.msPer(own0, pgPID, n), apiServerMs: own.msPer(own0, apiPID, n), floorAPIServerMs: floorAPIMs,
			floorRecord: records, floorClient: client, floorArchive: whole, transactions: tx / float64(n), drainRate: drainRate, floorRate: floor, jobLag: spans.lagP50,
			logConnects: (req["CONNECT pods/log"] - req0["CONNECT pods/log"]) / float64(n), patches: counts.requests["PATCH"] / float64(n)}
		b.ReportMetric(cost.archiverMs+cost.minioMs+cost.postgresMs, "jobvault-cpu-ms/pod")
		b.ReportMetric(spans.lagP50.Seconds(), "job-after-last-pod-p50-s")
		cost.logVerdicts(b)
		if pgProfiled {
			logPGStatements(b, s.DSN, n)
		}
	}
}

func perPod(by map[string]float64, n int) string {
	var parts []string
	for _, m := range []string{"GET", "PATCH", "POST", "PUT", "DELETE"} {
		if by[m] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", m, by[m]/float64(n)))
		}
	}
	return strings.Join(parts, ", ")
}

// perPodDelta formats the counts that grew from before to after, per pod (at least 0.01), sorted.
func perPodDelta(before, after map[string]float64, n int) string {
	var parts []string
	for k, v := range after {
		if per := (v - before[k]) / float64(n); per >= 0.01 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, per))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func podNames(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

// waitEnded waits until every job is terminal and n pods of the rig's namespace ended, and returns
// the pods.
func waitEnded(b *testing.B, s *stack.Rig, jobs []*batchv1alpha1.Job, n int, timeout time.Duration) []corev1.Pod {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var list batchv1alpha1.JobList
		if err := s.Env.Client.List(b.Context(), &list, client.InNamespace(s.NS)); err != nil {
			b.Fatal(err)
		}
		terminal := 0
		for _, j := range list.Items {
			if tracking.IsTerminal(j.Status.State.Phase) {
				terminal++
			}
		}
		var pods corev1.PodList
		if err := s.Env.Client.List(b.Context(), &pods, client.InNamespace(s.NS)); err != nil {
			b.Fatal(err)
		}
		ended := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				ended++
			}
		}
		if terminal == len(jobs) && ended >= n {
			return pods.Items
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs terminal and %d of %d pods ended after %s", terminal, len(jobs), ended, n, timeout)
		}
		time.Sleep(time.Second)
	}
}

// timeline counts the pods and jobs released in each step from start, as "pods/jobs" per step.
func (r *releases) timeline(start time.Time, step time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var pods, jobs []int
	count := func(into *[]int, t time.Time) {
		i := max(0, int(t.Sub(start)/step))
		for len(pods) <= i || len(jobs) <= i {
			pods, jobs = append(pods, 0), append(jobs, 0)
		}
		(*into)[i]++
	}
	for _, t := range r.podReleased {
		count(&pods, t)
	}
	for _, t := range r.jobReleased {
		count(&jobs, t)
	}
	steps := make([]string, len(pods))
	for i := range pods {
		steps[i] = fmt.Sprintf("%d/%d", pods[i], jobs[i])
	}
	return strings.Join(steps, " ")
}

// jobSpans says, over the jobs seen released, when half of them were (from start), how long each
// took from its first pod's release to its last pod's (p50, max) and from its last pod's release to
// its own (p50, max): whether jobs complete one after another or all at the end, and what
// finalizing one costs.
func (r *releases) jobSpans(start time.Time) jobSpanStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	first, last := map[types.UID]time.Time{}, map[types.UID]time.Time{}
	for uid, t := range r.podReleased {
		j := r.jobOf[uid]
		if f, ok := first[j]; !ok || t.Before(f) {
			first[j] = t
		}
		if t.After(last[j]) {
			last[j] = t
		}
	}
	var spans, lags, released []time.Duration
	for j, t := range r.jobReleased {
		released = append(released, t.Sub(start))
		if _, ok := last[j]; ok {
			spans, lags = append(spans, last[j].Sub(first[j])), append(lags, t.Sub(last[j]))
		}
	}
	slices.Sort(spans)
	slices.Sort(lags)
	slices.Sort(released)
	if len(spans) == 0 {
		return jobSpanStats{}
	}
	p50 := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	return jobSpanStats{halfReleased: p50(released), spanP50: p50(spans), spanMax: spans[len(spans)-1], lagP50: p50(lags), lagMax: lags[len(lags)-1]}
}

func (s jobSpanStats) String() string {
	if s.spanMax == 0 && s.halfReleased == 0 {
		return "no job released"
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("half of them released %s after the archiver's start; a job's pods released over p50 %s, max %s; the job released after its last pod p50 %s, max %s",
		r(s.halfReleased), r(s.spanP50), r(s.spanMax), r(s.lagP50), r(s.lagMax))
}

// released is when the first and last pod and the last job were seen released, and how many.
func (r *releases) released() (firstPod, lastPod, lastJob time.Time, pods, jobs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.podReleased {
		if firstPod.IsZero() || t.Before(firstPod) {
			firstPod = t
		}
		if t.After(lastPod) {
			lastPod = t
		}
	}
	for _, t := range r.jobReleased {
		if t.After(lastJob) {
			lastJob = t
		}
	}
	return firstPod, lastPod, lastJob, len(r.podReleased), len(r.jobReleased)
}

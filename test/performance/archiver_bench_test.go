package performance

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// The archiver's benchmarks (issue 11, live capture). Every container writes through the node
// runtime (testbed.Runtime), which rotates and keeps files as a kubelet does, and every archive is
// compared byte for byte with what the container wrote (Runtime.Written). A missed target is
// logged; wrong data fails.
// Their targets are in targets.yaml.
var (
	followRSSTarget  = targetBytes("followRSS")               // archiver RSS following 1,000 containers
	throughputTarget = targetNumber("captureThroughputRatio") // capture throughput over a raw pods/log copy
	releaseP99Target = targetDuration("releaseP99")
)

const (
	smallLine         = 80 // bytes of each line of the small-line writers, newline included
	followLinesPerSec = 10
)

// smallLines is n chunks of one line each, smallLine bytes, distinct for tag, in one allocation
// (a thousand containers write them).
func smallLines(tag string, n int) []testbed.Chunk {
	buf := make([]byte, 0, n*smallLine)
	out := make([]testbed.Chunk, n)
	for i := range n {
		start := len(buf)
		buf = fmt.Appendf(buf, "%s line %06d level=info msg=step ", tag, i)
		for len(buf)-start < smallLine-1 {
			buf = append(buf, '.')
		}
		buf = append(buf[:start+smallLine-1], '\n')
		out[i] = testbed.Chunk{Stream: "stdout", Data: buf[start:len(buf):len(buf)]}
	}
	return out
}

// createJobs submits jobs of up to perJob pods, n pods in all, with one container "main" writing
// out(pod) through rt, and returns the jobs and the pods' names.
func createJobs(b *testing.B, s *stack.Rig, rt *testbed.Runtime, prefix string, n, perJob int, out func(pod string) testbed.Output, opts ...testbed.PodOption) ([]*batchv1alpha1.Job, []string) {
	b.Helper()
	var (
		jobs []*batchv1alpha1.Job
		pods []string
	)
	for i := 0; i < n; i += perJob {
		replicas := min(perJob, n-i)
		job := testbed.Job(s.NS, fmt.Sprintf("%s-%03d", prefix, len(jobs))).Task("w", int32(replicas), []string{"main"}, opts...).Obj()
		for r := range replicas {
			pod := testbed.PodName(job.Name, "w", r)
			rt.Run(b, s.NS, pod, map[string]testbed.Output{"main": out(pod)})
			pods = append(pods, pod)
		}
		if err := s.Env.Client.Create(b.Context(), job); err != nil {
			b.Fatal(err)
		}
		jobs = append(jobs, job)
	}
	return jobs, pods
}

// linesWritten is how many lines the sampled containers wrote so far, in all.
func linesWritten(rt *testbed.Runtime, ns string, pods []string) int {
	n := 0
	for _, p := range pods {
		n += len(rt.Written(ns, p, "main", 0)) / smallLine
	}
	return n
}

// sample picks k of the pods (or anything), spread evenly.
func sample[T any](pods []T, k int) []T {
	var out []T
	for i := range min(k, len(pods)) {
		out = append(out, pods[i*len(pods)/min(k, len(pods))])
	}
	return out
}

// checkArchived asserts that every job's pods have their log stored, with no gap, and that the
// logs of the pods in exact are the bytes their container wrote.
func checkArchived(b *testing.B, s *stack.Rig, rt *testbed.Runtime, jobs []*batchv1alpha1.Job, pods int, exact []string) {
	b.Helper()
	ctx := b.Context()
	stored, checked := 0, 0
	for _, job := range jobs {
		gaps, err := s.Records.Gaps(ctx, string(job.UID))
		if err != nil {
			b.Fatal(err)
		}
		if len(gaps) > 0 {
			b.Errorf("job %s: gaps %+v, want none", job.Name, gaps)
		}
		rows, err := s.Records.Pods(ctx, string(job.UID))
		if err != nil {
			b.Fatal(err)
		}
		names := map[string]string{}
		for _, p := range rows {
			names[p.UID] = p.Name
		}
		logs, err := s.Records.LogObjects(ctx, string(job.UID))
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range logs {
			if l.State == record.LogStored {
				stored++
			}
			if slices.Contains(exact, names[l.PodUID]) {
				s.CheckLog(b, l, rt.Written(s.NS, names[l.PodUID], "main", 0))
				checked++
			}
		}
	}
	if stored != pods || checked != len(exact) {
		b.Errorf("%d logs stored of %d pods, %d compared of %d", stored, pods, checked, len(exact))
	}
}

// deleteAndWait deletes the jobs, as a user cancelling them, and waits until the archiver has
// released every one.
func deleteAndWait(b *testing.B, s *stack.Rig, jobs []*batchv1alpha1.Job, timeout time.Duration) {
	b.Helper()
	for _, job := range jobs {
		if err := s.Env.Client.Delete(b.Context(), job); client.IgnoreNotFound(err) != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		var list batchv1alpha1.JobList
		if err := s.Env.Client.List(b.Context(), &list, client.InNamespace(s.NS)); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs not released within %s; archiver log %s", len(list.Items), len(jobs), timeout, s.Proc.LogPath)
		}
		time.Sleep(time.Second)
	}
}

// window is what one measurement window saw: CPU of the API server and KWOK (and the archiver,
// if it runs), the machine's busy share, and the lines the sampled containers wrote.
type window struct {
	apiserver, kwok, archiver float64 // cores
	busy                      float64 // %
	linesPerSec               float64 // per sampled container
	streams                   [2]int  // pods/log streams open at the start and the end
	load                      string
	arch                      proc // the archiver at the end
}

// measure sleeps for d and reports what happened meanwhile. archiverPID is 0 if it is not running.
func measure(b *testing.B, s *stack.Rig, rt *testbed.Runtime, d time.Duration, archiverPID int, sampled []string) window {
	b.Helper()
	var w window
	apiPID, kwokPID := s.Env.APIServerPID(b), s.Env.KWOK.PID()
	// /metrics is read at both ends of every window, so its cost is in every window alike.
	w.streams[0] = logStreams(b, s.Env)
	lines0 := linesWritten(rt, s.NS, sampled)
	api0, kwok0, cpu0 := sampleProc(b, apiPID), sampleProc(b, kwokPID), cpuTimes(b)
	var arch0 proc
	if archiverPID != 0 {
		arch0 = sampleProc(b, archiverPID)
	}
	time.Sleep(d)
	api1, kwok1, cpu1 := sampleProc(b, apiPID), sampleProc(b, kwokPID), cpuTimes(b)
	if archiverPID != 0 {
		w.arch = sampleProc(b, archiverPID)
		w.archiver = cores(arch0, w.arch)
	}
	w.apiserver, w.kwok, w.busy, w.load = cores(api0, api1), cores(kwok0, kwok1), busy(cpu0, cpu1), loadAvg()
	w.linesPerSec = float64(linesWritten(rt, s.NS, sampled)-lines0) / api1.at.Sub(api0.at).Seconds() / float64(len(sampled))
	w.streams[1] = logStreams(b, s.Env)
	return w
}

// BenchmarkFollow1000 follows 1,000 containers at once, each writing 10 small lines a second, and
// reports over a window (60 s) the archiver's CPU and memory (target RSS < 300 MiB), and the CPU
// of the API server and of KWOK (the node serving pods/log) with the archiver following against
// the same window of the same containers before the archiver started. It ends by cancelling the
// jobs: every log is stored, none with a gap, and a sample is compared byte for byte.
// JOBVAULT_BENCH_FOLLOW_PODS and JOBVAULT_BENCH_FOLLOW_SECONDS change the count and the window;
// JOBVAULT_BENCH_FOLLOW_HEAP_PROFILE=FILE saves the archiver's heap profile after the window.
func BenchmarkFollow1000(b *testing.B) {
	want := int(envInt(b, "JOBVAULT_BENCH_FOLLOW_PODS", 1000))
	d := time.Duration(envInt(b, "JOBVAULT_BENCH_FOLLOW_SECONDS", 60)) * time.Second
	const perJob = 50
	for range b.N {
		s := stack.NewRig(b, objstore.BackendS3)
		// The baseline is the containers writing with no archiver: it starts only after.
		s.Proc.Stop()
		n := followable(b, want)
		// A thousand pods deleted at once: KWOK on 2 shared cores took over a minute to show their
		// containers terminated (load 20 to 65), past the archiver's default termination margin
		// (30 s past the grace period), which then read 604 of them as ended while running, with
		// a "truncated: still running at read" gap each (their logs whole nonetheless). The margin
		// is for a node that never reports, not measured here.
		s.Args = append(s.Args, "--max-streams="+strconv.Itoa(n), "--termination-margin=10m")
		heapProfile, pprofAddr := os.Getenv("JOBVAULT_BENCH_FOLLOW_HEAP_PROFILE"), "127.0.0.1:"+strconv.Itoa(testbed.FreePort(b))
		if heapProfile != "" {
			s.Args = append(s.Args, "--pprof-bind-address="+pprofAddr)
		}
		rt := s.Env.Runtime(b, testbed.RuntimeOptions{})
		// Enough output for the setup, both windows and the archiver's start-up, however slow.
		lines := followLinesPerSec * int((2*d + 10*time.Minute).Seconds())
		// The runtime looks every 50 ms and writes a chunk when Every has passed since the last:
		// a little under 100 ms writes at every other look, 10 a second when it keeps pace.
		every := time.Second/followLinesPerSec - 10*time.Millisecond
		jobs, pods := createJobs(b, s, rt, "follow", n, perJob, func(pod string) testbed.Output {
			return testbed.Output{Runs: [][]testbed.Chunk{smallLines(pod, lines)}, Every: every}
		}, testbed.RunsFor("2h"))
		t0 := time.Now()
		stack.WaitPodsRunning(b, s.Env, n, 15*time.Minute, client.InNamespace(s.NS))
		b.Logf("%d pods in %d jobs running in %s", n, len(jobs), time.Since(t0).Round(time.Second))
		sampled := sample(pods, 20)
		time.Sleep(5 * time.Second) // every container writing

		without := measure(b, s, rt, d, 0, sampled)

		t0 = time.Now()
		s.Start(b)
		for logStreams(b, s.Env) < n && time.Since(t0) < 10*time.Minute {
			time.Sleep(2 * time.Second)
		}
		opened := time.Since(t0)
		time.Sleep(5 * time.Second) // past the catch-up on what was written before
		with := measure(b, s, rt, d, s.Proc.PID(), sampled)
		if heapProfile != "" {
			if err := fetch("http://"+pprofAddr+"/debug/pprof/heap", heapProfile); err != nil {
				b.Errorf("heap profile: %v", err)
			}
		}

		streams := min(with.streams[0], with.streams[1])
		b.ReportMetric(float64(n), "containers")
		b.ReportMetric(float64(streams), "streams-open")
		b.ReportMetric(opened.Seconds(), "s-to-open-all")
		b.ReportMetric(with.archiver, "archiver-cores")
		b.ReportMetric(mib(with.arch.rss), "archiver-RSS-MiB")
		b.ReportMetric(mib(with.arch.hwm), "archiver-peak-RSS-MiB")
		b.ReportMetric(without.apiserver, "apiserver-cores-without")
		b.ReportMetric(with.apiserver, "apiserver-cores-with")
		b.ReportMetric(with.apiserver/without.apiserver, "apiserver-cpu-ratio")
		b.ReportMetric(without.kwok, "kwok-cores-without")
		b.ReportMetric(with.kwok, "kwok-cores-with")
		b.ReportMetric(with.linesPerSec, "lines/s/container")
		b.Logf("%d containers followed (%d streams open through the window, all open %.0fs after the archiver started; --max-streams=%d), "+
			"%.1f lines/s each (%.1f without the archiver), over %s:", n, streams, opened.Seconds(), n, with.linesPerSec, without.linesPerSec, d)
		b.Logf("  archiver %.3f cores, RSS %.1f MiB, peak %.1f MiB (target < %d MiB)", with.archiver, mib(with.arch.rss), mib(with.arch.hwm), followRSSTarget>>20)
		b.Logf("  kube-apiserver %.3f cores with, %.3f without: ratio %.2f, +%.3f cores; KWOK %.3f with, %.3f without",
			with.apiserver, without.apiserver, with.apiserver/without.apiserver, with.apiserver-without.apiserver, with.kwok, without.kwok)
		b.Logf("  machine busy %.0f%% with, %.0f%% without; load average %s with, %s without",
			with.busy, without.busy, with.load, without.load)

		// The figures are printed first: the release of thousands of pods can outlast the run.
		deleteAndWait(b, s, jobs, 20*time.Minute)
		checkArchived(b, s, rt, jobs, n, sampled)
	}
}

// bulkOutput is about size bytes of log lines (a counter, a hex payload and padding of varying
// length, so that gzip has real work to do) in chunks of about chunk bytes, in one allocation.
func bulkOutput(size, chunk int64) []testbed.Chunk {
	buf := make([]byte, 0, size+1024)
	var out []testbed.Chunk
	seed := sha256.Sum256([]byte("jobvault"))
	start := 0
	for i := 0; int64(len(buf)) < size; i++ {
		if i%64 == 0 {
			seed = sha256.Sum256(seed[:])
		}
		buf = fmt.Appendf(buf, "%09d level=info step=%d payload=%x ", i, i%977, seed)
		for range i % 50 {
			buf = append(buf, '-')
		}
		buf = append(buf, '\n')
		if int64(len(buf)-start) >= chunk {
			out = append(out, testbed.Chunk{Stream: "stdout", Data: buf[start:len(buf):len(buf)]})
			start = len(buf)
		}
	}
	if start < len(buf) {
		out = append(out, testbed.Chunk{Stream: "stdout", Data: buf[start:]})
	}
	return out
}

// firstWrite waits until the container's first run wrote something and returns when it saw it.
func firstWrite(rt *testbed.Runtime, ns, pod string) time.Time {
	for len(rt.Written(ns, pod, "main", 0)) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	return time.Now()
}

// waitPod waits until the pod exists and runs, and returns it.
func waitPod(b *testing.B, s *stack.Rig, name string) *corev1.Pod {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var p corev1.Pod
		err := s.Env.Client.Get(b.Context(), client.ObjectKey{Namespace: s.NS, Name: name}, &p)
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return &p
		}
		if time.Now().After(deadline) {
			b.Fatalf("pod %s not running within 5 minutes (%v)", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawCopy is BenchmarkCaptureThroughput's baseline: a bare pod (no VcJob, so the archiver does not
// track it) on the same node writes out through rt, and a plain follow of its log (no timestamps)
// is piped into MinIO by PutObject, as the least a log shipper can do. It returns the time from
// the first write until MinIO holds every byte, and fails unless the copy is exact.
func rawCopy(b *testing.B, s *stack.Rig, rt *testbed.Runtime, out []testbed.Chunk, total int64) time.Duration {
	b.Helper()
	const name = "raw"
	rt.Run(b, s.NS, name, map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{out}, Every: time.Millisecond}})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.NS, Name: name},
		Spec: corev1.PodSpec{NodeName: testbed.Nodes[0], Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	if err := s.Env.Client.Create(b.Context(), pod); err != nil {
		b.Fatal(err)
	}
	defer s.Env.Client.Delete(context.Background(), pod) //nolint:errcheck // the namespace goes at the end anyway
	waitPod(b, s, name)
	first := make(chan time.Time, 1)
	go func() { first <- firstWrite(rt, s.NS, name) }()

	// A follow stream never ends by itself (KWOK cannot tell that the container stopped): it is
	// read up to the size of the output, or until a copy that lost bytes is given up.
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(s.Env.Config)
	if err != nil {
		b.Fatal(err)
	}
	rc, err := cs.CoreV1().Pods(s.NS).GetLogs(name, &corev1.PodLogOptions{Container: "main", Follow: true}).Stream(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	mc, err := testbed.MinIOInstance(b).Client()
	if err != nil {
		b.Fatal(err)
	}
	h := sha256.New()
	info, err := mc.PutObject(ctx, stack.ArgValue(s.Args, "--store-s3-bucket="), "baseline/raw.log",
		io.TeeReader(io.LimitReader(rc, total), h), -1, minio.PutObjectOptions{PartSize: 16 << 20})
	done := time.Now()
	want := sha256.Sum256(rt.Written(s.NS, name, "main", 0))
	if err != nil || info.Size != total || string(h.Sum(nil)) != string(want[:]) {
		b.Fatalf("the raw copy stored %d of %d bytes (%v), or not the bytes written: the node wrote faster than a follow "+
			"stream could read, and the kubelet's reader skips a rotated file it comes to late; lower JOBVAULT_BENCH_CAPTURE_CHUNK_BYTES",
			info.Size, total, err)
	}
	return done.Sub(<-first)
}

// BenchmarkCaptureThroughput has one container write as fast as the node runtime lets it (a
// large chunk at every look, 50 ms) through rotation at 10 MiB keeping 5 files: 512 MiB
// (JOBVAULT_BENCH_CAPTURE_BYTES) in chunks of 256 KiB, about 5 MiB/s
// (JOBVAULT_BENCH_CAPTURE_CHUNK_BYTES). A faster writer is no test of the archiver: a follow
// stream more than one file behind loses, silently, the rotated files the kubelet's reader (KWOK's)
// comes to late; at twice this rate on a loaded 2-core machine the raw copy kept up and the
// capture lost a quarter of the log.
//
// It reports the capture throughput (the bytes written over the time from the first write to the
// log's row recorded) against a raw pods/log follow of the same output into MinIO, measured first
// in the same run (rawCopy) with nothing else running: target ratio ≥ 0.8. The archive must be
// byte-exact and have no gap.
func BenchmarkCaptureThroughput(b *testing.B) {
	size := envInt(b, "JOBVAULT_BENCH_CAPTURE_BYTES", 512<<20)
	out := bulkOutput(size, envInt(b, "JOBVAULT_BENCH_CAPTURE_CHUNK_BYTES", 256<<10))
	total := int64(len(testbed.Bytes(out)))
	for range b.N {
		s := stack.NewRig(b, objstore.BackendS3)
		rt := s.Env.Runtime(b, testbed.RuntimeOptions{MaxSize: 10 << 20, MaxFiles: 5})
		baseline := rawCopy(b, s, rt, out, total)
		baseLoad := loadAvg()

		// The pod runs as long as the baseline's copy took, and 2 s more, so that the capture's
		// time is little of the pod's idling, and the node is done writing when it ends (its
		// runtime, seeing pods through a List every 50 ms, may write a chunk after KWOK marked the
		// container terminated, which no kubelet does). A pod that ends sooner wrote less, and
		// only what it wrote counts.
		job := testbed.Job(s.NS, "bulk").Task("w", 1, []string{"main"}, testbed.RunsFor((baseline + 2*time.Second).String())).Obj()
		name := testbed.PodName(job.Name, "w", 0)
		rt.Run(b, s.NS, name, map[string]testbed.Output{"main": {Runs: [][]testbed.Chunk{out}, Every: time.Millisecond}})
		if err := s.Env.Client.Create(b.Context(), job); err != nil {
			b.Fatal(err)
		}
		pod := waitPod(b, s, name)
		arch0 := sampleProc(b, s.Proc.PID())
		first := firstWrite(rt, s.NS, name)
		var (
			row                  record.LogObject
			terminated, recorded time.Time
		)
		for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if terminated.IsZero() {
				var p corev1.Pod
				if err := s.Env.Client.Get(b.Context(), client.ObjectKeyFromObject(pod), &p); err == nil && allTerminated(&p) {
					terminated = time.Now()
				}
			}
			if logs, err := s.Records.PodLogObjects(b.Context(), string(pod.UID)); err == nil && len(logs) == 1 {
				row, recorded = logs[0], time.Now()
				if terminated.IsZero() {
					terminated = recorded // it terminated since the last look
				}
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("no log recorded for %s within 10 minutes; archiver log %s", name, s.Proc.LogPath)
			}
		}
		captured := recorded.Sub(first)
		arch := sampleProc(b, s.Proc.PID())
		wrote := rt.Written(s.NS, name, "main", 0)
		if int64(len(wrote)) < total {
			b.Logf("the node wrote %d of %d bytes before the pod ended, the last perhaps after", len(wrote), total)
		}
		s.CheckLog(b, row, wrote)
		j := s.WaitArchived(b, job, 5*time.Minute)
		if gaps, err := s.Records.Gaps(b.Context(), string(j.UID)); err != nil || len(gaps) > 0 {
			b.Errorf("gaps %+v (%v), want none", gaps, err)
		}

		capMiB, baseMiB := mib(int64(len(wrote)))/captured.Seconds(), mib(total)/baseline.Seconds()
		b.ReportMetric(capMiB, "capture-MiB/s")
		b.ReportMetric(baseMiB, "baseline-MiB/s")
		b.ReportMetric(capMiB/baseMiB, "throughput-ratio")
		b.ReportMetric(cores(arch0, arch), "archiver-cores")
		b.ReportMetric(mib(arch.hwm), "archiver-peak-RSS-MiB")
		b.Logf("capture: %.0f MiB in %.1fs from the first write to the row (%.1f MiB/s; the container ran %.1fs from its first write, the row %.1fs after it terminated; stored %.0f MiB gzip); "+
			"raw follow into MinIO: %.0f MiB in %.1fs (%.1f MiB/s); ratio %.2f (target ≥ %.1f); archiver %.2f cores, peak RSS %.1f MiB; load average %s (%s after the raw copy)",
			mib(int64(len(wrote))), captured.Seconds(), capMiB, terminated.Sub(first).Seconds(), recorded.Sub(terminated).Seconds(), mib(row.StoredBytes),
			mib(total), baseline.Seconds(), baseMiB, capMiB/baseMiB, throughputTarget, cores(arch0, arch), mib(arch.hwm), loadAvg(), baseLoad)
	}
}

// allTerminated reports whether every container of the pod has terminated.
func allTerminated(p *corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Terminated == nil {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// releases records, through watches, when each pod was first seen with every container
// terminated, and when its finalizer and its job's were first seen released.
type releases struct {
	mu                       sync.Mutex
	terminated, podReleased  map[types.UID]time.Time
	jobOf                    map[types.UID]types.UID
	jobTerminal, jobReleased map[types.UID]time.Time
}

// watchReleases starts watching the rig's pods and jobs until the benchmark ends.
func watchReleases(b *testing.B, s *stack.Rig) *releases {
	b.Helper()
	r := &releases{terminated: map[types.UID]time.Time{}, podReleased: map[types.UID]time.Time{},
		jobOf: map[types.UID]types.UID{}, jobTerminal: map[types.UID]time.Time{}, jobReleased: map[types.UID]time.Time{}}
	c, err := cache.New(s.Env.Config, cache.Options{Scheme: s.Env.Scheme, DefaultNamespaces: map[string]cache.Config{s.NS: {}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	for obj, seen := range map[client.Object]func(any){&corev1.Pod{}: r.pod, &batchv1alpha1.Job{}: r.job} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
			b.Fatal(err)
		}
	}
	go c.Start(ctx) //nolint:errcheck // ends with the benchmark
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the watches did not sync")
	}
	return r
}

func (r *releases) pod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if ref := metav1.GetControllerOf(p); ref != nil {
		r.jobOf[p.UID] = ref.UID
	}
	if _, ok := r.terminated[p.UID]; !ok && allTerminated(p) {
		r.terminated[p.UID] = now
	}
	if _, ok := r.podReleased[p.UID]; !ok && !r.terminated[p.UID].IsZero() && !controllerutil.ContainsFinalizer(p, tracking.PodFinalizer) {
		r.podReleased[p.UID] = now
	}
}

func (r *releases) job(obj any) {
	j, ok := obj.(*batchv1alpha1.Job)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.jobTerminal[j.UID]; !ok && tracking.IsTerminal(j.Status.State.Phase) {
		r.jobTerminal[j.UID] = now
	}
	if _, ok := r.jobReleased[j.UID]; !ok && j.Annotations[tracking.ArchivedAtAnnotation] != "" && !controllerutil.ContainsFinalizer(j, tracking.JobFinalizer) {
		r.jobReleased[j.UID] = now
	}
}

// latencies are, for every pod seen terminated, the time from then to its release and to its
// job's, and for every job, from its terminal phase to its release; complete once every pod and
// job was seen released.
func (r *releases) latencies() (pod, job, phase []time.Duration, first, last time.Time, complete bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	complete = len(r.terminated) > 0
	for uid, t := range r.terminated {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
		pr, ok1 := r.podReleased[uid]
		jr, ok2 := r.jobReleased[r.jobOf[uid]]
		if !ok1 || !ok2 {
			complete = false
			continue
		}
		pod, job = append(pod, pr.Sub(t)), append(job, jr.Sub(t))
	}
	for uid, t := range r.jobReleased {
		if p, ok := r.jobTerminal[uid]; ok {
			phase = append(phase, t.Sub(p))
		}
	}
	slices.Sort(pod)
	slices.Sort(job)
	slices.Sort(phase)
	return pod, job, phase, first, last, complete
}

// BenchmarkReleaseLatency has 200 pods, each the one pod of its job, followed live and ending at
// the same instant, and reports the p50 and p99 of the time from each pod's last container seen
// terminated (through a watch: the status's finishedAt has whole seconds) to the release of the
// pod's finalizer, and to the release of its job's (target p99 ≤ 5 s).
func BenchmarkReleaseLatency(b *testing.B) {
	const want = 200
	for range b.N {
		s := stack.NewRig(b, objstore.BackendS3)
		n := followable(b, want)
		rt := s.Env.Runtime(b, testbed.RuntimeOptions{})
		seen := watchReleases(b, s)
		// KWOK's completion delay may be a time as well as a duration: every pod completes at
		// end, however long the pods took to start, once all are running and followed.
		lead := 30*time.Second + time.Duration(n)*300*time.Millisecond
		end := time.Now().Add(lead)
		// Each container writes for 10 s from its start, and stops well before it ends: the node
		// runtime, looking at pods through a List every 50 ms, can write a last line after KWOK
		// marked the container terminated, which no kubelet does.
		jobs, pods := createJobs(b, s, rt, "release", n, 1, func(pod string) testbed.Output {
			return testbed.Output{Runs: [][]testbed.Chunk{smallLines(pod, 50)}, Every: 200 * time.Millisecond}
		}, testbed.RunsFor(end.UTC().Format(time.RFC3339Nano)))
		stack.WaitPodsRunning(b, s.Env, n, lead, client.InNamespace(s.NS))
		if left := time.Until(end); left < 15*time.Second {
			b.Logf("the pods ran only %s before they end: some may still write as they end", left.Round(time.Second))
		}
		for logStreams(b, s.Env) < n && time.Until(end) > 5*time.Second {
			time.Sleep(time.Second)
		}
		if streams := logStreams(b, s.Env); streams < n {
			b.Logf("%d of %d pods followed as they end", streams, n)
		}
		var (
			podLat, jobLat, phaseLat []time.Duration
			first, last              time.Time
			complete                 bool
		)
		for deadline := end.Add(10 * time.Minute); !complete; time.Sleep(time.Second) {
			if time.Now().After(deadline) {
				b.Fatalf("%d pods and %d jobs of %d seen released 10 minutes after they ended; archiver log %s", len(podLat), len(jobLat), n, s.Proc.LogPath)
			}
			podLat, jobLat, phaseLat, first, last, complete = seen.latencies()
			complete = complete && len(podLat) == n
		}
		checkArchived(b, s, rt, jobs, n, pods)

		p50, p99 := quantile(podLat, 0.50), quantile(podLat, 0.99)
		j50, j99 := quantile(jobLat, 0.50), quantile(jobLat, 0.99)
		ph50, ph99 := quantile(phaseLat, 0.50), quantile(phaseLat, 0.99)
		b.ReportMetric(float64(n), "pods")
		b.ReportMetric(p50.Seconds(), "p50-pod-release-s")
		b.ReportMetric(p99.Seconds(), "p99-pod-release-s")
		b.ReportMetric(j50.Seconds(), "p50-job-release-s")
		b.ReportMetric(j99.Seconds(), "p99-job-release-s")
		b.ReportMetric(ph99.Seconds(), "p99-phase-to-job-release-s")
		b.Logf("%d pods ending within %s of each other: last container terminated → pod released p50 %s, p99 %s; → job released p50 %s, p99 %s (target p99 ≤ %s); "+
			"the job's terminal phase (Volcano's) → job released p50 %s, p99 %s; load average %s",
			n, last.Sub(first).Round(time.Millisecond), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
			j50.Round(time.Millisecond), j99.Round(time.Millisecond), releaseP99Target, ph50.Round(time.Millisecond), ph99.Round(time.Millisecond), loadAvg())
	}
}

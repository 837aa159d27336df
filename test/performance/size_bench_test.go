package performance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archiver"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
	dto "github.com/prometheus/client_model/go"
)

// Targets of one archiver holding 10,000 live VcJobs and 100,000 tracked pods (targets.yaml).
var (
	sizeBacklogTarget = targetDuration("sizeBacklog")
	sizeRSSTarget     = targetBytes("sizeRSS")
)

// BenchmarkSize loads the testbed with live VcJobs and their pods, then measures what one
// archiver costs to hold them: the in-process cache's heap with the archiver's transforms
// (archiver.CacheOptions) against the same cache with managedFields stripped only (what it was
// before), then the real archiver binary: from its start until the start-up backlog is cleared
// (every job and pod reconciled, the work queues empty), its RSS in bytes per pod, and its CPU at
// idle afterwards; then the same start again, every row recorded (a restart or upgrade). The
// first start is measured twice, each on a fresh database: without a memory limit, and as in a
// container limited to JOBVAULT_BENCH_SIZE_LIMIT_MIB (1024: GOMEMLIMIT at 90% of it, which the
// archiver sets itself from its cgroup's limit); the rest runs with that limit.
// JOBVAULT_BENCH_SIZE_HEAP_PROFILE=FILE saves the archiver's heap profile once its first backlog
// is cleared. JOBVAULT_BENCH_SIZE_JOBS and _PODS set the counts (default 2,000 and 20,000;
// the are 10,000 and 100,000), _IDLE_SECONDS the idle window (30).
//
// The jobs and pods are created directly, as Volcano would (labels, annotations, a controlling
// VcJob owner, the pod finalizer the webhook adds): Volcano takes minutes per thousand pods on 2
// cores. The jobs are in a queue that does not exist (absentQueue), so Volcano creates no
// PodGroup or pod for them; the pods name no scheduler that runs, so they stay Pending, their
// containers never started: a running pod would have the archiver follow its log, and this
// machine's nodes can follow about a hundred (see Follow1000). Pending pods carry no container
// statuses or conditions: a running pod holds about 1 KiB more, most of which the transform drops.
func BenchmarkSize(b *testing.B) {
	nJobs := int(envInt(b, "JOBVAULT_BENCH_SIZE_JOBS", 2000))
	nPods := int(envInt(b, "JOBVAULT_BENCH_SIZE_PODS", 20000))
	idle := time.Duration(envInt(b, "JOBVAULT_BENCH_SIZE_IDLE_SECONDS", 30)) * time.Second
	limitMiB := envInt(b, "JOBVAULT_BENCH_SIZE_LIMIT_MIB", 1024)
	perJob := (nPods + nJobs - 1) / nJobs
	for range b.N {
		env := testbed.Cluster(b)
		ns := env.NamespaceWithoutVolcanoAdmission(b)
		c := stack.Unthrottled(b, env, env.Config)
		apiPID, etcdPID := env.APIServerPID(b), childPID(b, "etcd")
		api0, etcd0 := sampleProc(b, apiPID), sampleProc(b, etcdPID)

		t0 := time.Now()
		jobs := createSizeJobs(b, c, ns, nJobs)
		var podBytes int
		nPods, podBytes = createSizePods(b, c, ns, jobs, nPods)
		created := time.Since(t0)
		api1, etcd1 := sampleProc(b, apiPID), sampleProc(b, etcdPID)
		b.Logf("created %d VcJobs and %d pods in %s (%.0f objects/s); a pod as served is %d bytes of JSON; kube-apiserver RSS %.0f → %.0f MiB, etcd %.0f → %.0f MiB",
			nJobs, nPods, created.Round(time.Second), float64(nJobs+nPods)/created.Seconds(), podBytes, mib(api0.rss), mib(api1.rss), mib(etcd0.rss), mib(etcd1.rss))

		// The cache alone, in this process, with and without the archiver's transforms.
		opts := archiver.DefaultOptions()
		opts.Namespaces = []string{ns}
		cut, err := archiver.CacheOptions(opts)
		if err != nil {
			b.Fatal(err)
		}
		whole, _ := archiver.CacheOptions(opts)
		for k, v := range whole.ByObject {
			v.Transform = nil // managedFields stripped only (DefaultTransform), as before issue 13
			whole.ByObject[k] = v
		}
		whole.NewInformer = nil // and client-go's own lists: whole, from the watch cache
		unpaged, _ := archiver.CacheOptions(opts)
		unpaged.NewInformer = nil // cut down, but listed whole (before the informers listed in pages)
		wholeHeap, wholePeak, wholeSync := cacheHeap(b, env, whole, nPods)
		unpagedHeap, unpagedPeak, unpagedSync := cacheHeap(b, env, unpaged, nPods)
		cutHeap, cutPeak, cutSync := cacheHeap(b, env, cut, nPods)

		// The archiver binary, from its start to an empty backlog: first without any memory limit,
		// then on a fresh database as it runs in a container limited to limitMiB (GOMEMLIMIT at
		// 90% of it, which it sets itself from its cgroup's limit).
		testbed.GoBuild(b, "./archiver") // built before the clock starts
		a := stack.NewArchiver(b, env, testbed.Postgres(b), stack.Options{FSRoot: b.TempDir(), Namespaces: []string{ns}})
		ready, backlog := startToBacklog(b, a, ns, nJobs, nPods)
		pNone := sampleProc(b, a.Proc.PID())
		a.Proc.Stop()
		b.Logf("archiver without a memory limit: ready in %s, backlog cleared %s after start (target ≤ %s): %s; RSS %.0f MiB, peak %.0f MiB (target ≤ 1 GiB: %s)",
			ready.Round(time.Millisecond), backlog.Round(time.Millisecond), sizeBacklogTarget, verdict(backlog <= sizeBacklogTarget),
			mib(pNone.rss), mib(pNone.hwm), verdict(pNone.hwm <= sizeRSSTarget))

		pprofAddr := "127.0.0.1:" + strconv.Itoa(testbed.FreePort(b))
		a = stack.NewArchiver(b, env, testbed.Postgres(b), stack.Options{FSRoot: b.TempDir(), Namespaces: []string{ns},
			Flags: []string{"--pprof-bind-address=" + pprofAddr}})
		a.Environ = append(a.Environ, fmt.Sprintf("GOMEMLIMIT=%dMiB", limitMiB*9/10))
		ready, backlog = startToBacklog(b, a, ns, nJobs, nPods)
		checkSizeRecorded(b, a, ns, jobs[:nPods/perJob])
		if path := os.Getenv("JOBVAULT_BENCH_SIZE_HEAP_PROFILE"); path != "" {
			if err := fetch("http://"+pprofAddr+"/debug/pprof/heap", path); err != nil {
				b.Errorf("heap profile: %v", err)
			}
		}

		m0, p0 := archiverMetrics(b, a), sampleProc(b, a.Proc.PID())
		time.Sleep(idle)
		m1, p1 := archiverMetrics(b, a), sampleProc(b, a.Proc.PID())
		idleReconciles := m1.reconciles("pod") + m1.reconciles("vcjob") - m0.reconciles("pod") - m0.reconciles("vcjob")

		perPod := func(n int64) float64 { return float64(n) / float64(nPods) }
		b.Logf("cache of %d jobs and %d pods, in-process heap held after sync / peak while syncing / sync time:", nJobs, nPods)
		for _, v := range []struct {
			name       string
			held, peak int64
			synced     time.Duration
		}{
			{"managedFields stripped only, listed whole (before issue 13)", wholeHeap, wholePeak, wholeSync},
			{"transformed, listed whole (before paged lists)", unpagedHeap, unpagedPeak, unpagedSync},
			{"transformed, listed in pages and cut down page by page (now)", cutHeap, cutPeak, cutSync},
		} {
			b.Logf("  %-62s %4.0f MiB (%5.0f B/pod) / %5.0f MiB (ratio to before issue 13: %.2f / %.2f) / %s",
				v.name, mib(v.held), perPod(v.held), mib(v.peak), float64(v.held)/float64(wholeHeap), float64(v.peak)/float64(wholePeak), v.synced.Round(time.Millisecond))
		}
		b.Logf("archiver in %d MiB (GOMEMLIMIT=%dMiB): ready in %s, backlog cleared %s after start (target ≤ %s): %s; RSS %.0f MiB, peak %.0f MiB = %.0f B/pod (target ≤ 1 GiB: %s); idle %s: %.4f cores, %v reconciles; load %s",
			limitMiB, limitMiB*9/10, ready.Round(time.Millisecond), backlog.Round(time.Millisecond), sizeBacklogTarget, verdict(backlog <= sizeBacklogTarget),
			mib(p1.rss), mib(p1.hwm), perPod(p1.hwm), verdict(p1.hwm <= sizeRSSTarget), idle, cores(p0, p1), idleReconciles, loadAvg())
		b.ReportMetric(float64(nPods), "pods")
		b.ReportMetric(float64(nJobs), "jobs")
		b.ReportMetric(backlog.Seconds(), "s-backlog")
		b.ReportMetric(mib(p1.hwm), "archiver-peak-RSS-MiB")
		b.ReportMetric(mib(pNone.hwm), "archiver-unlimited-peak-RSS-MiB")
		b.ReportMetric(perPod(p1.hwm), "archiver-B/pod")
		b.ReportMetric(cores(p0, p1), "idle-cores")
		b.ReportMetric(idleReconciles, "idle-reconciles")
		b.ReportMetric(perPod(cutHeap), "cache-B/pod")
		b.ReportMetric(mib(cutPeak), "cache-peak-MiB")
		b.ReportMetric(mib(unpagedPeak), "cache-unpaged-peak-MiB")
		b.ReportMetric(perPod(wholeHeap), "cache-whole-B/pod")
		b.ReportMetric(float64(cutHeap)/float64(wholeHeap), "cache-ratio")
		b.ReportMetric(mib(api1.rss), "apiserver-RSS-MiB")
		b.ReportMetric(mib(etcd1.rss), "etcd-RSS-MiB")

		// A restart: every job and pod is recorded already, and nothing changed meanwhile.
		a.Proc.Stop()
		ready, backlog = startToBacklog(b, a, ns, nJobs, nPods)
		p2 := sampleProc(b, a.Proc.PID())
		b.Logf("archiver in %d MiB restarted, every row recorded: ready in %s, backlog cleared %s after start (target ≤ %s): %s; RSS %.0f MiB, peak %.0f MiB = %.0f B/pod (target ≤ 1 GiB: %s); load %s",
			limitMiB, ready.Round(time.Millisecond), backlog.Round(time.Millisecond), sizeBacklogTarget, verdict(backlog <= sizeBacklogTarget),
			mib(p2.rss), mib(p2.hwm), perPod(p2.hwm), verdict(p2.hwm <= sizeRSSTarget), loadAvg())
		b.ReportMetric(backlog.Seconds(), "s-restart-backlog")
		b.ReportMetric(mib(p2.hwm), "archiver-restart-peak-RSS-MiB")
		a.Proc.Stop()
	}
}

// startToBacklog starts the archiver and waits until its start-up backlog is cleared: every job
// and pod reconciled and the work queues empty. It returns how long it took to be ready and to
// clear the backlog, from the start.
func startToBacklog(b *testing.B, a *stack.Archiver, ns string, nJobs, nPods int) (ready, backlog time.Duration) {
	b.Helper()
	// Volcano terminates a few of the jobs it sees with pods it did not create, and their pods are
	// deleted: count the pods there are.
	var pods metav1.PartialObjectMetadataList
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := a.Env.Client.List(b.Context(), &pods, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	if len(pods.Items) != nPods {
		b.Logf("%d pods of the %d created are left", len(pods.Items), nPods)
		nPods = len(pods.Items)
	}
	wait := sizeWait(nPods)
	a.ReadyTimeout = wait
	start := time.Now()
	a.Start(b)
	ready = time.Since(start)
	deadline, report := time.Now().Add(wait), time.Now().Add(30*time.Second)
	for {
		m := archiverMetrics(b, a)
		pods, jobs, depth := m.reconciles("pod"), m.reconciles("vcjob"), m.sum("workqueue_depth", nil)
		if pods >= float64(nPods) && jobs >= float64(nJobs) && depth == 0 {
			return ready, time.Since(start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("backlog not cleared %s after ready: %v pod and %v job reconciles, queue depth %v; archiver log %s",
				wait, pods, jobs, depth, a.Proc.LogPath)
		}
		if time.Now().After(report) {
			b.Logf("backlog %s after start: %v of %d pod and %v of %d job reconciles, queue depth %v; load %s",
				time.Since(start).Round(time.Second), pods, nPods, jobs, nJobs, depth, loadAvg())
			report = report.Add(30 * time.Second)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// sizeWait is how long the archiver may take to become ready, and then to clear its backlog,
// holding nPods: a minute for every 10,000 pods, at least ten. On 2 quiet cores 100,000 pods took
// 32 s for both; under load 20 to 35 the cache alone had not synced in a minute.
func sizeWait(nPods int) time.Duration {
	return max(10*time.Minute, time.Duration(nPods/10000)*time.Minute)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// childPID is the PID of this process's child named comm (a testbed part).
func childPID(b testing.TB, comm string) int {
	b.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.PPID == os.Getpid() && st.Comm == comm {
			return p.PID
		}
	}
	b.Fatalf("no %s among the children of process %d", comm, os.Getpid())
	return 0
}

// sizeTemplate is a pod spec as real training jobs carry: an image, a command, env (literal and
// from fields), resources, volumes, tolerations.
func sizeTemplate() corev1.PodSpec {
	var env []corev1.EnvVar
	for i := range 10 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", i), Value: fmt.Sprintf("value-%d-%s", i, strings.Repeat("v", 20))})
	}
	env = append(env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}
	return corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, SchedulerName: "jobvault-bench-none",
		Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/ml/trainer:2026.11.1",
			Command: []string{"python", "-m", "trainer.main"}, Args: []string{"--epochs=10", "--data=/data/train", "--checkpoint=/ckpt"},
			Env: env, Resources: corev1.ResourceRequirements{Requests: res, Limits: res},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "ckpt", MountPath: "/ckpt"}, {Name: "config", MountPath: "/etc/trainer"}}}},
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "ckpt", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "trainer"}}}}},
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
}

// parallel creates objects newObj(i) for i in [0, n) on 8 workers, retrying what the API server
// could not answer in time (etcd stalls on this shared disk), and stops at the first error that
// persists. It returns how many were created, a progress line every tenth, and that error.
func parallel(b testing.TB, c client.Client, what string, n int, newObj func(i int) client.Object) (int, error) {
	b.Helper()
	var (
		next, created atomic.Int64
		wg            sync.WaitGroup
		firstErr      atomic.Pointer[error]
	)
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n && firstErr.Load() == nil; i = int(next.Add(1) - 1) {
				obj := newObj(i)
				var err error
				for try := range 6 {
					if err = c.Create(context.Background(), obj); try > 0 && apierrors.IsAlreadyExists(err) {
						// An earlier try went through after all: read it back (the job's UID).
						err = c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
					}
					if err == nil {
						break
					}
					if !apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) && !apierrors.IsTooManyRequests(err) &&
						!apierrors.IsInternalError(err) && !strings.Contains(err.Error(), "timed out") {
						break
					}
					time.Sleep(time.Duration(1<<try) * time.Second)
				}
				if err != nil {
					err = fmt.Errorf("create %s %d: %w", what, i, err)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if k := created.Add(1); k%max(1, int64(n)/10) == 0 {
					b.Logf("%d of %d %s created in %s", k, n, what, time.Since(start).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		return int(created.Load()), *err
	}
	return int(created.Load()), nil
}

// createSizeJobs creates n VcJobs as the webhook leaves them (finalizer, tracked label,
// submitter), in absentQueue.
func createSizeJobs(b testing.TB, c client.Client, ns string, n int) []*batchv1alpha1.Job {
	b.Helper()
	jobs := make([]*batchv1alpha1.Job, n)
	if _, err := parallel(b, c, "VcJobs", n, func(i int) client.Object {
		job := &batchv1alpha1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("size-%05d", i), Namespace: ns,
				Labels:      map[string]string{tracking.TrackedLabel: tracking.TrackedValue, "team": "ml"},
				Annotations: map[string]string{tracking.SubmitterAnnotation: "alice@example.com", tracking.SubmitterGroupsAnnotation: `["ml"]`},
				Finalizers:  []string{tracking.JobFinalizer}},
			Spec: batchv1alpha1.JobSpec{Queue: absentQueue, SchedulerName: "volcano", MinAvailable: 1,
				Tasks: []batchv1alpha1.TaskSpec{{Name: "worker", Replicas: 10, Template: corev1.PodTemplateSpec{Spec: sizeTemplate()}}}},
		}
		jobs[i] = job
		return job
	}); err != nil {
		b.Fatal(err)
	}
	return jobs
}

// createSizePods creates n pods spread over the jobs as Volcano's job controller makes them, with
// the webhook's finalizer, and returns how many the testbed took (as far as it goes: a create that
// fails for good ends the loading, logged) and the JSON size of one as served.
func createSizePods(b testing.TB, c client.Client, ns string, jobs []*batchv1alpha1.Job, n int) (int, int) {
	b.Helper()
	perJob := (n + len(jobs) - 1) / len(jobs)
	created, err := parallel(b, c, "pods", n, func(i int) client.Object {
		job, idx := jobs[i/perJob], i%perJob
		pg := job.Name + "-" + string(job.UID)
		vol := map[string]string{batchv1alpha1.JobNameKey: job.Name, batchv1alpha1.JobNamespaceKey: ns, batchv1alpha1.QueueNameKey: absentQueue,
			batchv1alpha1.TaskSpecKey: "worker", batchv1alpha1.JobVersion: "0", batchv1alpha1.TaskIndex: fmt.Sprint(idx)}
		ann := map[string]string{"scheduling.k8s.io/group-name": pg, batchv1alpha1.PodTemplateKey: job.Name + "-worker"}
		for k, v := range vol {
			ann[k] = v
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: testbed.PodName(job.Name, "worker", idx), Namespace: ns, Labels: vol, Annotations: ann,
				Finalizers: []string{tracking.PodFinalizer},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: batchv1alpha1.SchemeGroupVersion.String(), Kind: "Job", Name: job.Name, UID: job.UID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: sizeTemplate(),
		}
		pod.Spec.Hostname, pod.Spec.Subdomain = pod.Name, job.Name
		return pod
	})
	if err != nil {
		b.Logf("the testbed took %d of %d pods, then: %v", created, n, err)
	}
	var pod corev1.Pod
	if err := c.Get(b.Context(), client.ObjectKey{Namespace: ns, Name: testbed.PodName(jobs[0].Name, "worker", 0)}, &pod); err != nil {
		b.Fatal(err)
	}
	raw, _ := json.Marshal(&pod)
	return created, len(raw)
}

// cacheHeap starts a controller-runtime cache of pods and VcJobs with opts, waits for it to sync,
// and returns the heap it holds (after a GC, against before it started), the most heap in use
// while it synced (sampled every 20 ms, against before), and how long the sync took.
func cacheHeap(b testing.TB, env *testbed.Env, opts cache.Options, wantPods int) (held, peak int64, synced time.Duration) {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	opts.Scheme = env.Scheme
	ctx, cancel := context.WithCancel(b.Context())
	c, err := cache.New(env.Config, opts)
	if err != nil {
		b.Fatal(err)
	}
	var top atomic.Uint64
	sampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for tick := time.NewTicker(20 * time.Millisecond); ; {
			runtime.ReadMemStats(&m)
			top.Store(max(top.Load(), m.HeapInuse))
			select {
			case <-sampling:
				tick.Stop()
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	for _, obj := range []client.Object{&corev1.Pod{}, &batchv1alpha1.Job{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			b.Fatal(err)
		}
	}
	stopped := make(chan struct{})
	go func() { _ = c.Start(ctx); close(stopped) }()
	// The next measurement starts from a heap without this cache.
	defer func() { cancel(); <-stopped; time.Sleep(time.Second); runtime.GC() }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("cache did not sync")
	}
	synced = time.Since(start)
	close(sampling)
	<-sampled
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil || len(pods.Items) < wantPods {
		b.Fatalf("cache holds %d pods (err %v), want %d", len(pods.Items), err, wantPods)
	}
	pods = corev1.PodList{}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), int64(top.Load()) - int64(before.HeapInuse), synced
}

// metrics is one scrape of an archiver's /metrics.
type metrics map[string]*dto.MetricFamily

func archiverMetrics(b testing.TB, a *stack.Archiver) metrics {
	b.Helper()
	return parseMetrics(b, "archiver", a.Metrics(b))
}

// parseMetrics parses one scrape of what's /metrics (the archiver's, the agent's).
func parseMetrics(b testing.TB, what, exposition string) metrics {
	b.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		b.Fatalf("parse %s metrics: %v", what, err)
	}
	return fams
}

// sum adds the values of a counter's or gauge's series whose labels include match.
func (m metrics) sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, s := range m[name].GetMetric() {
		l, ok := metricLabels(s), true
		for k, v := range match {
			ok = ok && l[k] == v
		}
		if ok {
			total += s.GetCounter().GetValue() + s.GetGauge().GetValue()
		}
	}
	return total
}

// reconciles is how many reconciles the controller ran, whatever their result.
func (m metrics) reconciles(controller string) float64 {
	return m.sum("controller_runtime_reconcile_total", map[string]string{"controller": controller})
}

// checkSizeRecorded: a sample of the jobs has its row, and a row for each of its pods there is
// (the pods of the few jobs Volcano terminated are deleted, and released by the first archiver
// before the second one starts).
func checkSizeRecorded(b testing.TB, a *stack.Archiver, ns string, jobs []*batchv1alpha1.Job) {
	b.Helper()
	records, err := db.Open(b.Context(), a.DSN, db.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer records.Close()
	for _, job := range sample(jobs, 20) {
		if _, err := records.Job(b.Context(), string(job.UID)); err != nil {
			b.Errorf("job %s: %v", job.Name, err)
		}
		var live metav1.PartialObjectMetadataList
		live.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := a.Env.Client.List(b.Context(), &live, client.InNamespace(ns), client.MatchingLabels{batchv1alpha1.JobNameKey: job.Name}); err != nil {
			b.Fatal(err)
		}
		pods, err := records.Pods(b.Context(), string(job.UID))
		if err != nil || len(pods) != len(live.Items) {
			b.Errorf("job %s: %d pod rows (err %v), want one for each of its %d pods", job.Name, len(pods), err, len(live.Items))
		}
	}
}

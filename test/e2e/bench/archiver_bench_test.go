package bench

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/tracking"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// writeBigCRILog writes a CRI log of about size bytes of log-like lines (a counter and a hex
// payload, so gzip has real work to do) and returns the sha256 and length of its content.
func writeBigCRILog(b testing.TB, path string, size int64) (string, int64) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	h := sha256.New()
	var n int64
	seed := sha256.Sum256([]byte("jobvault"))
	ts := time.Now().UTC().Format(time.RFC3339Nano)
	for i := 0; n < size; i++ {
		if i%64 == 0 {
			seed = sha256.Sum256(seed[:])
		}
		line := fmt.Sprintf("%08d level=info step=%d payload=%s%s", i, i%977, hex.EncodeToString(seed[:]), strings.Repeat("-", i%50))
		fmt.Fprintf(w, "%s stdout F %s\n", ts, line)
		io.WriteString(h, line+"\n")
		n += int64(len(line) + 1)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// BenchmarkArchiveLargeLog archives a 1 GiB log through the archiver binary and compares its
// throughput with a baseline measured in the same run: the raw pods/log stream copied straight
// into MinIO with no processing. It reports the ratio (target ≥ 0.8) and the archiver's peak RSS
// (target < 150 MiB).
func BenchmarkArchiveLargeLog(b *testing.B) {
	size := int64(1 << 30)
	if v := os.Getenv("JOBVAULT_BENCH_LOG_BYTES"); v != "" {
		size, _ = strconv.ParseInt(v, 10, 64)
	}
	for range b.N {
		s := stack.NewRig(b, objstore.BackendS3)
		job := testbed.Job(s.NS, "big").Task("worker", 1, []string{"main"}, testbed.RunsFor("3s")).Obj()
		pod := testbed.PodName(job.Name, "worker", 0)
		path := filepath.Join(b.TempDir(), "big.log")
		sum, n := writeBigCRILog(b, path, size)
		s.Env.SetPodLogFiles(b, s.NS, pod, map[string]string{"main": path})
		stack.CreateAs(b, s.Env, "bench", job)

		var p corev1.Pod
		for {
			if err := s.Env.Client.Get(b.Context(), client.ObjectKey{Namespace: s.NS, Name: pod}, &p); err == nil && p.Status.Phase == corev1.PodSucceeded {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		t0 := time.Now()
		var row record.LogObject
		for {
			logs, err := s.Records.PodLogObjects(b.Context(), string(p.UID))
			if err == nil && len(logs) == 1 {
				row = logs[0]
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		archived := time.Since(t0)
		rss := peakRSS(b, s.Proc.PID())
		if row.SHA256 != sum || row.Bytes != n {
			b.Fatalf("archived %d bytes sha256 %s, want %d bytes %s", row.Bytes, row.SHA256, n, sum)
		}

		// Baseline, same log, same run: pods/log straight into MinIO.
		cs, err := kubernetes.NewForConfig(s.Env.Config)
		if err != nil {
			b.Fatal(err)
		}
		m := testbed.MinIOInstance(b)
		mc, err := m.Client()
		if err != nil {
			b.Fatal(err)
		}
		bucket := stack.ArgValue(s.Args, "--store-s3-bucket=")
		t1 := time.Now()
		rc, err := cs.CoreV1().Pods(s.NS).GetLogs(pod, &corev1.PodLogOptions{Container: "main"}).Stream(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		info, err := mc.PutObject(b.Context(), bucket, "baseline.log", rc, -1, minio.PutObjectOptions{PartSize: 16 << 20})
		rc.Close()
		if err != nil || info.Size != n {
			b.Fatalf("baseline upload: %d bytes, %v", info.Size, err)
		}
		baseline := time.Since(t1)

		mib := float64(n) / (1 << 20)
		b.ReportMetric(mib/archived.Seconds(), "archiver-MiB/s")
		b.ReportMetric(mib/baseline.Seconds(), "baseline-MiB/s")
		b.ReportMetric(baseline.Seconds()/archived.Seconds(), "throughput-ratio")
		b.ReportMetric(float64(rss)/(1<<20), "archiver-peak-RSS-MiB")
		b.Logf("%.0f MiB: archiver %.1fs (%.1f MiB/s, stored %d bytes gzip), baseline %.1fs (%.1f MiB/s), ratio %.2f (target ≥ 0.8); archiver peak RSS %.1f MiB (target < 150)",
			mib, archived.Seconds(), mib/archived.Seconds(), row.StoredBytes, baseline.Seconds(), mib/baseline.Seconds(),
			baseline.Seconds()/archived.Seconds(), float64(rss)/(1<<20))
	}
}

// peakRSS reads the peak resident set size (VmHWM) of a process, in bytes.
func peakRSS(b testing.TB, pid int) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// BenchmarkReleaseLatency finishes 200 small jobs at once and reports the p50 and p99 of the time
// from each job's terminal phase to the release of its finalizer, as observed through the API.
func BenchmarkReleaseLatency(b *testing.B) {
	const jobs = 200
	for range b.N {
		s := stack.NewRig(b, objstore.BackendS3)
		for i := range jobs {
			job := testbed.Job(s.NS, fmt.Sprintf("small-%03d", i)).Task("t", 1, []string{"main"}, testbed.RunsFor("15s")).Obj()
			s.Env.SetPodLogs(b, s.NS, testbed.PodName(job.Name, "t", 0), map[string]testbed.ContainerLogs{"main": {Current: stack.SampleChunks(job.Name)}})
			if err := s.Env.Client.Create(b.Context(), job); err != nil {
				b.Fatal(err)
			}
		}
		terminal, released := map[string]time.Time{}, map[string]time.Time{}
		deadline := time.Now().Add(10 * time.Minute)
		for len(released) < jobs {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d jobs released after 10 minutes; archiver log %s", len(released), jobs, s.Proc.LogPath)
			}
			var list batchv1alpha1.JobList
			if err := s.Env.Client.List(b.Context(), &list, client.InNamespace(s.NS)); err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			for _, j := range list.Items {
				if _, ok := terminal[j.Name]; !ok && tracking.IsTerminal(j.Status.State.Phase) {
					terminal[j.Name] = now
				}
				if _, ok := released[j.Name]; !ok && j.Annotations[tracking.ArchivedAtAnnotation] != "" && !controllerutil.ContainsFinalizer(&j, tracking.JobFinalizer) {
					released[j.Name] = now
					if _, ok := terminal[j.Name]; !ok {
						terminal[j.Name] = now
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		var lat []time.Duration
		for name, r := range released {
			lat = append(lat, r.Sub(terminal[name]))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		b.ReportMetric(p50.Seconds(), "p50-release-s")
		b.ReportMetric(p99.Seconds(), "p99-release-s")
		b.Logf("%d jobs: terminal phase → finalizer released p50 %s, p99 %s (observed by polling every 100ms)", jobs, p50, p99)
	}
}

package performance

// The archive API (issue 27) at size: a 1 GiB log streamed through the kube-apiserver's
// aggregator against reading the same object straight from MinIO, with the API server's RSS; and
// pages of 500 over the audit-scale database (test/dbgen, 1M jobs) through the API, with field
// selectors.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/jobvault/jobvault/pkg/apiserver/v1alpha1"
	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/dbgen"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// startArchiveAPI runs the archive API server (stack.StartAPI) on the database dsn and the
// testbed's MinIO, with no archiver: the benchmarks write the records and objects themselves. It
// returns the API, the store it reads and an admin REST client of the kube-apiserver.
func startArchiveAPI(b *testing.B, env *testbed.Env, dsn string) (*stack.API, objstore.Store, rest.Interface) {
	b.Helper()
	a := stack.NewArchiver(b, env, dsn, stack.Options{Backend: objstore.BackendS3}) // prepared, never started
	api := stack.StartAPI(b, &stack.Rig{Archiver: a})
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit: the pages are timed
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return api, a.Store(b), cs.RESTClient()
}

// archivePath is the path of an archive.jobvault.io/v1alpha1 resource through the kube-apiserver.
func archivePath(path ...string) string {
	return "/apis/" + v1alpha1.GroupName + "/" + v1alpha1.SchemeGroupVersion.Version + "/" + strings.Join(path, "/")
}

// logLines is an endless log of plausible training output (a timestamp, a step, metrics, a random
// token), n bytes of it: as compressible as a real log, not as a run of one byte.
type logLines struct {
	left int64
	r    *rand.Rand
	buf  []byte
	step int64
	at   time.Time
}

func newLogLines(n int64) *logLines {
	return &logLines{left: n, r: rand.New(rand.NewPCG(27, 1)), at: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
}

func (l *logLines) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && l.left > 0 {
		if len(l.buf) == 0 {
			l.step++
			l.at = l.at.Add(time.Duration(l.r.IntN(2000)) * time.Millisecond)
			l.buf = fmt.Appendf(l.buf[:0], "%s INFO step=%d loss=%.5f lr=%.2e grad_norm=%.3f tokens/s=%d batch=%016x\n",
				l.at.Format(time.RFC3339Nano), l.step, 4*l.r.Float64(), 3e-4*l.r.Float64(), 10*l.r.Float64(), 20000+l.r.IntN(5000), l.r.Uint64())
		}
		k := copy(p[n:], l.buf[:min(int64(len(l.buf)), l.left)])
		l.buf = l.buf[k:]
		n += k
		l.left -= int64(k)
	}
	return n, nil
}

// archiveBigLog records one archived job of namespace ns with one pod whose container "main" has
// a stored log of size bytes, uploaded to store as the archiver uploads (archive.Upload: gzip),
// and returns the job's name and the stored object.
func archiveBigLog(b *testing.B, records *db.DB, store objstore.Store, ns string, size int64) (string, archive.Stored) {
	b.Helper()
	ctx := b.Context()
	created := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	done := created.Add(30 * time.Minute)
	job := record.Job{UID: "00000000-0000-4000-8000-000000000027", Namespace: ns, Name: "big-log", Queue: "default",
		Submitter: "alice", CreatedAt: created, FinishedAt: &done, Phase: "Completed",
		Spec: []byte(`{"tasks": [{"name": "worker", "replicas": 1}]}`), Status: []byte(`{"state": {"phase": "Completed"}}`)}
	if err := records.UpsertJob(ctx, job); err != nil {
		b.Fatal(err)
	}
	pod := record.Pod{UID: job.UID + "-pod0", JobUID: job.UID, Namespace: ns, Name: "big-log-worker-0", Task: "worker",
		Node: "node-1", Phase: "Succeeded", CreatedAt: created, StartedAt: &created, FinishedAt: &done}
	if err := records.UpsertPod(ctx, pod); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	key := "archive/bench/" + ns + "/" + job.UID + "/main.log.gz"
	st, err := archive.Upload(ctx, store, key, newLogLines(size))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("uploaded a %.0f MiB log as %.0f MiB of gzip in %s", mib(st.Bytes), mib(st.StoredBytes), time.Since(t0).Round(time.Millisecond))
	if err := records.PutLogObject(ctx, record.LogObject{PodUID: pod.UID, Container: "main", ContainerType: record.ContainerRegular,
		Instance: record.InstanceCurrent, ObjectKey: key, Bytes: st.Bytes, StoredBytes: st.StoredBytes, SHA256: st.SHA256, State: record.LogStored}); err != nil {
		b.Fatal(err)
	}
	if err := records.MarkPodArchived(ctx, pod.UID, done, ""); err != nil {
		b.Fatal(err)
	}
	if err := records.MarkJobArchived(ctx, job.UID, store.URL("archive/bench/"+ns+"/"+job.UID+"/"), done.Add(time.Second), ""); err != nil {
		b.Fatal(err)
	}
	return job.Name, st
}

// byteCounter counts what is written to it.
type byteCounter struct{ n int64 }

func (c *byteCounter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// rssPeak samples a process's VmRSS every 20 ms until stopped, and returns the highest. A failed
// read is skipped: this goroutine may not fail the benchmark.
func rssPeak(pid int) (stop func() int64) {
	var (
		peak int64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if p, err := procfs.NewProc(pid); err == nil {
				if st, err := p.NewStatus(); err == nil {
					peak = max(peak, int64(st.VmRSS))
				}
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait() // peak is read after the sampler ended
		return peak
	}
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

// BenchmarkArchiveAPILog: a log of JOBVAULT_BENCH_API_LOG_MIB (1024) MiB, stored gzip'd in MinIO
// as an archived job's, read JOBVAULT_BENCH_API_LOG_ROUNDS (3) times each way, alternating: through
// the API as kubectl jobvault logs reads it (client-go's raw REST, whose transport asks for gzip;
// the API server decompresses the log, as it does every log of more than one gzip member, and the
// kube-apiserver's aggregator proxies the plain bytes) and straight from MinIO, decompressed here
// (inspect.Cat, what `archiver logs` does). It first checks that the API sends the plain log. It
// prints the log's MB/s each way, their ratio against apiLogThroughputRatio, every process's CPU
// per MB on each arm (the API server, the kube-apiserver, MinIO, this client) and the cores they
// kept busy, and the API server's peak RSS while it streams over its RSS before the first read,
// against apiLogRSSGrowth.
func BenchmarkArchiveAPILog(b *testing.B) {
	size := envInt(b, "JOBVAULT_BENCH_API_LOG_MIB", 1024) << 20
	rounds := int(envInt(b, "JOBVAULT_BENCH_API_LOG_ROUNDS", 3))
	ratioTarget, rssTarget := targetNumber("apiLogThroughputRatio"), targetBytes("apiLogRSSGrowth")
	for range b.N {
		env := testbed.Cluster(b)
		ns := env.Namespace(b)
		records, dsn := stack.OpenRecords(b)
		api, store, client := startArchiveAPI(b, env, dsn)
		name, st := archiveBigLog(b, records, store, ns, size)
		ctx := b.Context()
		logPath := archivePath("namespaces", ns, v1alpha1.Resource, name, v1alpha1.LogSubresource)
		checkEncoding(b, env.Config, logPath, st.Bytes)

		viaAPI := func() (int64, error) {
			rc, err := client.Get().AbsPath(logPath).Stream(ctx)
			if err != nil {
				return 0, err
			}
			defer rc.Close()
			return io.Copy(io.Discard, rc)
		}
		direct := func() (int64, error) {
			c := &byteCounter{}
			err := inspect.Cat(ctx, store, st.Key, c)
			return c.n, err
		}
		pids := armProcs{"apiserver": api.Proc.PID(), "kube-apiserver": env.APIServerPID(b),
			"minio": testbed.MinIOInstance(b).Proc.PID(), "client": os.Getpid()}
		before := sampleProc(b, api.Proc.PID())
		stopRSS := rssPeak(api.Proc.PID())
		var (
			took [2]time.Duration
			cpu  [2]map[string]float64 // CPU seconds by process, over each arm's reads
		)
		for r := range rounds {
			for arm, read := range []func() (int64, error){viaAPI, direct} {
				p0 := sampleArm(b, pids)
				t0 := time.Now()
				n, err := read()
				d := time.Since(t0)
				if err != nil || n != st.Bytes {
					b.Fatalf("round %d, %s: read %d bytes, %v; want the log's %d", r+1, []string{"API", "MinIO"}[arm], n, err, st.Bytes)
				}
				took[arm] += d
				cpu[arm] = addCPU(cpu[arm], p0, sampleArm(b, pids))
				b.Logf("round %d, %s: %.0f MB/s", r+1, []string{"through the API", "straight from MinIO"}[arm], mbps(n, d))
			}
		}
		peak := stopRSS()
		after := sampleProc(b, api.Proc.PID())
		total := st.Bytes * int64(rounds)
		apiRate, directRate := mbps(total, took[0]), mbps(total, took[1])
		ratio := apiRate / directRate
		verdict := func(ok bool) string {
			if ok {
				return "ok"
			}
			return "OVER TARGET"
		}
		growth := peak - before.rss
		b.Logf("log of %.0f MiB (%.0f MiB stored), %d rounds: through the API %.0f MB/s, straight from MinIO %.0f MB/s: ratio %.2f (target >= %.2f) %s",
			mib(st.Bytes), mib(st.StoredBytes), rounds, apiRate, directRate, ratio, ratioTarget, verdict(ratio >= ratioTarget))
		b.Logf("API server RSS: %.1f MiB before the reads, peak %.1f MiB while streaming (+%.1f MiB, target <= %.0f MiB) %s; VmHWM %.1f MiB",
			mib(before.rss), mib(peak), mib(growth), mib(rssTarget), verdict(growth <= rssTarget), mib(after.hwm))
		// Where each arm's time went: every process's CPU per MB of log, and the cores they used
		// together while the arm read (2 on this machine bound an arm that is CPU-bound).
		for arm, name := range []string{"through the API", "straight from MinIO"} {
			b.Logf("CPU %s: %s", name, cpuReport(cpu[arm], total, took[arm]))
		}
		b.ReportMetric(ratio, "api/direct")
		b.ReportMetric(apiRate, "api-MB/s")
		b.ReportMetric(mib(growth), "rss-growth-MiB")
	}
}

// armProcs names the processes an arm's read runs through, by their pids.
type armProcs map[string]int

func sampleArm(b *testing.B, pids armProcs) map[string]proc {
	b.Helper()
	out := make(map[string]proc, len(pids))
	for name, pid := range pids {
		out[name] = sampleProc(b, pid)
	}
	return out
}

// addCPU adds each process's CPU seconds from p0 to p1 to sum (allocated when nil).
func addCPU(sum map[string]float64, p0, p1 map[string]proc) map[string]float64 {
	if sum == nil {
		sum = map[string]float64{}
	}
	for name := range p1 {
		sum[name] += p1[name].cpu - p0[name].cpu
	}
	return sum
}

// cpuReport prints each process's CPU in ms per MB of log, their sum, and the cores the sum kept
// busy over the arm's time took.
func cpuReport(cpu map[string]float64, bytes int64, took time.Duration) string {
	mb := float64(bytes) / 1e6
	var (
		parts []string
		sum   float64
	)
	for _, name := range slices.Sorted(maps.Keys(cpu)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, 1000*cpu[name]/mb))
		sum += cpu[name]
	}
	return fmt.Sprintf("%s ms/MB; sum %.2f ms/MB, %.2f cores busy over %s", strings.Join(parts, ", "), 1000*sum/mb, sum/took.Seconds(), took.Round(time.Millisecond))
}

// checkEncoding reads the log at path once with Accept-Encoding gzip on a transport that does
// not decompress, and fails unless the API answers with the log's plain bytes, all of them: a log
// stored as more than one gzip member (every log over the capture's 32 KiB block) goes out
// decompressed, and the API arm measures that path.
func checkEncoding(b *testing.B, cfg *rest.Config, path string, plain int64) {
	b.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = true
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || n != plain {
		b.Fatalf("the log with gzip accepted: %s, Content-Encoding %q, %d bytes, %v; want 200, none, the log's %d bytes",
			resp.Status, resp.Header.Get("Content-Encoding"), n, err, plain)
	}
	b.Logf("the log with gzip accepted: Content-Encoding none, Content-Length %q", resp.Header.Get("Content-Length"))
}

// listCase is one list of BenchmarkArchiveAPIList: a namespace (empty: every one) and a field
// selector (empty: none).
type listCase struct {
	name, namespace, selector string
}

// BenchmarkArchiveAPIList: pages of 500 archived jobs through the API (limit and continue), over
// the audit-scale database (test/dbgen: JOBVAULT_BENCH_DB_JOBS, 1M; JOBVAULT_BENCH_DB_DSN reuses a
// loaded database, as for BenchmarkAuditDB), JOBVAULT_BENCH_API_PAGES (200) pages deep per list:
// every job, the biggest namespace, and field selectors (submitter, final phase, archive state, a
// time range). It prints p50 and p95 per page against apiListPageP95.
func BenchmarkArchiveAPIList(b *testing.B) {
	cfg, err := dbgen.ConfigFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	pages := int(envInt(b, "JOBVAULT_BENCH_API_PAGES", 200))
	target := targetDuration("apiListPageP95")
	const pageSize = 500
	for range b.N {
		ctx := b.Context()
		env := testbed.Cluster(b)
		dsn := os.Getenv("JOBVAULT_BENCH_DB_DSN")
		if dsn == "" {
			_, dsn = stack.OpenRecords(b)
		}
		sqlDB, err := sql.Open("postgres", dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer sqlDB.Close()
		st := loadOrCount(b, sqlDB, cfg)
		b.Logf("database: %s", st)
		_, _, client := startArchiveAPI(b, env, dsn)

		cases := listCases(b, sqlDB)
		b.Logf("pages of %d through the API, up to %d deep (p95 target %s):", pageSize, pages, target)
		for i, c := range cases {
			ds := listPages(ctx, b, client, c, pageSize, pages)
			l := latencies(slices.Clone(ds))
			ok := "ok"
			if l.p95 > target {
				ok = "OVER TARGET"
			}
			b.Logf("  %-60s %4d pages: p50 %9s p95 %9s max %9s, page 1 %9s  %s", c.name, len(ds), ms(l.p50), ms(l.p95), ms(l.max), ms(ds[0]), ok)
			b.ReportMetric(float64(l.p95.Microseconds())/1000, fmt.Sprintf("list%d-p95-ms", i+1))
		}
	}
}

// listCases are the lists timed: every job, the biggest namespace, and each field selector on a
// value the data holds (the busiest submitter, a phase, a state and the last 30 days).
func listCases(b *testing.B, sqlDB *sql.DB) []listCase {
	b.Helper()
	ctx := b.Context()
	var top, submitter string
	var newest time.Time
	if err := sqlDB.QueryRowContext(ctx, `SELECT namespace FROM jobs GROUP BY namespace ORDER BY count(*) DESC, namespace LIMIT 1`).Scan(&top); err != nil {
		b.Fatal(err)
	}
	if err := sqlDB.QueryRowContext(ctx, `SELECT submitter FROM jobs WHERE submitter IS NOT NULL GROUP BY submitter ORDER BY count(*) DESC, submitter LIMIT 1`).Scan(&submitter); err != nil {
		b.Fatal(err)
	}
	if err := sqlDB.QueryRowContext(ctx, `SELECT max(created_at) FROM jobs`).Scan(&newest); err != nil {
		b.Fatal(err)
	}
	from := newest.Add(-30 * 24 * time.Hour).UTC().Format(time.RFC3339)
	return []listCase{
		{name: "all namespaces", namespace: ""},
		{name: "namespace " + top, namespace: top},
		{name: "all namespaces, " + v1alpha1.FieldSubmitter + "=" + submitter, selector: v1alpha1.FieldSubmitter + "=" + submitter},
		{name: "namespace, " + v1alpha1.FieldSubmitter, namespace: top, selector: v1alpha1.FieldSubmitter + "=" + submitter},
		{name: "all namespaces, " + v1alpha1.FieldPhase + "=Failed", selector: v1alpha1.FieldPhase + "=Failed"},
		{name: "namespace, " + v1alpha1.FieldPhase + "=Failed", namespace: top, selector: v1alpha1.FieldPhase + "=Failed"},
		{name: "all namespaces, " + v1alpha1.FieldArchiveState + "=released", selector: v1alpha1.FieldArchiveState + "=released"},
		{name: "namespace, " + v1alpha1.FieldArchiveState + "=released", namespace: top, selector: v1alpha1.FieldArchiveState + "=released"},
		{name: "all namespaces, last 30 days", selector: v1alpha1.FieldCreatedFrom + "=" + from},
		{name: "namespace, Failed, last 30 days", namespace: top, selector: v1alpha1.FieldPhase + "=Failed," + v1alpha1.FieldCreatedFrom + "=" + from},
	}
}

// listPages pages through one list, timing each page from request to decoded list.
func listPages(ctx context.Context, b *testing.B, client rest.Interface, c listCase, size, pages int) []time.Duration {
	b.Helper()
	path := []string{v1alpha1.Resource}
	if c.namespace != "" {
		path = []string{"namespaces", c.namespace, v1alpha1.Resource}
	}
	var (
		ds   []time.Duration
		cont string
	)
	for p := range pages {
		req := client.Get().AbsPath(archivePath(path...)).Param("limit", strconv.Itoa(size))
		if c.selector != "" {
			req.Param("fieldSelector", c.selector)
		}
		if cont != "" {
			req.Param("continue", cont)
		}
		var list v1alpha1.ArchivedJobList
		t0 := time.Now()
		raw, err := req.DoRaw(ctx)
		if err == nil {
			err = json.Unmarshal(raw, &list)
		}
		ds = append(ds, time.Since(t0))
		if err != nil {
			b.Fatalf("%s, page %d: %v", c.name, p+1, err)
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	return ds
}

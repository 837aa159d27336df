package performance

// What the benchmarks measure, in one place: processes and the machine from /proc, the API
// server from its /metrics, latencies as quantiles.

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	"k8s.io/client-go/kubernetes"

	"github.com/jobvault/jobvault/test/testbed"
)

// quantile returns the q-quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// envInt reads an integer knob from the environment, def if unset.
func envInt(b testing.TB, name string, def int64) int64 {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// proc is a sample of one process: its CPU time so far (user+system, seconds) and memory.
type proc struct {
	at       time.Time
	cpu      float64
	rss, hwm int64 // VmRSS and VmHWM, bytes
}

func sampleProc(b testing.TB, pid int) proc {
	b.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		b.Fatal(err)
	}
	st, err := p.Stat()
	if err != nil {
		b.Fatalf("read /proc/%d/stat: %v", pid, err)
	}
	status, err := p.NewStatus()
	if err != nil {
		b.Fatalf("read /proc/%d/status: %v", pid, err)
	}
	return proc{at: time.Now(), cpu: st.CPUTime(), rss: int64(status.VmRSS), hwm: int64(status.VmHWM)}
}

// cores is the CPU the process used from p0 to p1, in cores.
func cores(p0, p1 proc) float64 { return (p1.cpu - p0.cpu) / p1.at.Sub(p0.at).Seconds() }

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// cpuTimes reads the machine's CPU time counters.
func cpuTimes(b testing.TB) procfs.CPUStat {
	b.Helper()
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		b.Fatal(err)
	}
	stat, err := fs.Stat()
	if err != nil {
		b.Fatal(err)
	}
	return stat.CPUTotal
}

func cpuTotal(s procfs.CPUStat) float64 {
	return s.User + s.Nice + s.System + s.Idle + s.Iowait + s.IRQ + s.SoftIRQ + s.Steal
}

// busy is the share of the machine's CPU in use from c0 to c1, in percent: other work shares it.
func busy(c0, c1 procfs.CPUStat) float64 {
	return 100 * (1 - (c1.Idle+c1.Iowait-c0.Idle-c0.Iowait)/(cpuTotal(c1)-cpuTotal(c0)))
}

// procCPU is every process's CPU time so far by PID, with its command name.
type procCPU map[int]commandCPU

// sampleAllProcs reads the CPU time of every process on the machine: the testbed's parts are
// separate processes (kube-apiserver, etcd, kwok, minio, postgres, vc-*), so their share of a run
// is known by name.
func sampleAllProcs(b testing.TB) procCPU {
	b.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		b.Fatal(err)
	}
	out := procCPU{}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil { // a process may end meanwhile
			out[p.PID] = commandCPU{st.Comm, st.CPUTime()}
		}
	}
	return out
}

// cpuByCommand is the CPU time each command used from p0 to p1, in seconds, largest first: a
// process started meanwhile counts from zero; one that ended is left out.
func cpuByCommand(p0, p1 procCPU) []commandCPU {
	by := map[string]float64{}
	for pid, p := range p1 {
		by[p.command] += p.seconds - p0[pid].seconds
	}
	var out []commandCPU
	for comm, cpu := range by {
		if cpu > 0 {
			out = append(out, commandCPU{comm, cpu})
		}
	}
	slices.SortFunc(out, func(a, b commandCPU) int { return cmp.Compare(b.seconds, a.seconds) })
	return out
}

// commandCPU is CPU time (user+system, seconds) used by a command's processes.
type commandCPU struct {
	command string
	seconds float64
}

// loadAvg is the machine's load average (1, 5 and 15 minutes), for the logs.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(raw))[:3], " ")
}

// apiServerMetrics reads the named metric families from the API server's /metrics.
func apiServerMetrics(b testing.TB, env *testbed.Env, names ...string) map[string]*dto.MetricFamily {
	b.Helper()
	raw, err := kubernetes.NewForConfigOrDie(env.Config).RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatalf("read the API server's metrics: %v", err)
	}
	// Parse only these families' lines: the whole exposition is megabytes.
	var lines strings.Builder
	for line := range strings.Lines(string(raw)) {
		for _, n := range names {
			if strings.Contains(line, n) {
				lines.WriteString(line)
				break
			}
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(lines.String()))
	if err != nil {
		b.Fatalf("parse the API server's %v: %v", names, err)
	}
	return families
}

// apiServerRequests counts the requests the API server served so far by verb, resource and
// subresource ("PATCH pods", "GET pods/log").
func apiServerRequests(b testing.TB, env *testbed.Env) map[string]float64 {
	b.Helper()
	const name = "apiserver_request_total"
	out := map[string]float64{}
	for _, m := range apiServerMetrics(b, env, name)[name].GetMetric() {
		l := metricLabels(m)
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// minioRequests counts the S3 requests the MinIO at endpoint (host:port) served so far, by API
// ("putobject"), from its Prometheus metrics (the testbed serves them without a token).
func minioRequests(b testing.TB, endpoint string) map[string]float64 {
	b.Helper()
	const name = "minio_s3_requests_total"
	resp, err := http.Get("http://" + endpoint + "/minio/v2/metrics/cluster")
	if err != nil {
		b.Fatalf("read MinIO's metrics: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("read MinIO's metrics: %s, %v", resp.Status, err)
	}
	var lines strings.Builder
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, "# TYPE "+name+" ") {
			lines.WriteString(line)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(lines.String()))
	if err != nil {
		b.Fatalf("parse MinIO's %s: %v", name, err)
	}
	out := map[string]float64{}
	for _, m := range families[name].GetMetric() {
		out[metricLabels(m)["api"]] += m.GetCounter().GetValue()
	}
	return out
}

// labels are a metric's labels by name.
func metricLabels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// logStreams is how many pods/log requests the API server is serving now (its long-running
// requests gauge): the follow streams open, whoever opened them.
func logStreams(b testing.TB, env *testbed.Env) int {
	b.Helper()
	const name = "apiserver_longrunning_requests"
	n := 0.0
	for _, m := range apiServerMetrics(b, env, name)[name].GetMetric() {
		if l := metricLabels(m); l["resource"] == "pods" && l["subresource"] == "log" {
			n += m.GetGauge().GetValue()
		}
	}
	return int(n)
}

// inotifyFree is how many more inotify instances this machine lets this user create, and the
// limit. KWOK, like the kubelet (k8s.io/cri-client's ReadLogs), holds one instance for every log
// it follows, so this bounds the containers that can be followed at once on one node; beyond it
// a follow stream fails with "failed to create fsnotify watcher: too many open files".
func inotifyFree(b testing.TB) (free, limit int) {
	b.Helper()
	raw, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		b.Fatal(err)
	}
	if limit, err = strconv.Atoi(strings.TrimSpace(string(raw))); err != nil {
		b.Fatal(err)
	}
	used := 0
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, dir := range dirs {
		if info, err := os.Stat(dir); err != nil || !ownedByMe(info) {
			continue
		}
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if target, _ := os.Readlink(filepath.Join(dir, fd.Name())); target == "anon_inode:inotify" {
				used++
			}
		}
	}
	return limit - used, limit
}

func ownedByMe(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}

// followable is how many containers a benchmark may follow at once: want, or, when the inotify
// instances left (inotifyFree, less a margin for the parts' own) are fewer than twice that, half
// of them: the limit is per user, and other tests on the machine follow logs too. It logs why,
// and the remedy.
func followable(b testing.TB, want int) int {
	b.Helper()
	const margin = 16
	free, limit := inotifyFree(b)
	share := (free - margin) / 2
	if want <= share {
		return want
	}
	n := max(1, share)
	b.Logf("following %d containers, not %d: fs.inotify.max_user_instances is %d, %d in use, and this takes at most half "+
		"of the rest, as other tests share it; KWOK, like the kubelet, holds one per followed log "+
		"(e.g. sysctl -w fs.inotify.max_user_instances=%d follows all)", n, want, limit, limit-free, limit+2*want+margin)
	return n
}

package performance

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// The agent's resources in config/agent/daemonset.yaml: the targets its figures are held to.
const (
	agentCPULimit    = 1.0       // cores
	agentMemoryLimit = 512 << 20 // bytes
)

// BenchmarkAgent measures issue 25's node agent on the testbed's real node (kubelet, containerd,
// runc; rotation at the kubelet's default 10 MiB), against the API capture of twin pods in the
// same run: one rig's archiver captures through pods/log (no agent in its database), then
// another rig's archiver hands its runs to the agent. Each side runs two arms in turn:
//   - one container writing JOBVAULT_BENCH_AGENT_KIB_PER_SEC (4096) for _SECONDS (20): CPU per
//     MiB captured (the same figure as ms/s per 1 MiB/s) and RSS over idle per 1 MiB/s, from the
//     container's start until its job is archived;
//   - _CONTAINERS (40; 10 a pod) writing 10 lines of 100 bytes a second: CPU and RSS over a
//     window of _WINDOW_SECONDS (30) once every container runs and is followed, scaled to 100
//     containers.
//
// Beside them: the API server's CPU and the pods/log requests it served, the kubelet's CPU (it
// serves the follow streams), each process's CPU in an idle window first (subtracted), and the
// bytes each side kept of what was written. Targets: the agent's side (agent and its archiver)
// uses at most the API capture's CPU per MiB, fits the DaemonSet's limits at 100 containers, and
// sends the API server no pods/log request; the API server's CPU with the agent is at most
// without; beside those, the CPU of the whole path a log takes each way (capture, API server,
// kubelet). The agent losing a byte fails it. About five minutes.
func BenchmarkAgent(b *testing.B) {
	kibPerSec := envInt(b, "JOBVAULT_BENCH_AGENT_KIB_PER_SEC", 4096)
	secs := envInt(b, "JOBVAULT_BENCH_AGENT_SECONDS", 20)
	window := time.Duration(envInt(b, "JOBVAULT_BENCH_AGENT_WINDOW_SECONDS", 30)) * time.Second
	for range b.N {
		rn := testbed.Cluster(b).RealNode(b, testbed.RealNodeOptions{}) // the kubelet's defaults
		flag := "--node-log-max-size=" + strconv.Itoa(10<<20)
		apiRig, agentRig := stack.NewRig(b, objstore.BackendFS, flag), stack.NewRig(b, objstore.BackendFS, flag)
		n := followable(b, int(envInt(b, "JOBVAULT_BENCH_AGENT_CONTAINERS", 40)))
		env := apiRig.Env
		procs := agentProcs{"archiver (API)": apiRig.Proc.PID(), "archiver (agent's)": agentRig.Proc.PID(),
			"kube-apiserver": env.APIServerPID(b), "kubelet": rn.Kubelet.PID()}
		idle := measureIdle(b, procs, 10*time.Second)
		tput := agentArm{rn: rn, procs: procs, kibPerSec: kibPerSec, secs: secs}
		api := []armResult{tput.throughput(b, apiRig, "api"), tput.containers(b, apiRig, "api", n, window)}
		agent := stack.StartAgent(b, agentRig, rn.Name, rn.PodLogsDir())
		procs["agent"] = agent.Proc.PID()
		for name, c := range measureIdle(b, agentProcs{"agent": agent.Proc.PID()}, 5*time.Second) {
			idle[name] = c
		}
		tput.agent = agent
		withAgent := []armResult{tput.throughput(b, agentRig, "agent"), tput.containers(b, agentRig, "agent", n, window)}
		reportAgent(b, idle, api, withAgent, float64(kibPerSec)/1024, n)
	}
}

// agentProcs are the processes a run samples, by the name printed.
type agentProcs map[string]int

// usage is what one process used over a span: CPU in cores, peak RSS in bytes.
type usage struct {
	cores float64
	rss   int64
}

// measureIdle is each process's CPU and RSS over d with nothing to capture: the baseline.
func measureIdle(b *testing.B, procs agentProcs, d time.Duration) map[string]usage {
	b.Helper()
	p0 := sampleProcs(b, procs)
	time.Sleep(d) // not a wait for a condition: the idle window measured
	out := map[string]usage{}
	for name, p1 := range sampleProcs(b, procs) {
		out[name] = usage{cores(p0[name], p1), p1.rss}
	}
	return out
}

func sampleProcs(b *testing.B, procs agentProcs) map[string]proc {
	b.Helper()
	out := map[string]proc{}
	for name, pid := range procs {
		out[name] = sampleProc(b, pid)
	}
	return out
}

// agentArm runs the arms of one side on the real node.
type agentArm struct {
	rn        *testbed.RealNode
	procs     agentProcs
	agent     *stack.Agent // nil on the API side
	kibPerSec int64
	secs      int64
}

// armResult is what one arm measured.
type armResult struct {
	span          time.Duration
	cpu           map[string]float64 // CPU seconds over the span, by process
	rss           map[string]int64   // peak RSS over the span
	logRequests   int                // pods/log requests the API server served, creation to archive
	streams       int                // pods/log streams open at the start of the span
	kept, written int64
	gaps          int
}

// throughput runs one container writing kibPerSec for secs and measures from its start until
// its job is archived.
func (a agentArm) throughput(b *testing.B, s *stack.Rig, side string) armResult {
	b.Helper()
	bytes := (a.kibPerSec << 10) * a.secs
	job := testbed.Job(s.NS, "tput-"+side).Task("w", 1, []string{"main"}, a.rn.Pods(map[string]testbed.Workload{
		"main": {Bytes: bytes, For: time.Duration(a.secs) * time.Second, Lines: []int{200}}})).Obj()
	req0 := s.Env.PodLogRequests(b)
	stack.CreateAs(b, s.Env, "erin", job)
	waitRunning(b, s, 1, 2*time.Minute)
	m := a.start(b, s)
	j := s.WaitArchived(b, job, 5*time.Minute)
	r := m.stop(b)
	r.logRequests = s.Env.PodLogRequests(b) - req0
	a.check(b, s, j, &r)
	b.Logf("%s side, %d KiB/s for %d s: %s", side, a.kibPerSec, a.secs, r)
	return r
}

// containers runs n containers (10 a pod) writing 1 KB/s each and measures a window once every
// one of them runs and is captured (a pods/log stream open, or a capture in the agent).
func (a agentArm) containers(b *testing.B, s *stack.Rig, side string, n int, window time.Duration) armResult {
	b.Helper()
	perPod := min(10, n)
	pods := n / perPod
	n = pods * perPod
	names := make([]string, perPod)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	// They write for the window and a minute for all of them to start, then the job ends.
	runFor := window + time.Minute
	w := testbed.Workload{Bytes: int64(runFor.Seconds()) * 1000, For: runFor, Lines: []int{100}}
	workloads := map[string]testbed.Workload{}
	for _, c := range names {
		workloads[c] = w
	}
	job := testbed.Job(s.NS, "many-"+side).Task("w", int32(pods), names, a.rn.Pods(workloads)).Obj()
	req0 := s.Env.PodLogRequests(b)
	stack.CreateAs(b, s.Env, "erin", job)
	first := waitRunning(b, s, n, 2*time.Minute)
	a.waitCaptured(b, s, n, first.Add(runFor/2))
	if left := time.Until(first.Add(runFor)) - 5*time.Second; left < window {
		b.Logf("the window is %s, not %s: the containers took %s to start", left.Round(time.Second), window, time.Since(first).Round(time.Second))
		window = left
	}
	if window < 5*time.Second {
		b.Fatalf("the %d containers took too long to start to leave a window", n)
	}
	m := a.start(b, s)
	time.Sleep(window) // not a wait for a condition: the window measured
	r := m.stop(b)
	j := s.WaitArchived(b, job, 5*time.Minute)
	r.logRequests = s.Env.PodLogRequests(b) - req0
	a.check(b, s, j, &r)
	b.Logf("%s side, %d containers (%d pods): %s", side, n, pods, r)
	return r
}

// waitCaptured waits, until deadline at most, for the n containers to be captured: pods/log
// streams open through the API server, or the agent's captures running.
func (a agentArm) waitCaptured(b *testing.B, s *stack.Rig, n int, deadline time.Time) {
	b.Helper()
	captured := func() int { return s.Env.LogStreams(b) }
	if a.agent != nil {
		captured = func() int {
			return int(parseMetrics(b, "agent", a.agent.Metrics(b)).sum("jobvault_agent_captures", nil))
		}
	}
	for c := captured(); c < n; c = captured() {
		if time.Now().After(deadline) {
			b.Logf("%d of %d containers captured when the window starts", c, n)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitRunning waits for n containers running in the rig's namespace and returns when the first
// was seen running.
func waitRunning(b *testing.B, s *stack.Rig, n int, timeout time.Duration) time.Time {
	b.Helper()
	var first time.Time
	for deadline := time.Now().Add(timeout); ; time.Sleep(250 * time.Millisecond) {
		var pods corev1.PodList
		if err := s.Env.Client.List(b.Context(), &pods, client.InNamespace(s.NS)); err != nil {
			b.Fatal(err)
		}
		running := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				if c.State.Running != nil {
					running++
				}
			}
		}
		if running > 0 && first.IsZero() {
			first = time.Now()
		}
		if running >= n {
			return first
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d containers running on the real node after %s", running, n, timeout)
		}
	}
}

// check counts the bytes the job's logs kept of what its containers wrote, and its gaps; the
// agent losing a byte fails the benchmark.
func (a agentArm) check(b *testing.B, s *stack.Rig, j *batchv1alpha1.Job, r *armResult) {
	b.Helper()
	jobUID := string(j.UID)
	logs, err := s.Records.LogObjects(b.Context(), jobUID)
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range logs {
		if l.State == record.LogStored {
			r.kept += l.Bytes
		}
		r.written += int64(len(a.rn.Written(s.NS, l.PodUID, l.Container, 0)))
	}
	r.gaps = len(s.Gaps(b, jobUID))
	if a.agent != nil {
		s.CheckCapturedBy(b, jobUID, record.CapturedByAgent)
		if r.kept != r.written || r.gaps > 0 {
			b.Errorf("the agent kept %d of %d bytes written, with %d gaps", r.kept, r.written, r.gaps)
		}
	}
}

// meter samples the processes' CPU at its start and stop, and their RSS every 250 ms between.
type meter struct {
	procs agentProcs
	p0    map[string]proc
	out   armResult
	mu    sync.Mutex
	done  chan struct{}
	wg    sync.WaitGroup
}

func (a agentArm) start(b *testing.B, s *stack.Rig) *meter {
	b.Helper()
	m := &meter{procs: a.procs, done: make(chan struct{}), out: armResult{rss: map[string]int64{}}}
	m.out.streams = s.Env.LogStreams(b)
	m.p0 = sampleProcs(b, a.procs)
	m.wg.Add(1)
	go m.sampleRSS()
	return m
}

// sampleRSS keeps each process's peak VmRSS until stopped (a process gone meanwhile is skipped:
// this goroutine may not fail the benchmark).
func (m *meter) sampleRSS() {
	defer m.wg.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		for name, pid := range m.procs {
			p, err := procfs.NewProc(pid)
			if err != nil {
				continue
			}
			if st, err := p.NewStatus(); err == nil {
				m.mu.Lock()
				m.out.rss[name] = max(m.out.rss[name], int64(st.VmRSS))
				m.mu.Unlock()
			}
		}
		select {
		case <-m.done:
			return
		case <-tick.C:
		}
	}
}

func (m *meter) stop(b *testing.B) armResult {
	b.Helper()
	p1 := sampleProcs(b, m.procs)
	close(m.done)
	m.wg.Wait()
	m.out.cpu = map[string]float64{}
	for name, p := range p1 {
		m.out.cpu[name] = p.cpu - m.p0[name].cpu
		m.out.rss[name] = max(m.out.rss[name], p.rss)
		m.out.span = p.at.Sub(m.p0[name].at)
	}
	return m.out
}

func (r armResult) String() string {
	var cpu []string
	for _, name := range []string{"agent", "archiver (agent's)", "archiver (API)", "kube-apiserver", "kubelet"} {
		if _, ok := r.cpu[name]; ok {
			cpu = append(cpu, fmt.Sprintf("%s %.0f ms/s, %.0f MiB", name, 1000*r.cpu[name]/r.span.Seconds(), mib(r.rss[name])))
		}
	}
	return fmt.Sprintf("over %s: %s; pods/log requests %d, streams open %d; kept %d of %d bytes written, %d gaps",
		r.span.Round(100*time.Millisecond), strings.Join(cpu, ", "), r.logRequests, r.streams, r.kept, r.written, r.gaps)
}

// net is the process's CPU over the arm less its idle rate, in ms per second of the span, and
// its peak RSS over idle.
func (r armResult) net(idle map[string]usage, names ...string) (msPerSec float64, rss int64) {
	for _, name := range names {
		msPerSec += 1000 * (r.cpu[name]/r.span.Seconds() - idle[name].cores)
		rss += r.rss[name] - idle[name].rss
	}
	return msPerSec, rss
}

// reportAgent prints the figures per 1 MiB/s and per 100 containers, their ratios against the
// API capture's and the targets.
func reportAgent(b *testing.B, idle map[string]usage, api, agent []armResult, mibPerSec float64, n int) {
	b.Helper()
	var idleFigures []string
	for _, name := range slices.Sorted(maps.Keys(idle)) {
		u := idle[name]
		idleFigures = append(idleFigures, fmt.Sprintf("%s %.1f ms/s, %.0f MiB", name, 1000*u.cores, mib(u.rss)))
	}
	b.Logf("idle (subtracted below): %s; load %s", strings.Join(idleFigures, ", "), loadAvg())

	// Per 1 MiB/s: CPU per MiB written (ms/s per MiB/s), RSS over idle per MiB/s.
	perMiB := func(r armResult, names ...string) (float64, float64) {
		ms, rss := r.net(idle, names...)
		return ms * r.span.Seconds() / mib(r.written), mib(rss) / mibPerSec
	}
	apiCPU, apiRSS := perMiB(api[0], "archiver (API)")
	agCPU, agRSS := perMiB(agent[0], "agent")
	sideCPU, sideRSS := perMiB(agent[0], "agent", "archiver (agent's)")
	b.Logf("per 1 MiB/s (one container at %.1f MiB/s): API capture (archiver) %.1f ms/s CPU, %.1f MiB RSS; agent %.1f ms/s, %.1f MiB; "+
		"agent and its archiver %.1f ms/s, %.1f MiB: ratio to the API capture CPU %.2f, RSS %.2f (target CPU ratio <= 1.00: %s)",
		mibPerSec, apiCPU, apiRSS, agCPU, agRSS, sideCPU, sideRSS, sideCPU/apiCPU, sideRSS/apiRSS, verdict(sideCPU <= apiCPU))
	b.ReportMetric(agCPU, "agent-ms/MiB")
	b.ReportMetric(sideCPU/apiCPU, "cpu-ratio/MiB")
	chain(b, idle, api[0], agent[0], "per 1 MiB/s", 1/mib(api[0].written), 1/mib(agent[0].written))

	// Per 100 containers: over idle, scaled from the n measured.
	scale := 100 / float64(n)
	per100 := func(r armResult, names ...string) (float64, float64) {
		ms, rss := r.net(idle, names...)
		return ms * scale, mib(rss) * scale
	}
	apiCPU, apiRSS = per100(api[1], "archiver (API)")
	agCPU, agRSS = per100(agent[1], "agent")
	sideCPU, sideRSS = per100(agent[1], "agent", "archiver (agent's)")
	agPeak := mib(idle["agent"].rss) + agRSS
	scaled := ""
	if n != 100 {
		scaled = fmt.Sprintf("measured with %d containers and scaled x%.1f (100 are too many for this machine's 2 cores beside the testbed; JOBVAULT_BENCH_AGENT_CONTAINERS=100 measures them); ", n, scale)
	}
	b.Logf("per 100 containers (%s1 KB/s each): API capture (archiver) %.1f ms/s CPU, %.1f MiB RSS; agent %.1f ms/s, %.1f MiB (%.0f MiB in all); "+
		"agent and its archiver %.1f ms/s, %.1f MiB: ratio to the API capture CPU %.2f, RSS %.2f (target: within the DaemonSet's limits, %.0f ms/s and %d MiB: %s)",
		scaled, apiCPU, apiRSS, agCPU, agRSS, agPeak, sideCPU, sideRSS, sideCPU/apiCPU, sideRSS/apiRSS,
		1000*agentCPULimit, agentMemoryLimit>>20, verdict(agCPU <= 1000*agentCPULimit && agPeak <= mib(agentMemoryLimit)))
	b.ReportMetric(agCPU, "agent-ms/s/100c")
	b.ReportMetric(agPeak, "agent-MiB/100c")
	chain(b, idle, api[1], agent[1], "per 100 containers", scale/api[1].span.Seconds(), scale/agent[1].span.Seconds())

	// The API server: its CPU over idle and the pods/log requests it served, with against without.
	for i, arm := range []string{"one container at " + fmt.Sprintf("%.1f MiB/s", mibPerSec), fmt.Sprintf("%d containers", n)} {
		without, _ := api[i].net(idle, "kube-apiserver")
		with, _ := agent[i].net(idle, "kube-apiserver")
		kWithout, _ := api[i].net(idle, "kubelet")
		kWith, _ := agent[i].net(idle, "kubelet")
		b.Logf("API server, %s: with the agent %.1f ms/s CPU over idle, %d pods/log requests, %d streams open; without %.1f ms/s, %d requests, %d streams: "+
			"CPU ratio %.2f (target <= 1.00: %s; no pods/log request with the agent: %s); the kubelet %.1f ms/s with, %.1f without",
			arm, with, agent[i].logRequests, agent[i].streams, without, api[i].logRequests, api[i].streams, with/without,
			verdict(with <= without), verdict(agent[i].logRequests == 0), kWith, kWithout)
	}
}

// chain prints the CPU of the whole path a log takes on each side, over idle: the API capture's
// archiver with the API server and the kubelet serving its streams, against the agent with its
// archiver, the API server and the kubelet. The CPU seconds of each arm are multiplied by its
// factor (per MiB written, per second and container).
func chain(b *testing.B, idle map[string]usage, api, agent armResult, per string, apiFactor, agentFactor float64) {
	b.Helper()
	cpu := func(r armResult, factor float64, names ...string) float64 {
		ms, _ := r.net(idle, names...)
		return ms * r.span.Seconds() * factor
	}
	without := cpu(api, apiFactor, "archiver (API)", "kube-apiserver", "kubelet")
	with := cpu(agent, agentFactor, "agent", "archiver (agent's)", "kube-apiserver", "kubelet")
	b.Logf("%s, the whole path (capture, API server, kubelet): with the agent %.1f ms/s CPU, through the API %.1f: ratio %.2f (target <= 1.00: %s)",
		per, with, without, with/without, verdict(with <= without))
}

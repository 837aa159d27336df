package testbed

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Defaults of RuntimeOptions: the kubelet's.
const (
	DefaultLogMaxSize  = 10 << 20 // containerLogMaxSize
	DefaultLogMaxFiles = 5        // containerLogMaxFiles
	// DefaultGCDelay is how long after a deleted pod's containers stop its logs survive: the
	// kubelet removes a deleted pod's dead containers, and their logs, as soon as it has finished
	// the pod (not at its one-minute container GC); on the real node they were gone 0.6 s after
	// the API showed the container terminated (TestNodeModelMatchesRealNode).
	DefaultGCDelay = 500 * time.Millisecond
)

// RuntimeOptions model a node's log handling.
type RuntimeOptions struct {
	// MaxSize is the size at which a container's log file is rotated; DefaultLogMaxSize if 0.
	MaxSize int64
	// MaxFiles is how many files of a container's log are kept, the current one included;
	// DefaultLogMaxFiles if 0. Older rotated files are deleted.
	MaxFiles int
	// GCDelay is how long after a deleted (or evicted) pod's containers have all terminated its log
	// files are removed, whatever its finalizers; DefaultGCDelay if 0.
	GCDelay time.Duration
}

// Output is what one container writes over its life. Run k (its restart count) writes Runs[k], or
// the last of Runs for later runs, one chunk every Every from its start (all of it at once, as
// the run's file is created, if Every is 0); from its pod's deletion (SIGTERM) until it is
// terminated it writes Shutdown instead, what was left of its run unwritten.
type Output struct {
	Runs     [][]Chunk
	Shutdown []Chunk
	Every    time.Duration
}

// Runtime stands in for the container runtime and the kubelet's log handling of the pods handed to
// it with Run: while KWOK shows a container running it appends the container's output to its log
// file in the CRI format, one file per run as the kubelet keeps them (a line without its newline
// held back until it ends, as containerd holds it), rotates that file at MaxSize, and removes a
// deleted pod's files once its containers have stopped and the GC delay has passed, even while a
// finalizer holds the pod. The nodes' kubelet endpoint serves the files
// through the real pods/log path with the kubelet's own reader, told whether each run still runs
// (see nodeEndpoint), so a follow stream ends once its run stopped. The runtime keeps an exact
// copy of every byte each run wrote, the truth an archive is compared with. While the API server
// cannot be reached, the containers go on as last seen.
//
// A pod labelled by RestartsOnce has its containers restarted by the runtime: it starts the new
// run's file, served at once, and only then sets the restart in the pod's status, as a kubelet
// reports a restart once the new container exists.
type Runtime struct {
	env  *Env
	opts RuntimeOptions

	mu   sync.Mutex
	pods map[string]*podRun // by namespace/name
	// lastSeen are the pods of each namespace, by name, as last listed.
	lastSeen map[string]map[string]*corev1.Pod
}

type podRun struct {
	ns, name, dir string
	// uid is the pod's, once it exists: a pod recreated under the same name (Volcano does) is a
	// new pod, whose containers write their output afresh.
	uid        types.UID
	containers map[string]*containerRun
	// stoppedAt is when all containers of the deleted pod were first seen terminated.
	stoppedAt  time.Time
	collected  bool
	restarting bool
	restarts   int // restarts done by the runtime
}

type containerRun struct {
	name     string
	out      Output
	opts     RuntimeOptions
	run      int32 // the run being written
	gen      int   // counts newRun calls: tells a run from a later one of the same number (pod recreated)
	started  bool  // the run was seen running
	stopped  bool  // the run was seen stopped (or its pod gone): a follow of it ends at EOF
	startAt  time.Time
	next     int // next chunk of the run's output
	shutNext int // next chunk of Shutdown
	lastAt   time.Time
	lastTS   time.Time
	size     int64
	files    map[int32][]string // per run: rotated files oldest first, then the current file
	written  map[int32]*bytes.Buffer
	// held is, per stream, the end of the run's output not yet in its file: a line without its
	// newline, as containerd holds it (see append).
	held map[string][]byte
}

// runtimePoll is how often the runtime looks at its pods: it bounds how late output starts after
// KWOK shows a container running, and how late shutdown output starts after a deletion.
const runtimePoll = 50 * time.Millisecond

// RestartOnceLabel marks the pods whose containers the runtime restarts (RestartsOnce, Restarts);
// KWOK completes them only once the runtime has annotated them restartsDoneAnnotation.
const RestartOnceLabel = "restart-once.stage.jobvault.io"

const (
	// restartsAnnotation says how often to restart (default 1), restartAfterAnnotation how long
	// each run lasts before (default restartAfter).
	restartsAnnotation     = "restarts.runtime.jobvault.io"
	restartAfterAnnotation = "restart-after.runtime.jobvault.io"
	restartsDoneAnnotation = "restarts-done.runtime.jobvault.io"
	// restartAfter is a second: a run's lines are stamped after its start, and a status keeps
	// whole seconds, so only a run that ends in a later second than its first line has a line a
	// reader can tell from the next run's by its stamp (a run ended within that second is
	// recorded as a gap, as on a real node). Tests of a restart's previous log need one.
	restartAfter = time.Second
	// backOffAnnotation makes each restart wait that long first, the status showing the
	// container Waiting (CrashLoopBackOff) with the run that died as its last state (BackOff).
	backOffAnnotation = "backoff.runtime.jobvault.io"
)

// restartPlan reads how often and how fast the pod's containers are to be restarted.
func restartPlan(pod *corev1.Pod) (times int, after time.Duration) {
	times, after = 1, restartAfter
	if n, err := strconv.Atoi(pod.Annotations[restartsAnnotation]); err == nil {
		times = n
	}
	if d, err := time.ParseDuration(pod.Annotations[restartAfterAnnotation]); err == nil {
		after = d
	}
	return times, after
}

// Runtime starts a runtime for the test's pods; it stops when the test ends.
func (e *Env) Runtime(t T, opts RuntimeOptions) *Runtime {
	t.Helper()
	r, stop, err := e.newRuntime(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return r
}

func (e *Env) newRuntime(opts RuntimeOptions) (*Runtime, func(), error) {
	if opts.MaxSize == 0 {
		opts.MaxSize = DefaultLogMaxSize
	}
	if opts.MaxFiles == 0 {
		opts.MaxFiles = DefaultLogMaxFiles
	}
	if opts.GCDelay == 0 {
		opts.GCDelay = DefaultGCDelay
	}
	r := &Runtime{env: e, opts: opts, pods: map[string]*podRun{}, lastSeen: map[string]map[string]*corev1.Pod{}}
	unregister := e.node.register(r)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Listing runs apart from writing: a slow or unreachable API server must not hold the
	// containers' output back.
	for _, f := range []func(context.Context){r.list, r.step} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(runtimePoll)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					f(ctx)
				}
			}
		}()
	}
	return r, func() { cancel(); wg.Wait(); unregister() }, nil
}

// Run hands pod ns/name to the runtime, with the output of each of its containers (init containers
// included). It may be called before the pod exists, as Volcano names pods <job>-<task>-<index>.
// Containers without an output write nothing.
func (r *Runtime) Run(t T, ns, pod string, outputs map[string]Output) {
	t.Helper()
	if err := r.run(ns, pod, outputs); err != nil {
		t.Fatalf("testbed: %v", err)
	}
}

func (r *Runtime) run(ns, pod string, outputs map[string]Output) error {
	dir := filepath.Join(r.env.logsDir, ns, pod)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p := &podRun{ns: ns, name: pod, dir: dir, containers: map[string]*containerRun{}}
	for name, out := range outputs {
		c := &containerRun{name: name, out: out, opts: r.opts, files: map[int32][]string{}, written: map[int32]*bytes.Buffer{}}
		// The file exists from the start, empty, as the runtime creates it with the container.
		if err := c.newRun(dir, 0); err != nil {
			return err
		}
		p.containers[name] = c
	}
	r.mu.Lock()
	r.pods[ns+"/"+pod] = p
	r.mu.Unlock()
	return nil
}

// logSource is what the node's kubelet reads for pods/log of the container: the file of its
// current run, or with previous the last file of the run before, and whether that run still runs,
// which the kubelet's reader asks each time it reaches the end of the file. known is false for a
// container the runtime does not run.
func (r *Runtime) logSource(ns, pod, container string, previous bool) (path string, running func() bool, known bool, err error) {
	r.mu.Lock()
	p := r.pods[ns+"/"+pod]
	if p == nil || p.containers[container] == nil {
		r.mu.Unlock()
		return "", nil, false, nil
	}
	seen := r.lastSeen[ns][pod]
	r.mu.Unlock()
	if !previous {
		// The pod as last listed may lag the API, where the client saw it; a kubelet's status is
		// ahead of the API's, never behind. The request is served on the pod as the API has it
		// now: a container it shows started is served, one it shows stopped has closed its
		// streams.
		if now := r.current(ns, pod); now != nil {
			seen = now
			r.mu.Lock()
			p.catchUp(now)
			r.mu.Unlock()
		}
		if err := notStarted(seen, pod, container); err != nil {
			return "", nil, true, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := p.containers[container]
	if previous {
		// A kubelet serves the last state's container: while backing off (Waiting), the run that
		// died last, the current one.
		last := c.run - 1
		if backingOff(r.current(ns, pod), container) && c.stopped {
			last = c.run
		}
		files := c.files[last]
		if last < 0 || len(files) == 0 {
			// The kubelet's words (validateContainerLogStatus).
			return "", nil, true, fmt.Errorf("previous terminated container %q in pod %q not found", container, pod)
		}
		return files[len(files)-1], func() bool { return false }, true, nil
	}
	gen := c.gen
	return c.current(), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return c.gen == gen && !c.stopped && !p.collected
	}, true, nil
}

// backingOff reports whether the pod's status shows the container waiting to restart after a run
// died (a last state, and Waiting).
func backingOff(p *corev1.Pod, container string) bool {
	if p == nil {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			return s.State.Waiting != nil && s.LastTerminationState.Terminated != nil
		}
	}
	return false
}

// current is the pod as the API has it now; nil if it cannot be read.
func (r *Runtime) current(ns, pod string) *corev1.Pod {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p corev1.Pod
	if err := r.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, &p); err != nil {
		return nil
	}
	return &p
}

// catchUp stops the runs the pod's status shows stopped, as step does at its next poll. It starts
// none: a list older than this pod would show a run it started waiting, which step takes for a
// run that ran and waits again (stopped); a run's output, which comes after its start, begins at
// step's next poll.
func (p *podRun) catchUp(pod *corev1.Pod) {
	if _, lost := lostNodes.Load(pod.Spec.NodeName); pod.UID != p.uid || p.collected || p.restarting || lost {
		return
	}
	for _, s := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if c := p.containers[s.Name]; c != nil && s.State.Running == nil {
			c.seenNotRunning(s)
		}
	}
}

// notStarted is the kubelet's refusal (validateContainerLogStatus) of a log request for a
// container whose status shows no run to read: not in the status at all (or the pod not listed
// yet), or waiting to start with no run before. The kubelet picks the run by its container ID;
// KWOK's statuses have none, so the model does not refuse, as the kubelet does, a terminated
// status without one.
func notStarted(p *corev1.Pod, pod, container string) error {
	var status *corev1.ContainerStatus
	if p != nil {
		for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
			for i := range list {
				if list[i].Name == container {
					status = &list[i]
				}
			}
		}
	}
	switch {
	case status == nil:
		return fmt.Errorf("container %q in pod %q is not available", container, pod)
	case status.State.Running != nil, status.State.Terminated != nil, status.LastTerminationState.Terminated != nil:
		return nil
	case status.State.Waiting != nil:
		return fmt.Errorf("container %q in pod %q is waiting to start: %v", container, pod, status.State.Waiting.Reason)
	}
	return nil
}

// Written returns every byte the container's run (its restart count when it ran) wrote so far, as
// pods/log would serve it had nothing been rotated or collected away.
func (r *Runtime) Written(ns, pod, container string, run int32) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[ns+"/"+pod]
	if !ok {
		return nil
	}
	c, ok := p.containers[container]
	if !ok || c.written[run] == nil {
		return nil
	}
	return bytes.Clone(c.written[run].Bytes())
}

// Collected reports whether the pod's log files were removed by container GC.
func (r *Runtime) Collected(ns, pod string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[ns+"/"+pod]
	return ok && p.collected
}

// step brings every pod's files up to date with what its containers are doing now, as last listed.
func (r *Runtime) step(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for key, p := range r.pods {
		pods, listed := r.lastSeen[p.ns]
		if p.restarting || !listed {
			continue
		}
		pod := pods[p.name]
		if pod == nil {
			for _, c := range p.containers {
				// Gone, if it ever existed: a pod handed to Run before it is created is not.
				if p.uid != "" {
					c.stop(time.Time{})
				}
			}
			if !p.collected && (!p.stoppedAt.IsZero() || p.anyStarted()) {
				p.collect() // the pod object is gone: the kubelet removes its containers and logs
			}
			continue
		}
		switch {
		case p.uid == "":
			p.uid = pod.UID
		case pod.UID != p.uid:
			if !p.collected {
				p.collect()
			}
			if err := p.recreated(pod.UID); err != nil {
				fmt.Fprintf(os.Stderr, "testbed runtime: %s recreated: %v\n", key, err)
			}
		}
		if _, lost := lostNodes.Load(pod.Spec.NodeName); p.collected || lost {
			continue // a lost node runs nothing this runtime can see
		}
		statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
		allStopped := len(statuses) > 0
		for _, s := range statuses {
			if s.State.Terminated == nil {
				allStopped = false
			}
			c := p.containers[s.Name]
			if c == nil {
				continue
			}
			if s.State.Running == nil {
				c.seenNotRunning(s)
				continue
			}
			if s.RestartCount > c.run {
				// Restarted by KWOK rather than by this runtime: follow suit.
				if err := c.newRun(p.dir, s.RestartCount); err != nil {
					fmt.Fprintf(os.Stderr, "testbed runtime: restart %s container %s: %v\n", key, c.name, err)
				}
			}
			if err := c.begin(now, now); err != nil {
				fmt.Fprintf(os.Stderr, "testbed runtime: start %s container %s: %v\n", key, c.name, err)
			}
			if err := c.write(now, pod.DeletionTimestamp != nil, r.opts); err != nil {
				fmt.Fprintf(os.Stderr, "testbed runtime: write %s container %s: %v\n", key, c.name, err)
			}
		}
		if times, after := restartPlan(pod); pod.Labels[RestartOnceLabel] == "true" && p.restarts < times && pod.DeletionTimestamp == nil && p.dueRestart(pod, now, after) {
			p.restarting = true
			go r.restart(ctx, p, pod.DeepCopy(), p.restarts+1 == times)
		}
		removable := pod.DeletionTimestamp != nil || pod.Status.Reason == "Evicted"
		switch {
		case !removable || !allStopped:
		case p.stoppedAt.IsZero():
			p.stoppedAt = now
		case now.Sub(p.stoppedAt) >= r.opts.GCDelay:
			p.collect()
		}
	}
}

// list lists the pods of the runtime's namespaces for step. While the API server cannot be reached
// (restarting, say), step goes on with the pods as last listed: a node keeps running its
// containers, which keep writing, whether or not the API server answers.
func (r *Runtime) list(ctx context.Context) {
	r.mu.Lock()
	namespaces := map[string]bool{}
	for _, p := range r.pods {
		namespaces[p.ns] = true
	}
	r.mu.Unlock()
	for ns := range namespaces {
		var list corev1.PodList
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.env.Client.List(lctx, &list, client.InNamespace(ns))
		cancel()
		if err != nil {
			continue
		}
		pods := map[string]*corev1.Pod{}
		for i := range list.Items {
			pods[list.Items[i].Name] = &list.Items[i]
		}
		r.mu.Lock()
		r.lastSeen[ns] = pods
		r.mu.Unlock()
	}
}

func (p *podRun) anyStarted() bool {
	for _, c := range p.containers {
		if c.started {
			return true
		}
	}
	return false
}

// dueRestart: every regular container's current run has written its output and run for after.
func (p *podRun) dueRestart(pod *corev1.Pod, now time.Time, after time.Duration) bool {
	for _, spec := range pod.Spec.Containers {
		c := p.containers[spec.Name]
		if c == nil || !c.started || c.next < len(c.output()) || now.Sub(c.startAt) < after {
			return false
		}
	}
	return len(pod.Spec.Containers) > 0
}

// restart restarts every regular container of the pod: each new run's file is started (and so
// served) before the pod's status says the containers restarted. After the last restart the pod
// is annotated so that KWOK completes it.
func (r *Runtime) restart(ctx context.Context, p *podRun, pod *corev1.Pod, last bool) {
	defer func() {
		r.mu.Lock()
		p.restarting = false
		r.mu.Unlock()
	}()
	died := metav1.Now()
	if backOff, err := time.ParseDuration(pod.Annotations[backOffAnnotation]); err == nil {
		// A kubelet backing off: the run died, the container waits, and its status names the run
		// that died as its last state, which pods/log then serves as previous and current.
		// KWOK's pod-ready stage takes a container not running for one to start, and sets every
		// status running with no restarts (restart counts going back, which no kubelet does): it
		// is turned off for the pod, which runs already.
		r.annotate(ctx, pod, kwokPodReadyWeight, "0")
		r.mu.Lock()
		for _, spec := range pod.Spec.Containers {
			if c := p.containers[spec.Name]; c != nil {
				c.stop(time.Time{})
			}
		}
		r.mu.Unlock()
		r.patchStatuses(ctx, pod, func(s *corev1.ContainerStatus) {
			s.LastTerminationState = corev1.ContainerState{Terminated: terminated(s, pod.UID, died)}
			s.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		})
		select {
		case <-ctx.Done():
			return
		case <-time.After(backOff):
		}
	}
	// The start is taken before the new run writes, and reported once it runs: no line of the
	// run is stamped before its startedAt (see begin).
	now := metav1.Now()
	r.mu.Lock()
	for _, spec := range pod.Spec.Containers {
		if c := p.containers[spec.Name]; c != nil {
			err := c.newRun(p.dir, c.run+1)
			if err == nil {
				started := time.Now()
				err = c.begin(started, started)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "testbed runtime: restart %s/%s: %v\n", p.ns, p.name, err)
			}
		}
	}
	r.mu.Unlock()
	r.patchStatuses(ctx, pod, func(s *corev1.ContainerStatus) {
		if s.State.Waiting == nil {
			s.LastTerminationState = corev1.ContainerState{Terminated: terminated(s, pod.UID, now)}
		}
		s.RestartCount++
		s.ContainerID = containerID(pod.UID, s.Name, s.RestartCount)
		s.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	})
	r.mu.Lock()
	p.restarts++
	r.mu.Unlock()
	if last {
		r.annotate(ctx, pod, restartsDoneAnnotation, "true")
	}
}

// kwokPodReadyWeight weighs KWOK's pod-ready stage for a pod: 0 turns it off.
const kwokPodReadyWeight = "pod-ready.stage.kwok.x-k8s.io/weight"

// annotate sets an annotation of the pod.
func (r *Runtime) annotate(ctx context.Context, pod *corev1.Pod, key, value string) {
	var cur corev1.Pod
	if err := r.env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
		return
	}
	patch := client.MergeFrom(cur.DeepCopy())
	metav1.SetMetaDataAnnotation(&cur.ObjectMeta, key, value)
	if err := r.env.Client.Patch(ctx, &cur, patch); err != nil {
		fmt.Fprintf(os.Stderr, "testbed runtime: annotate %s/%s %s: %v\n", pod.Namespace, pod.Name, key, err)
	}
}

// patchStatuses applies change to each regular container's status of the pod, retried on conflicts.
func (r *Runtime) patchStatuses(ctx context.Context, pod *corev1.Pod, change func(*corev1.ContainerStatus)) {
	for {
		var cur corev1.Pod
		if err := r.env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &cur); err != nil {
			return
		}
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		for i := range cur.Status.ContainerStatuses {
			change(&cur.Status.ContainerStatuses[i])
		}
		err := r.env.Client.Status().Patch(ctx, &cur, patch)
		if err == nil || ctx.Err() != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// terminated is the termination state of the container's current run, ended at finished, with
// the run's container ID as a kubelet reports it.
func terminated(s *corev1.ContainerStatus, pod types.UID, finished metav1.Time) *corev1.ContainerStateTerminated {
	started := finished
	if s.State.Running != nil {
		started = s.State.Running.StartedAt
	}
	return &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", StartedAt: started, FinishedAt: finished,
		ContainerID: containerID(pod, s.Name, s.RestartCount)}
}

// containerID names a run of a container as the runtime reports it in the pod's status.
func containerID(pod types.UID, container string, run int32) string {
	return fmt.Sprintf("containerd://%s-%s-%d", pod, container, run)
}

// recreated starts over for a new pod under the same name: its containers have their first run.
func (p *podRun) recreated(uid types.UID) error {
	p.uid, p.collected, p.stoppedAt, p.restarts = uid, false, time.Time{}, 0
	for _, c := range p.containers {
		c.files, c.written = map[int32][]string{}, map[int32]*bytes.Buffer{}
		if err := c.newRun(p.dir, 0); err != nil {
			return err
		}
	}
	return nil
}

// collect removes every log file of the pod, as the kubelet's container GC does.
func (p *podRun) collect() {
	for _, c := range p.containers {
		for _, files := range c.files {
			for _, f := range files {
				_ = os.Remove(f)
			}
		}
	}
	p.collected = true
}

// seenNotRunning notes a status of the container that does not show it running: its current run
// stopped if the status is of that run and it terminated, or it ran and waits again. A status of
// an earlier run is stale (the runtime restarted it since); a run not started yet waits.
func (c *containerRun) seenNotRunning(s corev1.ContainerStatus) {
	if s.RestartCount >= c.run && (s.State.Terminated != nil || c.started) {
		var exited time.Time
		if t := s.State.Terminated; t != nil {
			exited = t.FinishedAt.Time
			// If it ran and ended between two looks, it wrote what it writes at its start:
			// stamped from the start its status gives, before its finish (see closeStreams).
			if err := c.begin(t.StartedAt.Time, time.Now()); err != nil {
				fmt.Fprintf(os.Stderr, "testbed runtime: start container %s: %v\n", c.name, err)
			}
		}
		c.stop(exited)
	}
}

// stop marks the current run stopped, its streams closed: what they held is in its file first,
// before a follow of it can end. exited is when the status says the run finished, if it says.
func (c *containerRun) stop(exited time.Time) {
	if c.stopped {
		return
	}
	if err := c.closeStreams(exited); err != nil {
		fmt.Fprintf(os.Stderr, "testbed runtime: close the streams of container %s: %v\n", c.name, err)
	}
	c.stopped = true
}

func (c *containerRun) output() []Chunk {
	if len(c.out.Runs) == 0 {
		return nil
	}
	return c.out.Runs[min(int(c.run), len(c.out.Runs)-1)]
}

func (c *containerRun) current() string { f := c.files[c.run]; return f[len(f)-1] }

// newRun starts the log file of run n, as the runtime does for each new container. The kubelet
// keeps the last dead run's log only: older ones go.
func (c *containerRun) newRun(dir string, n int32) error {
	if len(c.files[c.run]) > 0 {
		// The run before ended: its streams closed.
		if err := c.closeStreams(time.Time{}); err != nil {
			return err
		}
	}
	for old, files := range c.files {
		if old < n-1 {
			for _, f := range files {
				_ = os.Remove(f)
			}
			delete(c.files, old)
		}
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.log", c.name, n))
	c.files[n] = []string{path}
	c.written[n] = &bytes.Buffer{}
	c.held = map[string][]byte{}
	c.run, c.size, c.next, c.shutNext, c.lastAt, c.started, c.stopped = n, 0, 0, 0, time.Time{}, false, false
	c.gen++
	return os.WriteFile(path, nil, 0o644)
}

// begin starts the run, once its status shows it started (at the latest), if it has not
// started: output written all at once (Every 0) is written now, stamped from stamp on (now if
// zero; and after every record before), the rest by write as it comes due from now.
//
// containerd records a run's start as soon as its process was let run (a moment after: see
// API.md), so to the second the status keeps, but for that moment, a run's lines are stamped at
// or after its startedAt. The model holds to that without the moment. It follows the status that
// KWOK (or the runtime's own restart) posts, the simplest source of the start, rather than
// posting the start itself, which KWOK's stages would overwrite (they are made to keep it
// instead): it writes nothing of a run before a status shows that run started (step;
// seenNotRunning for a run that ended unseen), or, for its own restarts, before the start it then
// posts (restart). Before, output written all at once was stamped when the test handed it over,
// seconds before KWOK started the pod.
func (c *containerRun) begin(stamp, now time.Time) error {
	if c.started || c.stopped {
		return nil
	}
	c.started, c.startAt = true, now
	if c.out.Every > 0 {
		return nil
	}
	if stamp.IsZero() {
		stamp = now
	}
	for _, chunk := range c.output() {
		if err := c.append(chunk, stamp, c.opts); err != nil {
			return err
		}
	}
	c.next = len(c.output())
	return nil
}

// write appends the output due now: the next chunk of the run's output, or once the pod is being
// deleted, of Shutdown.
func (c *containerRun) write(now time.Time, terminating bool, opts RuntimeOptions) error {
	out := c.output()
	for {
		due := c.lastAt.Add(c.out.Every)
		if !c.lastAt.IsZero() && now.Before(due) {
			return nil
		}
		var chunk Chunk
		switch {
		case terminating && c.shutNext < len(c.out.Shutdown):
			chunk = c.out.Shutdown[c.shutNext]
			c.shutNext++
		case !terminating && c.next < len(out):
			chunk = out[c.next]
			c.next++
		default:
			return nil
		}
		// The next chunk is due Every after this one was due, not after the poll that wrote it:
		// polls come up to runtimePoll late, and output paced from them drifts slower than Every
		// (30% over a minute at 100 ms). More than a period late, start afresh: no bursts.
		if c.lastAt.IsZero() || now.Sub(due) >= c.out.Every {
			c.lastAt = now
		} else {
			c.lastAt = due
		}
		if err := c.append(chunk, time.Now(), opts); err != nil {
			return err
		}
		if c.out.Every > 0 {
			return nil
		}
	}
}

// append writes one chunk of the run's output. As containerd, which reads each stream line by
// line, it writes only whole lines and 16 KiB pieces of longer ones: the rest, a line without its
// newline, is held (at most 16 KiB) until its newline comes, it grows past 16 KiB, or the run
// ends (closeStreams). Its records are stamped from at on, after every record before.
func (c *containerRun) append(chunk Chunk, at time.Time, opts RuntimeOptions) error {
	data := append(c.held[chunk.Stream], chunk.Data...)
	cut := bytes.LastIndexByte(data, '\n') + 1
	if rest := len(data) - cut; rest > criMaxEntry {
		cut += (rest - 1) / criMaxEntry * criMaxEntry
	}
	c.held[chunk.Stream] = bytes.Clone(data[cut:])
	c.written[c.run].Write(chunk.Data)
	chunk.Data = data[:cut]
	return c.appendRecords(chunk, at, opts)
}

// closeStreams writes what the streams hold as a last partial record each, as containerd does
// when a container's stream closes at its exit. containerd stamps those records at the exit; the
// model sees the exit later (its poll, the list's latency), so it stamps them no later than the
// second the status says the run finished in (exited, whole seconds), if it says: a reader that
// takes lines stamped well after a run's finish for the next run's takes these as the run's own.
func (c *containerRun) closeStreams(exited time.Time) error {
	stamp := time.Time{}
	if !exited.IsZero() {
		stamp = exited.Truncate(time.Second).Add(time.Second - time.Microsecond)
	}
	for _, stream := range []string{"stdout", "stderr"} {
		if data := c.held[stream]; len(data) > 0 {
			c.held[stream] = nil
			if err := c.appendRecords(Chunk{Stream: stream, Data: data, Time: stampAt(stamp, c.lastTS)}, time.Now(), c.opts); err != nil {
				return err
			}
		}
	}
	return nil
}

// stampAt is the stamp for a record due at most at due (none if zero or not before now): never
// before the last record's, last.
func stampAt(due, last time.Time) time.Time {
	if due.IsZero() || !due.Before(time.Now()) {
		return time.Time{}
	}
	if !due.After(last) {
		return last.Add(time.Microsecond)
	}
	return due
}

// appendRecords writes the chunk in the CRI format, stamped from at on (the runtime's clock; see
// encodeCRI), rotating the file first if it would outgrow MaxSize.
func (c *containerRun) appendRecords(chunk Chunk, at time.Time, opts RuntimeOptions) error {
	if len(chunk.Data) == 0 {
		return nil
	}
	start := at
	if !start.After(c.lastTS) {
		start = c.lastTS // the encoder adds a microsecond per entry, so timestamps keep increasing
	}
	rec, last := encodeCRI([]Chunk{chunk}, start)
	c.lastTS = last
	if c.size > 0 && c.size+int64(len(rec)) > opts.MaxSize {
		if err := c.rotate(opts); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(c.current(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(rec); err != nil {
		f.Close()
		return err
	}
	c.size += int64(len(rec))
	return f.Close()
}

// rotate renames the current file with a timestamp suffix, as the kubelet does, starts a new one,
// and deletes the oldest rotated files beyond MaxFiles.
func (c *containerRun) rotate(opts RuntimeOptions) error {
	cur := c.current()
	rotated := cur + "." + time.Now().UTC().Format("20060102-150405.000000000")
	if err := os.Rename(cur, rotated); err != nil {
		return err
	}
	if err := os.WriteFile(cur, nil, 0o644); err != nil {
		return err
	}
	c.size = 0
	old := append(c.files[c.run][:len(c.files[c.run])-1], rotated)
	sort.Strings(old)
	for len(old) > opts.MaxFiles-1 {
		if err := os.Remove(old[0]); err != nil && !os.IsNotExist(err) {
			return err
		}
		old = old[1:]
	}
	c.files[c.run] = append(old, cur)
	return nil
}

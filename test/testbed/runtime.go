package testbed

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Defaults of RuntimeOptions: the kubelet's.
const (
	DefaultLogMaxSize  = 10 << 20 // containerLogMaxSize
	DefaultLogMaxFiles = 5        // containerLogMaxFiles
	// DefaultGCDelay is how long after a deleted pod's containers stop its logs survive: the
	// kubelet's container GC runs every minute.
	DefaultGCDelay = time.Minute
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

// Output is what one container writes over its life: Run from its start, then, from its pod's
// deletion (SIGTERM) until it is terminated, Shutdown, whatever of Run was left unwritten. One chunk
// is written every Every (all at once if Every is 0). A restarted container writes Run again.
type Output struct {
	Run      []Chunk
	Shutdown []Chunk
	Every    time.Duration
}

// Runtime stands in for the container runtime and the kubelet's log handling of the pods handed to
// it with Run: while KWOK shows a container running it appends the container's output to its log
// file in the CRI format, rotates that file as the kubelet does, and removes a deleted pod's files
// once its containers have stopped and the GC delay has passed, even while a finalizer holds the
// pod. KWOK serves the files through the real pods/log path. The runtime keeps an exact copy of
// every byte each container instance wrote, the truth an archive is compared with.
type Runtime struct {
	env  *Env
	opts RuntimeOptions

	mu   sync.Mutex
	pods map[string]*podRun // by namespace/name
}

type podRun struct {
	ns, name, dir string
	containers    map[string]*containerRun
	// stoppedAt is when all containers of the deleted pod were first seen terminated.
	stoppedAt time.Time
	collected bool
}

type containerRun struct {
	name     string
	out      Output
	current  string // path of the current log file
	previous string // path of the previous instance's log (previous=true)
	instance int32  // restart count of the instance being written
	running  bool   // an instance was seen running
	next     int    // next chunk of Run
	shutNext int    // next chunk of Shutdown
	lastAt   time.Time
	lastTS   time.Time
	size     int64
	rotated  []string // rotated files of the current instance, oldest first
	written  map[int32]*bytes.Buffer
}

// runtimePoll is how often the runtime looks at its pods: it bounds how late output starts after
// KWOK shows a container running, and how late shutdown output starts after a deletion.
const runtimePoll = 50 * time.Millisecond

// Runtime starts a runtime for the test's pods; it stops when the test ends.
func (e *Env) Runtime(t T, opts RuntimeOptions) *Runtime {
	t.Helper()
	if opts.MaxSize == 0 {
		opts.MaxSize = DefaultLogMaxSize
	}
	if opts.MaxFiles == 0 {
		opts.MaxFiles = DefaultLogMaxFiles
	}
	if opts.GCDelay == 0 {
		opts.GCDelay = DefaultGCDelay
	}
	r := &Runtime{env: e, opts: opts, pods: map[string]*podRun{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(runtimePoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				r.step(ctx)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// Run hands pod ns/name to the runtime, with the output of each of its containers (init containers
// included). It may be called before the pod exists, as Volcano names pods <job>-<task>-<index>.
// Containers without an output write nothing.
func (r *Runtime) Run(t T, ns, pod string, outputs map[string]Output) {
	t.Helper()
	dir := filepath.Join(r.env.logsDir, ns, pod)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &podRun{ns: ns, name: pod, dir: dir, containers: map[string]*containerRun{}}
	var logs []any
	for name, out := range outputs {
		c := &containerRun{name: name, out: out, current: filepath.Join(dir, name+".log"),
			previous: filepath.Join(dir, name+".previous.log"), written: map[int32]*bytes.Buffer{0: {}}}
		// The file exists from the start, empty, as the runtime creates it with the container.
		if err := os.WriteFile(c.current, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		p.containers[name] = c
		logs = append(logs, map[string]any{"containers": []any{name}, "logsFile": c.current, "previousLogsFile": c.previous, "follow": true})
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(logsGVR)
	u.SetNamespace(ns)
	u.SetName(pod)
	u.Object["spec"] = map[string]any{"logs": logs}
	if err := r.env.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("testbed: create KWOK logs of %s/%s: %v", ns, pod, err)
	}
	r.mu.Lock()
	r.pods[ns+"/"+pod] = p
	r.mu.Unlock()
}

// Written returns every byte the container's instance (its restart count when it ran) wrote so
// far, as pods/log would serve it had nothing been rotated or collected away.
func (r *Runtime) Written(ns, pod, container string, instance int32) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[ns+"/"+pod]
	if !ok {
		return nil
	}
	c, ok := p.containers[container]
	if !ok || c.written[instance] == nil {
		return nil
	}
	return bytes.Clone(c.written[instance].Bytes())
}

// Collected reports whether the pod's log files were removed by container GC.
func (r *Runtime) Collected(ns, pod string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[ns+"/"+pod]
	return ok && p.collected
}

// step brings every pod's files up to date with what its containers are doing now.
func (r *Runtime) step(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for key, p := range r.pods {
		if p.collected {
			continue
		}
		var pod corev1.Pod
		err := r.env.Client.Get(ctx, clientKey(p.ns, p.name), &pod)
		switch {
		case apierrors.IsNotFound(err):
			if !p.stoppedAt.IsZero() || anyRunning(p) {
				// The pod object is gone: the kubelet removes its containers and logs.
				p.collect()
			}
			continue
		case err != nil:
			continue // the API server restarting, say: try again at the next tick
		}
		statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
		allStopped := len(statuses) > 0
		for _, s := range statuses {
			c := p.containers[s.Name]
			if s.State.Terminated == nil {
				allStopped = false
			}
			if c == nil || s.State.Running == nil {
				continue
			}
			if s.RestartCount > c.instance {
				if err := c.restart(s.RestartCount); err != nil {
					fmt.Fprintf(os.Stderr, "testbed runtime: restart %s container %s: %v\n", key, c.name, err)
				}
			}
			c.running = true
			if err := c.write(now, pod.DeletionTimestamp != nil, r.opts); err != nil {
				fmt.Fprintf(os.Stderr, "testbed runtime: write %s container %s: %v\n", key, c.name, err)
			}
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

func anyRunning(p *podRun) bool {
	for _, c := range p.containers {
		if c.running {
			return true
		}
	}
	return false
}

// collect removes every log file of the pod, as the kubelet's container GC does.
func (p *podRun) collect() {
	for _, c := range p.containers {
		for _, f := range append(c.rotated, c.current, c.previous) {
			_ = os.Remove(f)
		}
	}
	p.collected = true
}

// write appends the output due now: the next chunk of Run, or once the pod is being deleted, of
// Shutdown.
func (c *containerRun) write(now time.Time, terminating bool, opts RuntimeOptions) error {
	for {
		if !c.lastAt.IsZero() && now.Sub(c.lastAt) < c.out.Every {
			return nil
		}
		var chunk Chunk
		switch {
		case terminating && c.shutNext < len(c.out.Shutdown):
			chunk = c.out.Shutdown[c.shutNext]
			c.shutNext++
		case !terminating && c.next < len(c.out.Run):
			chunk = c.out.Run[c.next]
			c.next++
		default:
			return nil
		}
		c.lastAt = now
		if err := c.append(chunk, opts); err != nil {
			return err
		}
		if c.out.Every > 0 {
			return nil
		}
	}
}

// append writes one chunk in the CRI format, rotating the file first if it would outgrow MaxSize.
func (c *containerRun) append(chunk Chunk, opts RuntimeOptions) error {
	start := time.Now()
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
	f, err := os.OpenFile(c.current, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(rec); err != nil {
		f.Close()
		return err
	}
	c.size += int64(len(rec))
	c.written[c.instance].Write(chunk.Data)
	return f.Close()
}

// rotate renames the current file with a timestamp suffix, as the kubelet does, starts a new one,
// and deletes the oldest rotated files beyond MaxFiles.
func (c *containerRun) rotate(opts RuntimeOptions) error {
	rotated := c.current + "." + time.Now().UTC().Format("20060102-150405.000000000")
	if err := os.Rename(c.current, rotated); err != nil {
		return err
	}
	c.rotated = append(c.rotated, rotated)
	if err := os.WriteFile(c.current, nil, 0o644); err != nil {
		return err
	}
	c.size = 0
	sort.Strings(c.rotated)
	for len(c.rotated) > opts.MaxFiles-1 {
		if err := os.Remove(c.rotated[0]); err != nil && !os.IsNotExist(err) {
			return err
		}
		c.rotated = c.rotated[1:]
	}
	return nil
}

// restart starts the log of a new instance: the current file becomes the previous instance's
// (what previous=true serves), and the old instance's rotated files go, as the kubelet keeps only
// the last dead instance.
func (c *containerRun) restart(instance int32) error {
	if err := os.Rename(c.current, c.previous); err != nil {
		return err
	}
	for _, f := range c.rotated {
		_ = os.Remove(f)
	}
	c.rotated, c.size, c.next, c.shutNext, c.lastAt = nil, 0, 0, 0, time.Time{}
	c.instance = instance
	c.written[instance] = &bytes.Buffer{}
	return os.WriteFile(c.current, nil, 0o644)
}

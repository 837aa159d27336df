package testbed

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Chunk is one write of a container to stdout or stderr. Its records are stamped by the runtime's
// clock, a microsecond apart and later than any before, unless Time or TimeOffset says otherwise.
type Chunk struct {
	Stream string // "stdout" or "stderr"
	Data   []byte
	// Time, if set, stamps the chunk's first record (each next one a microsecond later), whatever
	// the records before: containerd stamps stdout and stderr in separate goroutines before taking
	// its write lock, so a record can be written after one stamped later. The runtime's clock goes
	// on as if the chunk had been stamped by it.
	Time time.Time
	// TimeOffset shifts the chunk's stamps off the runtime's clock: negative for a node clock
	// stepped back (or a stream stamped before the other's write), positive for one stepped ahead.
	// Only this chunk's records: the runtime's clock goes on unshifted.
	TimeOffset time.Duration
}

// ContainerLogs are what a container writes (SetPodLogs): Current in its last run, and Previous in
// the run before, if it restarts.
type ContainerLogs struct {
	Current, Previous []Chunk
}

// Bytes is what `pods/log` returns for the chunks: their data concatenated in order.
func Bytes(chunks []Chunk) []byte {
	var b bytes.Buffer
	for _, c := range chunks {
		b.Write(c.Data)
	}
	return b.Bytes()
}

// criMaxEntry is where a container runtime splits a long line into partial entries (containerd's 16 KiB).
const criMaxEntry = 16 << 10

// EncodeCRI renders chunks in the CRI log format the kubelet reads ("<RFC3339Nano> <stream> P|F
// <text>"): every newline-terminated line becomes a full entry, a long line is split into partial
// entries and so is a trailing fragment without newline, so reading it back yields exactly the bytes.
func EncodeCRI(chunks []Chunk, start time.Time) []byte {
	b, _ := encodeCRI(chunks, start)
	return b
}

// encodeCRI is EncodeCRI that also returns the runtime's clock after the last entry (start if
// none): each entry is a microsecond after the one before on that clock, and stamped by it unless
// its chunk says otherwise (Time, TimeOffset).
func encodeCRI(chunks []Chunk, start time.Time) ([]byte, time.Time) {
	var out bytes.Buffer
	clock := start
	for _, c := range chunks {
		stamp := clock.Add(c.TimeOffset)
		if !c.Time.IsZero() {
			stamp = c.Time.Add(-time.Microsecond)
		}
		entry := func(tag string, text []byte) {
			clock, stamp = clock.Add(time.Microsecond), stamp.Add(time.Microsecond)
			fmt.Fprintf(&out, "%s %s %s ", stamp.UTC().Format(time.RFC3339Nano), c.Stream, tag)
			out.Write(text)
			out.WriteByte('\n')
		}
		data := c.Data
		for len(data) > 0 {
			line, rest, full := bytes.Cut(data, []byte("\n"))
			for len(line) > criMaxEntry {
				entry("P", line[:criMaxEntry])
				line = line[criMaxEntry:]
			}
			if full {
				entry("F", line)
			} else if len(line) > 0 {
				entry("P", line)
			}
			data = rest
		}
	}
	return out.Bytes(), clock
}

var logsGVR = schema.GroupVersionKind{Group: "kwok.x-k8s.io", Version: "v1alpha1", Kind: "Logs"}

// SetPodLogs makes the node write the given logs for the containers of pod ns/name, through the
// Env's shared runtime (see Runtime; default options): each container writes Current at its start,
// or, when Previous is set, Previous in its first run and Current once restarted (RestartsOnce).
// It may be called before the pod exists (Volcano names pods <job>-<task>-<index>).
func (e *Env) SetPodLogs(t T, ns, pod string, containers map[string]ContainerLogs) {
	t.Helper()
	rt, err := e.sharedRuntime()
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	outputs := map[string]Output{}
	for name, cl := range containers {
		o := Output{Runs: [][]Chunk{cl.Current}}
		if cl.Previous != nil {
			o.Runs = [][]Chunk{cl.Previous, cl.Current}
		}
		outputs[name] = o
	}
	rt.Run(t, ns, pod, outputs)
}

// Written is what the container of pod ns/name wrote in its run (restart count), through
// SetPodLogs.
func (e *Env) Written(ns, pod, container string, run int32) []byte {
	rt, err := e.sharedRuntime()
	if err != nil {
		return nil
	}
	return rt.Written(ns, pod, container, run)
}

var shared once[*Runtime]

// sharedRuntime is the runtime behind SetPodLogs, running until the testbed stops.
func (e *Env) sharedRuntime() (*Runtime, error) {
	return shared.get("node runtime", func() (*Runtime, error) {
		r, stop, err := e.newRuntime(RuntimeOptions{})
		if err != nil {
			return nil, err
		}
		onStop(stop)
		return r, nil
	})
}

// SetPodLogFiles makes KWOK serve existing CRI-format files (container → path) as the current logs
// of pod ns/name; for logs too large to hold in memory (benchmarks).
func (e *Env) SetPodLogFiles(t T, ns, pod string, files map[string]string) {
	t.Helper()
	var logs []any
	for name, p := range files {
		logs = append(logs, map[string]any{"containers": []any{name}, "follow": false, "logsFile": p})
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(logsGVR)
	u.SetNamespace(ns)
	u.SetName(pod)
	u.Object["spec"] = map[string]any{"logs": logs}
	if err := e.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("testbed: create KWOK logs of %s/%s: %v", ns, pod, err)
	}
}

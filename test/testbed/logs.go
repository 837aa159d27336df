package testbed

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Chunk is one write of a container to stdout or stderr.
type Chunk struct {
	Stream string // "stdout" or "stderr"
	Data   []byte
}

// ContainerLogs are the logs KWOK serves for a container: the current instance and the previous one
// (after a restart, served for previous=true).
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

// encodeCRI is EncodeCRI that also returns the timestamp of the last entry (start if none): each
// entry is a microsecond after the one before.
func encodeCRI(chunks []Chunk, start time.Time) ([]byte, time.Time) {
	var out bytes.Buffer
	ts := start
	entry := func(stream, tag string, text []byte) {
		ts = ts.Add(time.Microsecond)
		fmt.Fprintf(&out, "%s %s %s ", ts.UTC().Format(time.RFC3339Nano), stream, tag)
		out.Write(text)
		out.WriteByte('\n')
	}
	for _, c := range chunks {
		data := c.Data
		for len(data) > 0 {
			line, rest, full := bytes.Cut(data, []byte("\n"))
			for len(line) > criMaxEntry {
				entry(c.Stream, "P", line[:criMaxEntry])
				line = line[criMaxEntry:]
			}
			if full {
				entry(c.Stream, "F", line)
			} else if len(line) > 0 {
				entry(c.Stream, "P", line)
			}
			data = rest
		}
	}
	return out.Bytes(), ts
}

var logsGVR = schema.GroupVersionKind{Group: "kwok.x-k8s.io", Version: "v1alpha1", Kind: "Logs"}

// SetPodLogs makes KWOK serve the given logs for the containers of pod ns/name. It may be called
// before the pod exists (Volcano names pods <job>-<task>-<index>); calling it again replaces them.
func (e *Env) SetPodLogs(t T, ns, pod string, containers map[string]ContainerLogs) {
	t.Helper()
	dir := filepath.Join(e.logsDir, ns, pod)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs []any
	for name, cl := range containers {
		l := map[string]any{"containers": []any{name}, "follow": false}
		for file, chunks := range map[string][]Chunk{name + ".log": cl.Current, name + ".previous.log": cl.Previous} {
			if chunks == nil {
				continue
			}
			p := filepath.Join(dir, file)
			if err := os.WriteFile(p, EncodeCRI(chunks, time.Now()), 0o644); err != nil {
				t.Fatal(err)
			}
			if file == name+".log" {
				l["logsFile"] = p
			} else {
				l["previousLogsFile"] = p
			}
		}
		logs = append(logs, l)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(logsGVR)
	u.SetNamespace(ns)
	u.SetName(pod)
	ctx := context.Background()
	if err := e.Client.Get(ctx, clientKey(ns, pod), u); err == nil {
		u.Object["spec"] = map[string]any{"logs": logs}
		if err := e.Client.Update(ctx, u); err != nil {
			t.Fatalf("testbed: update KWOK logs of %s/%s: %v", ns, pod, err)
		}
		return
	}
	u.Object["spec"] = map[string]any{"logs": logs}
	if err := e.Client.Create(ctx, u); err != nil {
		t.Fatalf("testbed: create KWOK logs of %s/%s: %v", ns, pod, err)
	}
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

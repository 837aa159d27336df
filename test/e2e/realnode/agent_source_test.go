package realnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/klauspost/compress/gzip"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/agent"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeAgentSourceRotation: the node agent's file source alone, without the database: a
// container writes 5 MiB/s for 20 s through the kubelet's rotation (at 1 MiB, checked every 10 s:
// files of about 50 MB, older ones compressed, five kept) beside a CPU stress process, and the
// archiver's capture loop (capture.Capture) reads it from the files, held open since they
// appeared. The archive is byte-exact against what the workload wrote, and no gap is recorded.
// (5 MiB/s for 20 s rather than the 20 MiB/s for 30 s: the machine's two cores are
// shared; the kubelet's check period makes each file about 50 MB either way, so the rotations
// and compressions the follower must survive are the same.)
func TestRealNodeAgentSourceRotation(t *testing.T) {
	t.Parallel()
	env := testbed.Cluster(t)
	rn := env.RealNode(t, nodeOptions)
	src := fileSource(t, rn.PodLogsDir())
	stack.CPUStress(t, 1)
	ns := env.Namespace(t)
	pod := realPod(rn, ns, "source", testbed.Workload{Bytes: 100 << 20, For: 20 * time.Second, Lines: []int{200, 20 << 10}})
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	got, gaps := captureFromFiles(t, env.Client, src, pod)
	written := rn.Written(ns, string(pod.UID), "main", 0)
	t.Logf("the agent's source kept %d bytes of the %d written; gaps %+v", len(got), len(written), gaps)
	if len(written) != 100<<20 {
		t.Fatalf("the container wrote %d bytes, want 100 MiB", len(written))
	}
	if !bytes.Equal(got, written) {
		t.Errorf("archived %d bytes, written %d: the first %d agree", len(got), len(written), commonPrefix(got, written))
	}
	if len(gaps) > 0 {
		t.Errorf("gaps %+v, want none", gaps)
	}
}

// fileSource starts the agent's file source on dir for the test.
func fileSource(t *testing.T, dir string) *agent.FileSource {
	t.Helper()
	src, err := agent.NewFileSource(dir, 0, nil, testr.NewWithOptions(t, testr.Options{Verbosity: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return src
}

// realPod is a bare pod (no job, no archiver), bound to the real node, whose container "main" runs w.
func realPod(rn *testbed.RealNode, ns, name string, w testbed.Workload) *corev1.Pod {
	tpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "main"}}}}
	rn.Pods(map[string]testbed.Workload{"main": w})(&tpl)
	tpl.Spec.NodeName = rn.Name // no scheduler for bare pods in the testbed
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: tpl.Spec}
}

// captureFromFiles runs the capture loop over the file source for the pod's container "main",
// run 0, until it terminated, into an in-memory record and a directory store, and returns the
// assembled log and the gaps recorded.
func captureFromFiles(t *testing.T, c client.Client, src *agent.FileSource, pod *corev1.Pod) ([]byte, []record.Gap) {
	t.Helper()
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := &memRecords{}
	ref := capture.Ref{Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID), Container: "main"}
	ended := false
	over := func(ctx context.Context) (capture.End, error) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return capture.End{}, err
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == "main" && s.State.Terminated != nil {
				if !ended {
					ended = true
					t.Logf("container ended %s after the pod's creation", time.Since(pod.CreationTimestamp.Time).Round(time.Second))
				}
				return capture.End{Over: true}, nil
			}
		}
		return capture.End{}, nil
	}
	segKey := func(seq int32) string { return fmt.Sprintf("seg/%s/%d", pod.UID, seq) }
	cfg := capture.DefaultConfig
	cfg.NodeLogMaxSize = 0 // the files hold every byte: no guessing what rotation took
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for {
		_, err := capture.Capture(ctx, cfg, src, src.Records(recs), store, segKey, ref, over, nil)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("capture: %v", err)
		}
		t.Logf("capture: %v; again", err)
	}
	t.Logf("capture done %s after the pod's creation", time.Since(pod.CreationTimestamp.Time).Round(time.Second))
	segs, _ := recs.Segments(ctx, ref.PodUID, ref.Container, ref.Run)
	a, err := capture.Assemble(ctx, store, ref, "log", segs, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := store.Get(ctx, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return got, recs.gaps
}

// memRecords keeps a capture's records in memory.
type memRecords struct {
	mu   sync.Mutex
	segs []record.Segment
	gaps []record.Gap
}

func (m *memRecords) Segments(context.Context, string, string, int32) ([]record.Segment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]record.Segment(nil), m.segs...), nil
}

func (m *memRecords) PutSegment(_ context.Context, s record.Segment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.segs = append(m.segs, s)
	sort.Slice(m.segs, func(i, j int) bool { return m.segs[i].Seq < m.segs[j].Seq })
	return nil
}

func (m *memRecords) DeleteSegments(context.Context, string, string, int32) error { return nil }

func (m *memRecords) PutGap(_ context.Context, g record.Gap) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gaps = append(m.gaps, g)
	return nil
}

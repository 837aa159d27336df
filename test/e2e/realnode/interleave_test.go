package realnode

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeInterleavedStreams: a container alternates lines between stdout and stderr at about
// 768 KB/s, lines over 16 KiB among them. containerd copies the two pipes to the one log file
// concurrently, so the file's order of lines across streams need not be the order written, and
// the other stream's records can split a line that containerd stored in 16 KiB partial records:
// pods/log serves the file as it is. The archive is exactly what pods/log serves of the run, as
// long as the node keeps it (the pod is not deleted), and as long as what was written. It writes
// less than the node's rotation size (1 MiB), after a second of quiet (a capture that opens after
// output began cannot prove it has the run's start: see TestRealNodeRotation's gaps).
func TestRealNodeInterleavedStreams(t *testing.T) {
	s, rn := rig(t)
	job := testbed.Job(s.NS, "interleaved").Task("w", 1, []string{"main"},
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: 768 << 10, For: time.Second, Delay: 2 * time.Second, Stream: "both",
			Lines: []int{100, 300, 17 << 10}}})).Obj()
	stack.CreateAs(t, s.Env, "erin", job)
	j := s.WaitArchived(t, job, 3*time.Minute)
	pod := testbed.PodName(job.Name, "w", 0)
	uid := podUID(t, s, string(j.UID), pod)
	row := logRows(t, s, string(j.UID))["main/"+record.InstanceCurrent]
	if row.State != record.LogStored {
		t.Fatalf("log row %s %s, want stored", row.State, row.Reason)
	}
	got, _ := s.ReadLog(t, row.ObjectKey)
	if g := s.Gaps(t, string(j.UID)); len(g) != 0 {
		t.Errorf("gaps %+v, want none", g)
	}
	cs, err := kubernetes.NewForConfig(s.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	served, err := cs.CoreV1().Pods(s.NS).GetLogs(pod, &corev1.PodLogOptions{Container: "main"}).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("read what pods/log serves: %v", err)
	}
	if !bytes.Equal(got, served) {
		t.Errorf("archived %d bytes, pods/log serves %d (the first %d agree)", len(got), len(served), commonPrefix(got, served))
	}
	written := rn.Written(s.NS, uid, "main", 0)
	if len(got) != len(written) {
		t.Errorf("archived %d bytes, the container wrote %d", len(got), len(written))
	}
	for _, stream := range []string{"stdout", "stderr"} {
		want := rn.WrittenStream(s.NS, uid, "main", 0, stream)
		have := streamLines(got, stream)
		t.Logf("%s: %d bytes of its lines archived as whole lines of its own, %d written (lines split by the other stream's records count elsewhere)", stream, len(have), len(want))
	}
	t.Logf("archive in the order written: %v (the first %d of %d bytes agree)", bytes.Equal(got, written), commonPrefix(got, written), len(written))
}

// streamLines returns the lines of log the workload wrote to stream, in order.
func streamLines(log []byte, stream string) []byte {
	var b bytes.Buffer
	tag := []byte(" " + stream + " ")
	for _, line := range bytes.SplitAfter(log, []byte("\n")) {
		if i := bytes.Index(line, tag); i >= 0 && i < 40 {
			b.Write(line)
		}
	}
	return b.Bytes()
}

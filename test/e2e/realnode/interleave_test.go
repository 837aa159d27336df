package realnode

import (
	"bytes"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeInterleavedStreams: a container alternates lines between stdout and stderr at about
// 768 KB/s. containerd copies the two pipes to the one log file concurrently, so the file's (and
// pods/log's, and the archive's) order of lines across streams need not be the order written;
// within each stream it is. The archive holds every line of each stream, in that stream's order.
// It writes less than the node's rotation size (1 MiB): what rotation costs a follower through
// pods/log is TestRealNodeRotation's to show, as gaps.
func TestRealNodeInterleavedStreams(t *testing.T) {
	s, rn := rig(t)
	job := testbed.Job(s.NS, "interleaved").Task("w", 1, []string{"main"},
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: 768 << 10, For: time.Second, Stream: "both", Lines: []int{100, 300, 17 << 10}}})).Obj()
	stack.CreateAs(t, s.Env, "erin", job)
	j := s.WaitArchived(t, job, 3*time.Minute)
	uid := podUID(t, s, string(j.UID), testbed.PodName(job.Name, "w", 0))
	row := logRows(t, s, string(j.UID))["main/"+record.InstanceCurrent]
	if row.State != record.LogStored {
		t.Fatalf("log row %s %s, want stored", row.State, row.Reason)
	}
	got, _ := s.ReadLog(t, row.ObjectKey)
	if g := gaps(t, s, string(j.UID)); len(g) != 0 {
		t.Errorf("gaps %+v, want none", g)
	}
	for _, stream := range []string{"stdout", "stderr"} {
		want := rn.WrittenStream(s.NS, uid, "main", 0, stream)
		if have := streamLines(got, stream); !bytes.Equal(have, want) {
			t.Errorf("%s: archived %d bytes of its lines, the container wrote %d (first %d agree)", stream, len(have), len(want), commonPrefix(have, want))
		}
	}
	written := rn.Written(s.NS, uid, "main", 0)
	if len(got) != len(written) {
		t.Errorf("archived %d bytes, the container wrote %d", len(got), len(written))
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

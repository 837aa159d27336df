package realnode

import (
	"bytes"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeLongLinesBoundedMemory: a container writes a 1 MiB line, then a 100 MiB line
// without a newline, over 20 s. containerd splits them into 16 KiB partial records and the kubelet
// rotates the file every 1 MiB, in the middle of the line. The archiver's memory stays bounded
// (its peak RSS well under the line), and the archive is byte-exact or its missing ranges are
// recorded gaps.
func TestRealNodeLongLinesBoundedMemory(t *testing.T) {
	s, rn := rig(t)
	const total = 1<<20 + 100<<20
	job := testbed.Job(s.NS, "longlines").Task("w", 1, []string{"main"},
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: total, For: 20 * time.Second, Lines: []int{1 << 20, 100 << 20}, NoFinalNewline: true,
			// Quiet at first, so that the stream is open before the first byte: the start rule,
			// which a first line at 10 MB/s read late may rightly doubt, is not what this proves.
			Delay: 2 * time.Second}})).Obj()
	stack.CreateAs(t, s.Env, "erin", job)
	j := s.WaitArchived(t, job, 5*time.Minute)
	peak := peakRSS(t, s.Proc.PID())
	t.Logf("archiver peak RSS %d MiB", peak>>20)
	if peak > 200<<20 {
		t.Errorf("archiver peak RSS %d MiB for a 100 MiB line: memory follows the line", peak>>20)
	}
	uid := podUID(t, s, string(j.UID), testbed.PodName(job.Name, "w", 0))
	written := rn.Written(s.NS, uid, "main", 0)
	if len(written) != total {
		t.Fatalf("the container wrote %d bytes, want %d", len(written), total)
	}
	row := logRows(t, s, string(j.UID))["main/"+record.InstanceCurrent]
	g := s.Gaps(t, string(j.UID))
	if row.State == record.LogStored {
		got, _ := s.ReadLog(t, row.ObjectKey)
		if bytes.Equal(got, written) {
			if len(g) != 0 {
				t.Errorf("archive exact, yet gaps recorded: %+v", g)
			}
			return
		}
		p := commonPrefix(got, written)
		t.Logf("archived %d of %d bytes, the first %d of them exact", len(got), len(written), p)
	}
	if len(g) == 0 {
		t.Errorf("the archive is not what was written (row %s %s), and no gap is recorded", row.State, row.Reason)
	}
	t.Logf("gaps: %+v", g)
}

// peakRSS is the process's peak resident set size (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	return int64(st.VmHWM)
}

package realnode

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeAgentRestartFilePosition is issue 25's item 4 on the real node: the agent is killed
// with its position in a file the kubelet has just rotated; while it is down the kubelet rotates
// again and compresses that file. The lines around the position are stamped as a timestamp cannot
// place them (lines appended to the container's log file as containerd writes them, while the
// container is quiet): the last three stored are stamped T, T-0.3 s and T-0.3 s, and of those
// written while the agent is down the first is stamped T-0.3 s and the second T-5 s. A restart
// from the timestamp position (a second before T) stores the third again and leaves the fifth
// out; the restarted agent resumes from the file and offset recorded with its last segment, in
// the compressed file: every byte once, no gap.
func TestRealNodeAgentRestartFilePosition(t *testing.T) {
	t.Parallel()
	s, rn := rig(t)
	a := startAgent(t, s, rn, "--capture-segment-age=1s")
	// Held running until the kubelet has rotated and compressed the file, which it does only for a
	// running container: about 20 s after the start under make test's load (one 10 s pass to
	// rotate, the 6 s below, the next pass to compress), so 50 s leaves it more than twice that.
	job := agentJob(s, rn, "position", testbed.Workload{Bytes: 3 << 20, For: 3 * time.Second, Lines: []int{200}, Hold: 50 * time.Second})
	stack.CreateAs(t, s.Env, "erin", job)
	name := testbed.PodName(job.Name, "w", 0)
	p := waitWritten(t, s, rn, name, 3<<20)
	uid := string(p.UID)
	dir := filepath.Join(rn.PodLogsDir(), s.NS+"_"+name+"_"+uid, "main")
	cur := filepath.Join(dir, "0.log")
	expect := append([]byte(nil), rn.Written(s.NS, uid, "main", 0)...)
	appendRecords := func(lines ...criLine) {
		t.Helper()
		f, err := os.OpenFile(cur, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var b bytes.Buffer
		for _, l := range lines {
			fmt.Fprintf(&b, "%s %s F %s\n", l.ts.UTC().Format(time.RFC3339Nano), l.stream, l.msg)
			expect = append(expect, l.msg+"\n"...)
		}
		if _, err := f.Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	// More than the rotation size after the container's output, ending with the three lines
	// stamped T, T-0.3 s, T-0.3 s: the next rotation check rotates the file.
	held := inodeOf(t, cur)
	// Stamped after the container's lines (a second ahead of now: containerd stamps a line when it
	// reads it, after the workload recorded it written), T a second later.
	at := time.Now().Add(2 * time.Second)
	appendRecords(append(padding("before", at.Add(-time.Second), 6000),
		criLine{at, "stdout", "d1 stamped T"},
		criLine{at.Add(-300 * time.Millisecond), "stderr", "d2 stamped T-0.3s"},
		criLine{at.Add(-300 * time.Millisecond), "stdout", "d3 stamped T-0.3s as d2"})...)
	stored := func() int64 {
		runs, err := s.Records.AgentRuns(t.Context(), rn.Name)
		if err != nil || len(runs) != 1 {
			return 0
		}
		segs, err := s.Records.Segments(t.Context(), runs[0].PodUID, runs[0].Container, runs[0].Run)
		if err != nil || len(segs) == 0 {
			return 0
		}
		return segs[len(segs)-1].TotalBytes
	}
	// The file rotated (renamed: its inode under another name) and every byte of it stored.
	for deadline := time.Now().Add(time.Minute); inodeOf(t, cur) == held || stored() < int64(len(expect)); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("in a minute: %d bytes stored of %d, the file rotated: %v", stored(), len(expect), inodeOf(t, cur) != held)
		}
	}
	rotatedAt := time.Now()
	rotated := filepath.Join(dir, fileWithInode(dir, held))
	// Killed 6 s after the rotation, the next check (10 s after it) comes while the agent is down:
	// it compresses the rotated file that holds the agent's position.
	time.Sleep(time.Until(rotatedAt.Add(6 * time.Second))) // not a wait for a condition: where in the kubelet's period the agent dies
	a.Proc.Kill()
	killed := time.Now()
	appendRecords(append([]criLine{
		{at.Add(-300 * time.Millisecond), "stdout", "e1 stamped T-0.3s as d3, written while the agent was down"},
		{at.Add(-5 * time.Second), "stderr", "e2 stamped T-5s, written while the agent was down"}},
		padding("after", at.Add(time.Second), 6000)...)...)
	// Compressed: its .gz there, itself gone (its inode may be the next file's by now).
	for deadline := time.Now().Add(30 * time.Second); !exists(rotated+".gz") || exists(rotated); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet did not compress the rotated file %s in 30 s", rotated)
		}
	}
	t.Logf("agent killed %s after the rotation; the rotated file compressed (%s.gz) %s after the kill", killed.Sub(rotatedAt).Round(100*time.Millisecond), filepath.Base(rotated), time.Since(killed).Round(100*time.Millisecond))
	a.Start(t)
	t.Logf("agent back %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	_, row, got, _ := archived(t, s, rn, job, 3*time.Minute)
	log, _ := os.ReadFile(a.Proc.LogPath)
	if !regexp.MustCompile(`Resuming the capture from its position in the files.*` + regexp.QuoteMeta(uid) + `/main/0\.log\.[0-9-]+\.gz`).Match(log) {
		t.Errorf("the restarted agent did not resume from its position in the compressed file (%s)", a.Proc.LogPath)
	}
	t.Logf("kept %d of %d bytes", len(got), len(expect))
	if !bytes.Equal(got, expect) {
		missing, err := missingRanges(got, expect)
		t.Errorf("archived %d bytes, want %d: missing line ranges %v (%v); the archive's last lines:\n%s", len(got), len(expect), missing, err, around(got, "d1 stamped"))
	}
	if g := s.Gaps(t, row.JobUID); len(g) > 0 {
		t.Errorf("gaps %+v, want none", g)
	}
	s.CheckCapturedBy(t, row.JobUID, record.CapturedByAgent)
}

// criLine is one line appended to a container's CRI log file.
type criLine struct {
	ts     time.Time
	stream string
	msg    string
}

// padding is n lines of about 200 bytes named name, stamped from from on, a microsecond apart.
func padding(name string, from time.Time, n int) []criLine {
	out := make([]criLine, n)
	for i := range out {
		out[i] = criLine{from.Add(time.Duration(i) * time.Microsecond), "stdout", fmt.Sprintf("%s %05d %s", name, i, strings.Repeat("p", 180))}
	}
	return out
}

// inodeOf is the inode of path (0: none).
func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// fileWithInode names the file of dir with inode ino ("": none).
func fileWithInode(dir string, ino uint64) string {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if st, err := e.Info(); err == nil && st.Sys().(*syscall.Stat_t).Ino == ino {
			return e.Name()
		}
	}
	return ""
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// around is the archive's lines from the first holding marker on, a few.
func around(log []byte, marker string) string {
	i := bytes.Index(log, []byte(marker))
	if i < 0 {
		return "(" + marker + " not found)"
	}
	lines := strings.SplitAfterN(string(log[i:]), "\n", 7)
	return strings.Join(lines[:min(6, len(lines))], "")
}

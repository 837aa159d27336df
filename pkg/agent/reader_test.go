package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/capture"
)

// criLog builds CRI records and what pods/log with timestamps=true serves of them.
type criLog struct {
	t0     time.Time
	n      int
	file   bytes.Buffer // the records not yet written to a file
	served bytes.Buffer // pods/log's output
	stdout bytes.Buffer
	stderr bytes.Buffer
	open   bool // a line is open (its last record was partial)
}

// rec adds one record of content msg (without the file's newline) to stream; partial: tag P.
func (c *criLog) rec(stream, msg string, partial bool) {
	c.n++
	c.recAt(c.t0.Add(time.Duration(c.n)*time.Millisecond), stream, msg, partial)
}

// recAt adds one record stamped ts (see rec).
func (c *criLog) recAt(ts time.Time, stream, msg string, partial bool) {
	tag, content := "F", msg+"\n"
	if partial {
		tag, content = "P", msg
	}
	fmt.Fprintf(&c.file, "%s %s %s %s\n", ts.Format(time.RFC3339Nano), stream, tag, msg)
	if !c.open {
		c.served.WriteString(ts.Format("2006-01-02T15:04:05.000000000Z07:00") + " ")
	}
	c.served.WriteString(content)
	if stream == "stdout" {
		c.stdout.WriteString(content)
	} else {
		c.stderr.WriteString(content)
	}
	c.open = partial
}

// line adds one complete record of msg to stream and appends the records so far to path.
func (c *criLog) line(t *testing.T, path, stream, msg string) {
	t.Helper()
	c.rec(stream, msg, false)
	c.flush(t, path, false)
}

// flush appends the records so far to path (gz: as a gzip file of its own).
func (c *criLog) flush(t *testing.T, path string, gz bool) {
	t.Helper()
	b := c.file.Bytes()
	if gz {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(b)
		_ = zw.Close()
		b = z.Bytes()
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	c.file.Reset()
}

// logT0 is when the test logs' first records are stamped.
var logT0 = time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)

// logDir makes a pod logs dir (root) with the directory of run ref (dir).
func logDir(t *testing.T) (dir, root string) {
	t.Helper()
	root = t.TempDir()
	dir = filepath.Join(root, "ns_pod_uid1", "main")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, root
}

// startSource starts a file source over root, stopped when the test ends.
func startSource(t *testing.T, root string) *FileSource {
	t.Helper()
	s, stop := runSource(t, root)
	t.Cleanup(stop)
	return s
}

var ref = capture.Ref{Namespace: "ns", Pod: "pod", PodUID: "uid1", Container: "main"}

// readAll reads a stream and splits its content bytes by the tags, as capture asks for them.
func readAll(t *testing.T, rc io.ReadCloser) (string, map[capture.Stream]int64) {
	t.Helper()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	tagged := map[capture.Stream]int64{}
	for _, r := range rc.(capture.StreamTagger).Streams(0, int64(len(b))) {
		tagged[r.Stream] += r.Bytes
	}
	return string(b), tagged
}

// TestReadRotatedFiles: a run's compressed, rotated and current files are served in order as
// pods/log serves one file: partial records joined (also across streams), long records whole.
func TestReadRotatedFiles(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	c.rec("stdout", "one", false)
	c.rec("stderr", "two", false)
	c.flush(t, filepath.Join(dir, "0.log.20261125-010000.gz"), true)
	c.rec("stdout", strings.Repeat("a", 16<<10), true)
	c.rec("stdout", strings.Repeat("b", 100<<10), true)
	c.rec("stderr", "err-in-the-middle", true)
	c.rec("stdout", "end", false)
	c.flush(t, filepath.Join(dir, "0.log.20261125-010010"), false)
	c.rec("stdout", "", false)
	c.rec("stderr", "last", false)
	c.flush(t, filepath.Join(dir, "0.log"), false)
	s := startSource(t, root)
	rc, err := s.Open(t.Context(), ref, capture.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, tagged := readAll(t, rc)
	if got != c.served.String() {
		t.Fatalf("served %d bytes, want %d: %.200q", len(got), c.served.Len(), got)
	}
	if tagged[capture.StreamStdout] != int64(c.stdout.Len()) || tagged[capture.StreamStderr] != int64(c.stderr.Len()) {
		t.Errorf("tagged %v, want stdout %d stderr %d", tagged, c.stdout.Len(), c.stderr.Len())
	}
}

// TestFollowAcrossRotations: a follower that has not read a file before it is rotated, renamed
// and unlinked twice still reads it through the descriptor held since it appeared.
func TestFollowAcrossRotations(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	cur := filepath.Join(dir, "0.log")
	c.line(t, cur, "stdout", "first")
	s := startSource(t, root)
	for i := range 3 {
		// containerd writes, the kubelet renames, containerd writes a little more to the old
		// file, then reopens: the old file is unlinked (compressed away) before it is read.
		c.line(t, cur, "stdout", fmt.Sprintf("before rotation %d", i))
		rotated := filepath.Join(dir, fmt.Sprintf("0.log.20261125-0100%02d", i*10))
		if err := os.Rename(cur, rotated); err != nil {
			t.Fatal(err)
		}
		c.line(t, rotated, "stderr", fmt.Sprintf("late write %d", i))
		waitHeld(t, s, 1+i)
		if err := os.Remove(rotated); err != nil {
			t.Fatal(err)
		}
		c.line(t, cur, "stdout", fmt.Sprintf("after rotation %d", i))
		waitHeld(t, s, 2+i)
	}
	ctx, cancel := context.WithCancel(t.Context())
	rc, err := s.Open(ctx, ref, capture.OpenOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	want := c.served.String()
	got := make([]byte, 0, len(want))
	buf := make([]byte, 100)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		n, err := rc.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	cancel()
	if string(got) != want {
		t.Fatalf("followed\n%s\nwant\n%s", got, want)
	}
}

// waitHeld waits until the source holds n files of the run.
func waitHeld(t *testing.T, s *FileSource, n int) {
	t.Helper()
	k := RunKey{PodUID: "uid1", Container: "main"}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		got := 0
		if r := s.runs[k]; r != nil {
			got = len(r.files)
		}
		s.mu.Unlock()
		if got >= n {
			return
		}
	}
	t.Fatalf("the source does not hold %d files of the run", n)
}

// TestReadSince: records stamped before since are left out; the rest of a line begun before it is
// served without a timestamp, as the kubelet serves it.
func TestReadSince(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: time.Date(2026, 11, 25, 1, 0, 0, 997_000_000, time.UTC)}
	c.rec("stdout", "old", false)
	c.rec("stdout", "split-", true) // the second before since
	// "rest" at 01:00:01.000
	c.rec("stdout", "rest", false)
	c.flush(t, filepath.Join(dir, "0.log"), false)
	s := startSource(t, root)
	rc, err := s.Open(t.Context(), ref, capture.OpenOptions{Since: time.Date(2026, 11, 25, 1, 0, 1, 500_000_000, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(t, rc)
	if want := "rest\n"; got != want {
		t.Fatalf("served %q, want %q", got, want)
	}
}

// TestInodeReused: a file closed once its bytes are durable frees its inode, which the next log
// file may get: it is a new file all the same, held and served (on the real node 7.5 MiB of 100
// went missing when it was taken for the closed one).
func TestInodeReused(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	cur := filepath.Join(dir, "0.log")
	c.line(t, cur, "stdout", "in the first file")
	s := startSource(t, root)
	first := inodeOf(t, cur)
	rotated := filepath.Join(dir, "0.log.20261125-010000")
	if err := os.Rename(cur, rotated); err != nil {
		t.Fatal(err)
	}
	c.line(t, cur, "stdout", "in the second file")
	waitHeld(t, s, 2)
	rc, err := s.Open(t.Context(), ref, capture.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, rc) // drains the first file
	s.Durable(RunKey{PodUID: "uid1", Container: "main"}, c.t0.Add(time.Hour))
	if err := os.Remove(rotated); err != nil { // closed and removed: its inode is free
		t.Fatal(err)
	}
	if err := os.Rename(cur, filepath.Join(dir, "0.log.20261125-010010")); err != nil {
		t.Fatal(err)
	}
	c.line(t, cur, "stdout", "in the third file")
	if inodeOf(t, cur) != first {
		t.Fatalf("the third file did not get the first one's inode (%d): the file system did not reuse it, nothing is proven", first)
	}
	waitHeld(t, s, 3)
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return inode(st)
}

// TestLetGoUnownedFirst: past the held-bytes limit, the files of runs the agent does not own are
// let go before those of its own runs, older as they may be.
func TestLetGoUnownedFirst(t *testing.T) {
	root := t.TempDir()
	var letGo []RunKey
	s, err := NewFileSource(root, 1, func(k RunKey, _ LetGo) { letGo = append(letGo, k) }, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	own, other := RunKey{PodUID: "own", Container: "main"}, RunKey{PodUID: "other", Container: "main"}
	for _, k := range []RunKey{own, other} { // own's file is the older
		dir := filepath.Join(root, "ns_pod_"+k.PodUID, "main")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c := &criLog{t0: logT0}
		c.rec("stdout", "held", false)
		c.flush(t, filepath.Join(dir, "0.log"), false)
		if err := s.scanAll(); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, "0.log")); err != nil {
			t.Fatal(err)
		}
	}
	s.forgetUnowned(map[RunKey]bool{own: true}, time.Hour)
	s.bound() // both deleted files are over the limit of 1 byte: both go, the other's first
	if len(letGo) != 2 || letGo[0] != other {
		t.Fatalf("let go %v, want %v first", letGo, other)
	}
}

package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// TestRestartResumesFromFilePosition: an agent killed once its segments hold every line written
// resumes, after its file was rotated and compressed, from the file and offset recorded with its
// last segment, not from a timestamp. The lines around the kill are stamped as a timestamp
// position cannot tell apart: the last captured two share a timestamp earlier than the greatest
// (a resume by timestamp stores the second again), and a line written while the agent was down
// is stamped seconds before the position (a resume by timestamp, a second before it, leaves it
// out).
func TestRestartResumesFromFilePosition(t *testing.T) {
	dir, root := logDir(t)
	t0 := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	c := &criLog{t0: t0}
	for i := range 50 {
		c.rec("stdout", fmt.Sprintf("line %d %s", i, strings.Repeat("x", i)), false)
	}
	at := t0.Add(10 * time.Second)
	c.recAt(at, "stdout", "d1 the greatest timestamp", false)
	c.recAt(at.Add(-300*time.Millisecond), "stderr", "d2 stamped earlier", false)
	c.recAt(at.Add(-300*time.Millisecond), "stdout", "d3 stamped as d2", false)
	cur := filepath.Join(dir, "0.log")
	c.flush(t, cur, false)
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := &memRecords{}
	cfg := capture.Config{SegmentBytes: 200, SegmentAge: 20 * time.Millisecond, Poll: 10 * time.Millisecond, Retry: 20 * time.Millisecond}
	segKey := func(seq int32) string { return fmt.Sprintf("seg/%d", seq) }
	want := int64(len(stripTimestamps(c.served.String())))

	// The first agent follows the run until its segments hold every line, then is killed.
	ctx, kill := context.WithCancel(t.Context())
	s1, stop1 := runSource(t, root)
	done := make(chan error, 1)
	running := func(context.Context) (capture.End, error) { return capture.End{}, nil }
	go func() {
		_, err := capture.Capture(ctx, cfg, s1, s1.Records(recs), store, segKey, ref, running, nil)
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); storedBytes(recs) < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stored %d bytes of %d in 10 s", storedBytes(recs), want)
		}
	}
	kill()
	<-done
	stop1()

	// While it is down the kubelet rotates and compresses the file, and the container writes on.
	rotated := filepath.Join(dir, "0.log.20261125-010010.gz")
	gzipFile(t, cur, rotated)
	c.recAt(at.Add(-300*time.Millisecond), "stdout", "e1 stamped as d3, written while the agent was down", false)
	c.recAt(at.Add(-5*time.Second), "stderr", "e2 stamped seconds before the position", false)
	c.recAt(at.Add(time.Second), "stdout", "e3 the last", false)
	c.flush(t, cur, false)

	s2, stop2 := runSource(t, root)
	defer stop2()
	waitHeld(t, s2, 2)
	over := func(context.Context) (capture.End, error) { return capture.End{Over: true}, nil }
	if _, err := capture.Capture(t.Context(), cfg, s2, s2.Records(recs), store, segKey, ref, over, nil); err != nil {
		t.Fatal(err)
	}
	archivedAsServed(t, recs, store, c)
}

// archivedAsServed fails the test unless the capture recorded no gap and its segments assemble
// into exactly what pods/log serves of c (its records' content, without their timestamps).
func archivedAsServed(t *testing.T, recs *memRecords, store objstore.Store, c *criLog) {
	t.Helper()
	if len(recs.gaps) > 0 {
		t.Errorf("gaps %+v, want none", recs.gaps)
	}
	segs, _ := recs.Segments(t.Context(), "", "", 0)
	if _, err := capture.Assemble(t.Context(), store, ref, "log", segs, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got, want := string(readObject(t, store, "log", true)), stripTimestamps(c.served.String()); got != want {
		t.Fatalf("archived %d bytes, pods/log serves %d; the archive ends\n%s\nwant\n%s", len(got), len(want), tail(got), tail(want))
	}
}

// runSource starts a file source over root; stop stops it (the agent's end).
func runSource(t *testing.T, root string) (*FileSource, func()) {
	t.Helper()
	s, err := NewFileSource(root, 0, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	return s, func() { cancel(); <-done }
}

// storedBytes is the size of the log the recorded segments hold.
func storedBytes(m *memRecords) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.segs) == 0 {
		return 0
	}
	return m.segs[len(m.segs)-1].TotalBytes
}

// gzipFile compresses from into to and removes from, as the kubelet compresses a rotated file.
func gzipFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	c := &criLog{}
	c.file.Write(b)
	c.flush(t, to, true)
	if err := os.Remove(from); err != nil {
		t.Fatal(err)
	}
}

// tail is the end of a log, for a failure's message.
func tail(s string) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[max(0, len(lines)-8):], "")
}

// TestRestartsInsideLines: an agent killed again and again, its segments ending inside long lines
// (and lines split into partial records), resumes each time from the file position of its last
// segment: the archive is what pods/log serves, no byte lost or doubled, no gap.
func TestRestartsInsideLines(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	for i := range 40 {
		c.rec("stdout", fmt.Sprintf("long %d %s", i, strings.Repeat("l", 30<<10)), i%3 == 0)
		c.rec("stderr", fmt.Sprintf("short %d", i), false)
	}
	c.rec("stdout", "end", false)
	c.flush(t, filepath.Join(dir, "0.log.20261125-010000"), false)
	c.rec("stdout", "in the current file", false)
	c.flush(t, filepath.Join(dir, "0.log"), false)
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := &memRecords{}
	cfg := capture.Config{SegmentBytes: 50 << 10, SegmentAge: time.Hour, Poll: 10 * time.Millisecond, Retry: 20 * time.Millisecond}
	segKey := func(seq int32) string { return fmt.Sprintf("seg/%d", seq) }
	over := func(context.Context) (capture.End, error) { return capture.End{Over: true}, nil }
	restarts := 0
	for ; ; restarts++ {
		if restarts > 100 {
			t.Fatal("not complete after 100 restarts")
		}
		s, stop := runSource(t, root)
		ctx, kill := context.WithCancel(t.Context())
		_, err := capture.Capture(ctx, cfg, s, s.Records(killAfter{recs, 3, new(int), kill}), store, segKey, ref, over, nil)
		kill()
		stop()
		if err == nil {
			break
		}
	}
	if restarts < 3 {
		t.Fatalf("%d restarts, want several", restarts)
	}
	archivedAsServed(t, recs, store, c)
}

// killAfter kills the capture (cancels its context) once it recorded n segments.
type killAfter struct {
	*memRecords
	n    int
	puts *int
	kill func()
}

func (k killAfter) PutSegment(ctx context.Context, s record.Segment) error {
	if err := k.memRecords.PutSegment(ctx, s); err != nil {
		return err
	}
	if *k.puts++; *k.puts >= k.n {
		k.kill()
		return context.Canceled
	}
	return nil
}

// TestPositionRoundTrip: a position encodes and decodes to itself; what is not one is refused.
func TestPositionRoundTrip(t *testing.T) {
	p := filePos{id: fileID{ino: 1234, gz: true, headLen: headSize, headHash: 0xfeedface}, off: 1 << 40, cut: true}
	got, err := decodePosition(encodePosition(p))
	if err != nil || *got != p {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, p)
	}
	if got, err := decodePosition(nil); got != nil || err != nil {
		t.Errorf("no position decoded to %+v, %v", got, err)
	}
	if _, err := decodePosition([]byte{9, 9, 9}); err == nil {
		t.Error("a short position decoded")
	}
}

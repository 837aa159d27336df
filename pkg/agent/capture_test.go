package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// TestCaptureStreamIndex: the capture loop over the file source stores what pods/log would serve,
// in segments cut inside lines, resumed after failures without a byte lost or doubled, and the stream index assembled beside it splits it back into
// exactly what each stream wrote, lines split by the other stream's records included.
func TestCaptureStreamIndex(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	for i := range 200 {
		c.rec("stdout", fmt.Sprintf("out %d %s", i, strings.Repeat("o", i*7)), i%5 == 0)
		c.rec("stderr", fmt.Sprintf("err %d", i), false)
	}
	c.rec("stdout", "end", false)
	c.flush(t, filepath.Join(dir, "0.log"), false)
	s := startSource(t, root)
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := &memRecords{failEvery: 7}
	cfg := capture.Config{SegmentBytes: 1000, SegmentAge: time.Hour, Poll: 10 * time.Millisecond, Retry: 20 * time.Millisecond}
	over := func(context.Context) (capture.End, error) { return capture.End{Over: true}, nil }
	segKey := func(seq int32) string { return fmt.Sprintf("seg/%d", seq) }
	// Every seventh segment fails to be recorded: the capture ends, and is run again from what is
	// recorded (resumed from the files by timestamp, as after an agent restart).
	restarts := 0
	for {
		_, err := capture.Capture(t.Context(), cfg, s, s.Records(recs), store, segKey, ref, over, nil)
		if err == nil {
			break
		}
		if restarts++; restarts > 100 {
			t.Fatal(err)
		}
	}
	if restarts < 3 {
		t.Fatalf("%d restarts, want several", restarts)
	}
	if len(recs.gaps) > 0 {
		t.Errorf("gaps %+v, want none", recs.gaps)
	}
	segs, _ := recs.Segments(t.Context(), "", "", 0)
	if len(segs) < 10 {
		t.Fatalf("%d segments, want many", len(segs))
	}
	if _, err := capture.Assemble(t.Context(), store, ref, "log", segs, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got := readObject(t, store, "log", true)
	index := readObject(t, store, "log"+archive.StreamsSuffix, false)
	if want := stripTimestamps(c.served.String()); string(got) != want {
		t.Fatalf("archived %d bytes, pods/log serves %d", len(got), len(want))
	}
	stdout, stderr, err := capture.SplitStreams(got, index)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stdout, c.stdout.Bytes()) || !bytes.Equal(stderr, c.stderr.Bytes()) {
		t.Errorf("split into %d and %d bytes, written %d to stdout and %d to stderr", len(stdout), len(stderr), c.stdout.Len(), c.stderr.Len())
	}
}

// stripTimestamps removes the timestamps pods/log puts before each line.
func stripTimestamps(served string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(served, "\n") {
		if _, rest, ok := strings.Cut(l, " "); ok {
			b.WriteString(rest)
		}
	}
	return b.String()
}

func readObject(t *testing.T, store objstore.Store, key string, gz bool) []byte {
	t.Helper()
	rc, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if gz {
		zr, err := gzip.NewReader(rc)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// memRecords keeps a capture's records in memory.
type memRecords struct {
	mu   sync.Mutex
	segs []record.Segment
	gaps []record.Gap
	// failEvery, when set, fails every failEvery-th PutSegment.
	failEvery, puts int
}

// Segments returns the run's segments; podUID "": every run's.
func (m *memRecords) Segments(_ context.Context, podUID, container string, run int32) ([]record.Segment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []record.Segment
	for _, s := range m.segs {
		if podUID == "" || s.PodUID == podUID && s.Container == container && s.Run == run {
			out = append(out, s)
		}
	}
	return out, nil
}

func (m *memRecords) PutSegment(_ context.Context, s record.Segment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.puts++; m.failEvery > 0 && m.puts%m.failEvery == 0 {
		return errors.New("database down")
	}
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

package capture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/inspect"
)

// longLine is a node whose container wrote one line of size bytes, pseudo-random (gzip cannot
// shrink it), without newline, and ended.
type longLine struct {
	size int64
	ts   time.Time
}

func (n longLine) Open(context.Context, Ref, OpenOptions) (io.ReadCloser, error) {
	prefix := strings.NewReader(n.ts.Format(time.RFC3339Nano) + " ")
	return io.NopCloser(io.MultiReader(prefix, io.LimitReader(noNewlines{rand.NewChaCha8([32]byte{1})}, n.size))), nil
}

// noNewlines reads random bytes, none of them a newline.
type noNewlines struct{ r io.Reader }

func (n noNewlines) Read(p []byte) (int, error) {
	k, err := n.r.Read(p)
	for i, b := range p[:k] {
		if b == '\n' {
			p[i] = 'n'
		}
	}
	return k, err
}

// TestCaptureHoldsALongLineInBoundedMemory: one 256 MiB line without newline is captured
// byte-exact while the heap grows by far less than the line (before: the line was held whole,
// two to three times over).
func TestCaptureHoldsALongLineInBoundedMemory(t *testing.T) {
	const size = 256 << 20
	r := newRig(t)
	r.cfg = DefaultConfig
	src := longLine{size: size, ts: r.t0}
	want := sha256.New()
	if _, err := io.Copy(want, io.LimitReader(noNewlines{rand.NewChaCha8([32]byte{1})}, size)); err != nil {
		t.Fatal(err)
	}

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	_, err := Capture(t.Context(), r.cfg, src, r.recs, r.store, r.segKey, r.ref, func(context.Context) (End, error) { return End{Over: true}, nil }, nil)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	grew := int64(peak) - int64(base.HeapInuse)
	t.Logf("heap in use grew by %d MiB at its peak while capturing a %d MiB line", grew>>20, size>>20)
	if grew > 96<<20 {
		t.Errorf("heap in use grew by %d MiB for a %d MiB line, want at most 96 MiB (segments of 8 MiB, compressed in memory, and the garbage the collector lets grow)", grew>>20, size>>20)
	}

	segs, err := r.recs.Segments(t.Context(), r.ref.PodUID, r.ref.Container, r.ref.Run)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Assemble(t.Context(), r.store, r.ref, "final.log.gz", segs, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := countingCopy(got, func(w io.Writer) error { return inspect.Cat(t.Context(), r.store, a.Key, w) })
	if err != nil {
		t.Fatal(err)
	}
	if sum := hex.EncodeToString(want.Sum(nil)); n != size || a.Bytes != size || hex.EncodeToString(got.Sum(nil)) != sum || a.SHA256 != sum {
		t.Errorf("stored %d bytes (recorded %d, sha256 %s), want the %d bytes written (sha256 %s)", n, a.Bytes, a.SHA256, size, sum)
	}
}

type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return c.w.Write(p) }

func countingCopy(w io.Writer, fill func(io.Writer) error) (int64, error) {
	c := &counter{w: w}
	err := fill(c)
	return c.n, err
}

// fuzzRecord is one record of a fuzzed container log.
type fuzzRecord struct {
	ts      time.Time
	data    string
	partial bool
}

// fuzzLog decodes a fuzzer's bytes into a container log (records with timestamps that go back
// and forth, lines long and short, split into partial records) and the points at which the
// capture's stream breaks.
func fuzzLog(b []byte) (recs []fuzzRecord, breaks map[int]bool) {
	ts := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	breaks = map[int]bool{}
	for i := 0; i+2 < len(b) && len(recs) < 200; i += 3 {
		op, arg, n := b[i], b[i+1], int(b[i+2])
		switch op % 4 {
		case 0:
			ts = ts.Add(time.Duration(arg) * time.Millisecond * 7) // crosses seconds
		case 1:
			// Stamped out of order (stdout against stderr): a line's start only, as the records
			// of one line come from one stream, in order.
			if len(recs) == 0 || !recs[len(recs)-1].partial {
				ts = ts.Add(-time.Duration(arg%8) * time.Microsecond)
			}
		}
		data := strings.Repeat(string(rune('a'+arg%26)), n%40) + fmt.Sprint(len(recs))
		partial := op&4 != 0
		if !partial {
			data += "\n"
		}
		recs = append(recs, fuzzRecord{ts: ts, data: data, partial: partial})
		if op&8 != 0 {
			breaks[len(recs)] = true
		}
	}
	return recs, breaks
}

// FuzzReadLines drives the line parser and the resume through fuzzed logs: timestamps that go
// back (by microseconds, at a line's start), lines split into partial records across seconds,
// pieces of every size, and streams broken and reopened anywhere. Whatever the log, the capture
// stores exactly what was written, once, with no gap. Streams are read synchronously (no timing),
// as the kubelet's reader serves them: sinceTime filters each record, and only a line's first
// record carries its timestamp.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte{0, 10, 5, 1, 3, 4, 8, 200, 30, 4, 143, 12, 0, 1, 2, 9, 0, 0})
	f.Add([]byte{0, 140, 20, 4, 1, 1, 12, 150, 39, 0, 150, 3, 5, 2, 2, 8, 2, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, breaks := fuzzLog(b)
		var want bytes.Buffer
		for _, r := range recs {
			want.WriteString(r.data)
		}
		r := newRig(t)
		r.cfg.SegmentBytes = 64
		c, err := resume(t.Context(), r.cfg, r.recs, r.store, r.segKey, r.ref)
		if err != nil {
			t.Fatal(err)
		}
		c.bind.final = true // the container's only run: every read is its own
		for from := 0; from < len(recs); {
			to := from + 1
			for to < len(recs) && !breaks[to] {
				to++
			}
			if err := fuzzStream(t, c, recs, to); err != nil {
				t.Fatal(err)
			}
			from = to
		}
		if err := c.flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		r.want = want
		r.check(t)
		if len(r.recs.gaps) != 0 {
			t.Errorf("gaps %+v, want none", r.recs.gaps)
		}
	})
}

// fuzzStream opens a stream as the capture does, serves it the first n records of the log as the
// kubelet would, and feeds what readLines parses of it to the capture, in pieces of 7 bytes.
func fuzzStream(t *testing.T, c *capture, recs []fuzzRecord, n int) error {
	var since time.Time
	src := sourceFunc(func(_ context.Context, _ Ref, opts OpenOptions) (io.ReadCloser, error) {
		since = opts.Since.Truncate(time.Second)
		return nil, nil
	})
	if _, err := c.open(t.Context(), src, OpenOptions{Follow: true}); err != nil {
		return err
	}
	var stream bytes.Buffer
	newLine := true
	for _, r := range recs[:n] {
		prefix := newLine
		newLine = !r.partial
		if !since.IsZero() && r.ts.Before(since) {
			continue
		}
		if prefix {
			stream.WriteString(r.ts.Format(time.RFC3339Nano) + " ")
		}
		stream.WriteString(r.data)
	}
	lines := make(chan line)
	errc := make(chan error, 1)
	go func() { errc <- readLines(t.Context(), smallReads{&stream}, lines, c.resuming); close(lines) }()
	for l := range lines {
		if err := c.add(t.Context(), l); err != nil {
			return err
		}
	}
	return <-errc
}

type sourceFunc func(context.Context, Ref, OpenOptions) (io.ReadCloser, error)

func (f sourceFunc) Open(ctx context.Context, ref Ref, opts OpenOptions) (io.ReadCloser, error) {
	return f(ctx, ref, opts)
}

// smallReads returns at most 7 bytes a read, as a network stream may.
type smallReads struct{ r io.Reader }

func (s smallReads) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), 7)]) }

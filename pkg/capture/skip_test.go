package capture

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// TestSkipWatch feeds the watch a stream at 1 MiB/s (10 KiB lines, 10 ms apart) and then one
// jump, and checks which jumps it takes for a possible skip of rotated files.
func TestSkipWatch(t *testing.T) {
	const maxSize = 256 << 10
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name      string
		maxSize   int64
		lag, jump time.Duration
		want      bool
	}{
		// A stream that keeps up loses the rest of a file that rotates while the reader waits:
		// a pause longer than ever where the file may fill is a possible loss; one where it cannot
		// (10 MiB files, 1 MiB filled) is a pause.
		{"caught up, the container pauses where the file may rotate", maxSize, 5 * time.Millisecond, 2 * time.Second, true},
		{"caught up, the container pauses far from a rotation", 10 << 20, 5 * time.Millisecond, 2 * time.Second, false},
		{"behind, a jump a file long", maxSize, 2 * time.Second, time.Second, true},
		{"behind, the next line as usual", maxSize, 2 * time.Second, 10 * time.Millisecond, false},
		{"behind, a jump shorter than half a file", maxSize, 2 * time.Second, 100 * time.Millisecond, false},
		{"a jump a file long, behind by less than half a file, where the file may rotate", maxSize, 100 * time.Millisecond, time.Second, true},
		{"a jump a file long, behind by less than half a file, far from a rotation", 10 << 20, 100 * time.Millisecond, time.Second, false},
		{"watch off", 0, 2 * time.Second, time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := skipWatch{maxSize: c.maxSize}
			ts := t0
			data := []byte(strings.Repeat("x", 10<<10-1) + "\n")
			for i := range 100 {
				if why := w.take(line{ts: ts, data: data, fileBytes: len(data)}, ts.Add(c.lag)); why != "" {
					t.Fatalf("line %d of a steady stream taken for a skip: %s", i, why)
				}
				ts = ts.Add(10 * time.Millisecond)
			}
			ts = ts.Add(c.jump - 10*time.Millisecond)
			why := w.take(line{ts: ts, data: data, fileBytes: len(data)}, ts.Add(c.lag))
			if got := why != ""; got != c.want {
				t.Errorf("a jump of %s while %s behind: possible skip %v (%q), want %v", c.jump, c.lag, got, why, c.want)
			}
		})
	}
}

// TestSkipWatchBursts: a container writes a rotated file's worth at once (300 KiB against 256 KiB)
// every 100 ms. Each pause between its bursts could hold a file at its rate, but a stream that
// falls behind is not taken for skipping at each of them: only a jump longer than its pauses (one
// burst missing) is.
func TestSkipWatchBursts(t *testing.T) {
	w := skipWatch{maxSize: 256 << 10}
	ts := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	data := []byte(strings.Repeat("x", 10<<10-1) + "\n")
	burst := func(lag time.Duration) string {
		var why string
		for i := range 30 {
			if w := w.take(line{ts: ts, data: data, fileBytes: len(data)}, ts.Add(lag)); w != "" && why == "" {
				why = fmt.Sprintf("line %d: %s", i, w)
			}
			ts = ts.Add(time.Microsecond)
		}
		ts = ts.Add(100*time.Millisecond - 30*time.Microsecond)
		return why
	}
	for i := range 20 {
		if why := burst(5 * time.Millisecond); why != "" {
			t.Fatalf("burst %d, stream caught up: taken for a skip: %s", i, why)
		}
	}
	for i := range 10 {
		if why := burst(5 * time.Second); why != "" {
			t.Fatalf("burst %d, stream 5 s behind: taken for a skip: %s", i, why)
		}
	}
	ts = ts.Add(100 * time.Millisecond) // a burst the stream never saw
	if why := burst(5 * time.Second); why == "" {
		t.Errorf("a burst missing while 5 s behind: not taken for a possible skip")
	}
}

// TestSkipWatchNodeClockAhead: the node's clock is 10 s ahead of the archiver's, so every lag
// measured (arrival minus timestamp) is about 10 s short, negative for a stream that keeps up.
// A stream that then falls a file behind and jumps a file long is still taken for a possible skip
// (before: a negative lag read as "kept up", which turned the watch off).
func TestSkipWatchNodeClockAhead(t *testing.T) {
	const skew = -10 * time.Second
	w := skipWatch{maxSize: 256 << 10}
	ts := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	data := []byte(strings.Repeat("x", 10<<10-1) + "\n")
	for i := range 100 { // caught up: 5 ms behind
		if why := w.take(line{ts: ts, data: data, fileBytes: len(data), start: true}, ts.Add(skew+5*time.Millisecond)); why != "" {
			t.Fatalf("line %d of a steady stream taken for a skip: %s", i, why)
		}
		ts = ts.Add(10 * time.Millisecond)
	}
	for range 100 { // falls 2 s behind
		w.take(line{ts: ts, data: data, fileBytes: len(data), start: true}, ts.Add(skew+2*time.Second))
		ts = ts.Add(10 * time.Millisecond)
	}
	ts = ts.Add(time.Second)
	if why := w.take(line{ts: ts, data: data, fileBytes: len(data), start: true}, ts.Add(skew+2*time.Second)); why == "" {
		t.Errorf("a jump of 1 s while 2 s behind, on a node 10 s ahead: not taken for a possible skip")
	}
}

// TestSkipWatchOutlivesAReopen: the watch learns the container's rate in one follow stream; the
// stream breaks and is reopened; a jump a rotated file long right after the reopen, while the
// stream is behind, is still taken for a possible skip (before: each stream's watch started from
// zero, and learnt the rate again only over its first quarter second).
func TestSkipWatchOutlivesAReopen(t *testing.T) {
	r := newRig(t)
	r.cfg.NodeLogMaxSize, r.cfg.SegmentBytes, r.cfg.SegmentAge = 256<<10, 64<<20, time.Hour
	var mu sync.Mutex
	var latest time.Time // the latest line read, from its lag (a little later than its timestamp)
	r.cfg.ObserveLag = func(lag time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if at := time.Now().Add(-lag); at.After(latest) {
			latest = at
		}
	}
	readTo := func(ts time.Time) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return !latest.Before(ts) }
	}
	done := r.start(t.Context())
	data := strings.Repeat("x", 10<<10-1) + "\n"
	ts := r.t0
	for range 100 { // 1 MiB/s
		r.writeAt(ts, data)
		ts = ts.Add(10 * time.Millisecond)
	}
	waitFor(t, "read", readTo(ts.Add(-10*time.Millisecond)))
	r.node.breakStreams()
	waitFor(t, "reopened", func() bool { r.node.mu.Lock(); defer r.node.mu.Unlock(); return r.node.opens >= 2 })
	r.writeAt(ts, data)
	r.writeAt(ts.Add(time.Second), data) // a rotated file's worth (256 KiB) at that rate: maybe skipped
	waitFor(t, "read", readTo(ts.Add(time.Second)))
	r.end(t, done)
	r.check(t)
	if len(r.recs.gaps) != 1 || r.recs.gaps[0].Reason != record.GapMaybeRotated || !r.recs.gaps[0].Before.Equal(ts.Add(time.Second)) {
		t.Errorf("gaps %+v, want one %q before the jump's end (%s)", r.recs.gaps, record.GapMaybeRotated, ts.Add(time.Second))
	}
}

// TestSkipWatchEarlyInTheStream: a container writes 150 KiB every 50 ms into 1 MiB files (as
// TestCaptureRecordsSkippedFilesAsGap's does); its stream, 400 ms behind from the start, jumps
// 300 ms after its first 200 ms, before a whole rate window was measured: five chunks, 750 KiB,
// that the node's reader may have skipped. The jump is taken for a possible skip (before: with no
// rate measured yet, nothing in a stream's first quarter second was).
func TestSkipWatchEarlyInTheStream(t *testing.T) {
	for _, lag := range []time.Duration{400 * time.Millisecond, 5 * time.Millisecond} {
		t.Run(fmt.Sprintf("lag=%s", lag), func(t *testing.T) {
			w := skipWatch{maxSize: 1 << 20}
			t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
			data := []byte(strings.Repeat("x", 1<<10-1) + "\n")
			chunk := func(i int) string {
				var why string
				ts := t0.Add(time.Duration(i) * 50 * time.Millisecond)
				for j := range 150 {
					if w := w.take(line{ts: ts, data: data, fileBytes: len(data)}, ts.Add(lag)); w != "" && why == "" {
						why = fmt.Sprintf("chunk %d line %d: %s", i, j, w)
					}
					ts = ts.Add(time.Microsecond)
				}
				return why
			}
			for i := range 5 {
				if why := chunk(i); why != "" {
					t.Fatalf("a steady stream taken for a skip: %s", why)
				}
			}
			if why := chunk(10); why == "" {
				t.Errorf("chunks 5 to 9 (750 KiB of a 1 MiB file) missing %s behind, in the stream's first 250 ms: not taken for a possible skip", lag)
			}
		})
	}
}

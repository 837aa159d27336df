package capture

import (
	"fmt"
	"strings"
	"testing"
	"time"
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

package capture

import (
	"fmt"
	"testing"
	"time"
)

// TestCaptureKeepsOutOfOrderLines: containerd stamps stdout and stderr in separate goroutines
// before it takes its write lock, and a node's clock can step back, so a live stream carries lines
// whose timestamps are earlier than the line before. Every one of them is stored, none twice, also
// across a reopened stream, and no gap is recorded.
func TestCaptureKeepsOutOfOrderLines(t *testing.T) {
	r := newRig(t)
	done := r.start(t.Context())
	us := func(n int) time.Time { return r.t0.Add(time.Duration(n) * time.Microsecond) }
	r.writeAt(us(2), "stdout: stamped second, written first\n")
	r.writeAt(us(1), "stderr: stamped first\n")
	r.writeAt(us(3), "stdout: third\n")
	waitFor(t, "followed", func() bool { r.node.mu.Lock(); defer r.node.mu.Unlock(); return r.node.opens > 0 })
	time.Sleep(100 * time.Millisecond)
	r.node.breakStreams() // the reopened stream replays from the second of the last line
	r.writeAt(us(5), "stdout: after the break\n")
	r.writeAt(us(4), "stderr: after the break, stamped earlier\n")
	time.Sleep(100 * time.Millisecond)
	// Within the second the reopened stream starts before the greatest timestamp: the kubelet's
	// reader filters every record of a stream by sinceTime, a stream's live ones too.
	r.writeAt(r.t0.Add(-500*time.Millisecond), "stdout: the node's clock stepped back\n")
	r.writeAt(us(6), "stdout: last\n")
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	r.check(t)
	if len(r.recs.gaps) != 0 {
		t.Errorf("gaps %+v, want none", r.recs.gaps)
	}
}

// TestCaptureResumesAfterALineSplitAcrossASecond: a long line split into partial records whose
// records straddle a second boundary. A stream reopened with sinceTime in the later second starts
// with the rest of that line, without timestamp (the kubelet prefixes only a line's first record):
// the capture skips it, as it holds the line already, and goes on.
func TestCaptureResumesAfterALineSplitAcrossASecond(t *testing.T) {
	r := newRig(t)
	done := r.start(t.Context())
	r.node.writeRecord(fakeLine{ts: r.t0.Add(900 * time.Millisecond), data: "a long line, its first record ", partial: true})
	r.node.writeRecord(fakeLine{ts: r.t0.Add(1100 * time.Millisecond), data: "and its last\n"})
	r.want.WriteString("a long line, its first record and its last\n")
	r.writeAt(r.t0.Add(1200*time.Millisecond), "the next line\n")
	time.Sleep(100 * time.Millisecond)
	for i := range 3 {
		r.node.breakStreams()
		time.Sleep(50 * time.Millisecond)
		r.writeAt(r.t0.Add(time.Duration(1300+i)*time.Millisecond), fmt.Sprintf("after break %d\n", i))
	}
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	r.check(t)
	if len(r.recs.gaps) != 0 {
		t.Errorf("gaps %+v, want none", r.recs.gaps)
	}
}

// TestCaptureKeepsRepeatedLines: lines alike in timestamp and content are distinct lines of a live
// stream (CRI-O stamps every line of one read alike; a container prints the same empty or
// progress line twice), not a replay of the node's reader, which starts over from the file's
// first line, stamped before the line the stream gave last. Every one is stored.
func TestCaptureKeepsRepeatedLines(t *testing.T) {
	r := newRig(t)
	done := r.start(t.Context())
	at := r.t0.Add(time.Microsecond)
	for _, s := range []string{"first\n", "\n", "\n", "progress\n", "tick\n", "progress\n", "\n"} {
		r.writeAt(at, s)
	}
	r.writeAt(r.t0.Add(2*time.Microsecond), "last\n")
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	r.check(t)
	if len(r.recs.gaps) != 0 {
		t.Errorf("gaps %+v, want none", r.recs.gaps)
	}
}

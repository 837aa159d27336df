package capture

import (
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// TestCaptureKeepsALineSharingANanosecondAcrossARotation: two lines captured share one
// nanosecond; while the stream is broken the node rotates its file and the container writes one
// more line with that same nanosecond. The reopened stream starts with it: it is a new line, not
// one of the two already captured (before: counted as such and dropped, with no gap). It is
// stored, and the rotation is a gap.
func TestCaptureKeepsALineSharingANanosecondAcrossARotation(t *testing.T) {
	r := newRig(t)
	done := r.start(t.Context())
	ts := r.t0.Add(time.Millisecond)
	r.node.write(ts, "first\n")
	r.node.write(ts, "second\n")
	r.want.WriteString("first\nsecond\n")
	waitFor(t, "captured", func() bool { return r.segments() > 0 }) // 50 ms segments
	// At once, with the stream idle: it breaks, the file rotates, the line is written.
	r.node.mu.Lock()
	close(r.node.breakCh)
	r.node.breakCh = make(chan struct{})
	r.node.current = len(r.node.lines)
	r.node.lines = append(r.node.lines, fakeLine{ts: ts, data: "third, same nanosecond\n"})
	r.node.mu.Unlock()
	r.want.WriteString("third, same nanosecond\n")
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	r.check(t)
	if len(r.recs.gaps) != 1 || r.recs.gaps[0].Reason != record.GapRotated {
		t.Errorf("gaps %+v, want one: the rotation", r.recs.gaps)
	}
}

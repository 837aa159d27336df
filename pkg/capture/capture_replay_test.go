package capture

import (
	"fmt"
	"testing"
	"time"
)

// TestCaptureDropsALongReplay: the node's reader replays a file of more lines than the
// fingerprints hold (6,000 against 4,096): nothing is stored twice.
func TestCaptureDropsALongReplay(t *testing.T) {
	r := newRig(t)
	r.cfg.SegmentBytes = 1 << 20
	var mu = &r.node.mu
	read := 0
	r.cfg.ObserveLag = func(time.Duration) { mu.Lock(); read++; mu.Unlock() }
	done := r.start(t.Context())
	for i := range 6000 {
		r.writeAt(r.t0.Add(time.Duration(i)*time.Microsecond), fmt.Sprintf("line %04d of a long file\n", i))
	}
	waitFor(t, "read", func() bool { mu.Lock(); defer mu.Unlock(); return read >= 6000 })
	r.node.replayStreams()
	time.Sleep(300 * time.Millisecond)
	r.writeAt(r.t0.Add(time.Second), "after the replay\n")
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	r.check(t)
}

package capture

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// randomLine is a line of n-1 incompressible bytes and a newline.
func randomLine(rng *rand.ChaCha8, n int) string {
	b := make([]byte, n)
	_, _ = rng.Read(b)
	return strings.ReplaceAll(string(b[:n-1]), "\n", "x") + "\n"
}

// TestBudgetBoundsSegmentsOfAllCaptures: four captures follow containers writing incompressible
// output; their segments (8 MiB each, uncompressed) would hold all 8 MiB they write. With a budget
// of 1 MiB, what the captures hold together beyond their floors never goes past it: their
// segments are stored early instead, every byte is archived, and the budget is given back once
// they end.
func TestBudgetBoundsSegmentsOfAllCaptures(t *testing.T) {
	const (
		captures = 4
		written  = 2 << 20 // by each container
		limit    = 1 << 20
	)
	budget := NewBudget(limit)
	rigs := make([]*rig, captures)
	dones := make([]chan error, captures)
	for i := range rigs {
		r := newRig(t)
		r.cfg.SegmentBytes, r.cfg.SegmentAge, r.cfg.Memory = 8<<20, time.Hour, budget
		rigs[i], dones[i] = r, r.start(t.Context())
	}
	var (
		peak int64
		mu   sync.Mutex
		stop = make(chan struct{})
	)
	go func() { // what the captures hold, sampled while they run
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			mu.Lock()
			peak = max(peak, budget.Used())
			mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	for i, r := range rigs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.NewChaCha8([32]byte{byte(i)})
			for n := 0; n < written; n += 4 << 10 {
				r.write(randomLine(rng, 4<<10), false)
			}
		}()
	}
	wg.Wait()
	for i, r := range rigs {
		r.end(t, dones[i])
		r.check(t)
		if r.segments() < 2 {
			t.Errorf("capture %d stored %d segments, want several: its 2 MiB do not fit the budget", i, r.segments())
		}
	}
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	if peak > limit {
		t.Errorf("the captures held %d bytes together beyond their floors, want at most the budget's %d", peak, limit)
	}
	if peak == 0 {
		t.Error("nothing was ever held of the budget: the captures did not use it")
	}
	if used := budget.Used(); used != 0 {
		t.Errorf("%d bytes still held once every capture ended, want 0", used)
	}
}

// TestBudgetBoundsARunReadAfterItEnded: a run read only after it ended is held back whole until it
// is known whether its start may have been rotated away (up to nine tenths of the node's rotation
// size). The budget bounds that too: when it is short, the run gets its "possibly rotated" gap at
// once and its segments are stored early; every byte is archived.
func TestBudgetBoundsARunReadAfterItEnded(t *testing.T) {
	const limit = 256 << 10
	budget := NewBudget(limit)
	r := newRig(t)
	r.cfg.SegmentBytes, r.cfg.SegmentAge, r.cfg.Memory, r.cfg.NodeLogMaxSize = 8<<20, time.Hour, budget, 64<<20
	rng := rand.NewChaCha8([32]byte{7})
	for n := 0; n < 2<<20; n += 4 << 10 {
		r.write(randomLine(rng, 4<<10), false)
	}
	r.node.mu.Lock()
	r.node.over = true // ended before its capture began
	r.node.mu.Unlock()
	done := r.start(t.Context())
	if err := <-done; err != nil {
		t.Fatalf("Capture: %v", err)
	}
	r.check(t)
	if r.segments() < 2 {
		t.Errorf("stored %d segments, want several: the 2 MiB read do not fit the budget of %d", r.segments(), limit)
	}
	if len(r.recs.gaps) != 1 || r.recs.gaps[0].Reason != record.GapMaybeRotated {
		t.Errorf("gaps %+v, want one %q gap before the run's first line", r.recs.gaps, record.GapMaybeRotated)
	}
	if used := budget.Used(); used != 0 {
		t.Errorf("%d bytes still held once the capture ended, want 0", used)
	}
}

package capture

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// idleFollow is a follow stream as the node serves a container that wrote backlog and is quiet
// now: the backlog in reads of one line each (as HTTP/2 frames deliver them), then a read that
// waits until the capture ends.
type idleFollow struct {
	backlog []string
	idle    *atomic.Int64 // streams waiting past their backlog, of all captures
}

func (s idleFollow) Open(ctx context.Context, _ Ref, opts OpenOptions) (io.ReadCloser, error) {
	if !opts.Follow {
		return io.NopCloser(strings.NewReader("")), nil
	}
	return &idleReader{ctx: ctx, lines: s.backlog, idle: s.idle}, nil // the slice shared: read only
}

type idleReader struct {
	ctx     context.Context
	lines   []string
	off     int // into lines[0]
	idle    *atomic.Int64
	waiting bool
}

func (r *idleReader) Read(p []byte) (int, error) {
	if len(r.lines) > 0 {
		n := copy(p, r.lines[0][r.off:])
		if r.off += n; r.off == len(r.lines[0]) {
			r.lines, r.off = r.lines[1:], 0
		}
		return n, nil
	}
	if !r.waiting {
		r.waiting = true
		r.idle.Add(1)
	}
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

func (r *idleReader) Close() error { return nil }

// followBacklog is lines as BenchmarkFollow1000's containers write them (about 60 bytes each, ten
// a second), minutes of them: what a capture reads at once when it starts after its container.
func followBacklog(lines int) []string {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	out := make([]string, lines)
	for i := range out {
		out[i] = fmt.Sprintf("%s follow-0042 line %06d level=info step=%d loss=0.%04d\n",
			t0.Add(time.Duration(i)*100*time.Millisecond).Format(time.RFC3339Nano), i, i%977, (i*7919)%10000)
	}
	return out
}

// TestFollowedCaptureHoldsLittle: what one followed container costs the archiver, in heap and
// goroutine stacks, once its capture has read and stored what the container wrote before it
// started (3,000 lines) and waits on its quiet stream. BenchmarkFollow1000 holds a thousand of
// these. At most 128 KiB: the fingerprints of its last 4,096 lines (64 KiB), emptied buffers of a
// slow container's size, a small stream reader, two goroutines. Before: 360 KiB (a 64 KiB stream
// reader, a segment buffer grown to 130 KiB ahead of need, a 64 KiB raw buffer kept).
// JOBVAULT_FOLLOW_HEAP_PROFILE=FILE writes the heap profile.
func TestFollowedCaptureHoldsLittle(t *testing.T) {
	const (
		captures = 200
		perCap   = 128 << 10 // bytes of heap and stack per followed capture
	)
	backlog := followBacklog(3000)
	var idle atomic.Int64
	cfg := DefaultConfig
	cfg.SegmentAge = 100 * time.Millisecond // the backlog stored: what a capture holds between segments
	cfg.Memory = NewBudget(64 << 20)
	var statusReads atomic.Int64
	running := func(context.Context) (End, error) { statusReads.Add(1); return End{}, nil }

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range captures {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := Ref{Namespace: "ns", Pod: fmt.Sprint("p", i), PodUID: fmt.Sprint("uid", i), Container: "main"}
			r := newRig(t)
			src := idleFollow{backlog: backlog, idle: &idle}
			_, err := Capture(ctx, cfg, src, r.recs, r.store, r.segKey, ref, running, nil)
			if ctx.Err() == nil {
				t.Errorf("capture %d ended: %v", i, err)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	for deadline := time.Now().Add(2 * time.Minute); idle.Load() < captures; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d captures read their backlog in 2 minutes", idle.Load(), captures)
		}
	}
	// Every capture reads its status twice more: the last line read is added, and the lines held
	// until a status read after their stream opened (bind.go) are decided.
	for n, deadline := statusReads.Load()+2*captures, time.Now().Add(time.Minute); statusReads.Load() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the captures stopped reading their status")
		}
	}
	runtime.GC()
	runtime.GC() // and the compressors pooled for all captures (a pool keeps them one collection more)
	runtime.ReadMemStats(&after)
	if path := os.Getenv("JOBVAULT_FOLLOW_HEAP_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
	}
	heap := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / captures
	stack := (int64(after.StackInuse) - int64(before.StackInuse)) / captures
	t.Logf("a followed capture holds %d KiB of heap and %d KiB of goroutine stacks", heap>>10, stack>>10)
	if heap+stack > perCap {
		t.Errorf("a followed capture holds %d KiB (heap %d KiB, stacks %d KiB), want at most %d KiB",
			(heap+stack)>>10, heap>>10, stack>>10, perCap>>10)
	}
}

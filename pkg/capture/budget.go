package capture

import (
	"bytes"
	"context"
	"sync"
)

// Budget bounds the memory that the segments of all captures take together: a capture's segment
// grows only while the budget has room, and a capture that cannot get more flushes its segment
// early (a smaller segment) and lets its buffer go, rather than grow. Without it each capture
// holds up to a whole segment (Config.SegmentBytes, compressed: incompressible output keeps its
// size), so --max-streams containers writing random bytes would take --max-streams segments.
//
// Each capture has CaptureFloor besides, whatever the budget, so that it can go on at all: the
// captures hold at most the budget and one floor each. (A line longer than the floor's raw
// block, which the node's reader delivers whole, is held whole as well, beyond both.)
type Budget struct {
	limit int64

	mu   sync.Mutex
	used int64
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Used is what the captures hold of the budget now (beyond their floors), in bytes.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// grow takes n more bytes for a capture that holds *held, and reports whether the budget had
// room; only then are they taken.
func (b *Budget) grow(held *int64, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	*held += n
	return true
}

// set records that a capture holds n bytes now (its buffers were let go, or a long line grew
// them).
func (b *Budget) set(held *int64, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += n - *held
	*held = n
}

const (
	// segmentHeadroom is the room a segment's buffer keeps beyond what it holds: enough for the
	// next compressed block (compress) of lines up to rawBlock long, so that the buffer never grows
	// by itself, doubling, past what the budget gave it.
	segmentHeadroom = 2*rawBlock + 1<<10
	// CaptureFloor is what a capture holds outside the budget: its lines waiting to be compressed
	// (a buffer of up to 4 raw blocks, see compress) and a segment buffer of segmentHeadroom.
	CaptureFloor = 4*rawBlock + segmentHeadroom
)

// fitMemory keeps the capture's buffers within its floor and what the budget (Config.Memory)
// gives it, after each line: the segment's buffer has room (c.room, charged to the budget) for
// segmentHeadroom more, grown with the budget's leave (by doubling, at most to a whole segment);
// without leave, the segment is flushed early and its buffer let go. The buffer itself grows into
// its room only as compressed blocks need it (segmentWriter): a slow container's segment of a few
// KiB holds a few KiB. Emptied buffers grown past what a slow container needs are let go (after
// a flush, after a block compressed), so that a capture between segments holds no more than that.
func (c *capture) fitMemory(ctx context.Context) error {
	b := c.cfg.Memory
	if b == nil {
		return nil
	}
	if c.buf.Len() == 0 {
		if c.buf.Cap() > keepEmpty {
			c.buf = bytes.Buffer{}
		}
		c.room = segmentHeadroom
	}
	if c.raw.Len() == 0 && c.raw.Cap() > keepEmpty {
		c.raw = bytes.Buffer{}
	}
	b.set(&c.held, c.beyondFloor(c.room))
	if c.room-c.buf.Len() >= segmentHeadroom {
		return nil
	}
	size := min(max(2*c.room, c.buf.Len()+segmentHeadroom), int(c.cfg.SegmentBytes)+segmentHeadroom)
	size = max(size, c.buf.Len()+segmentHeadroom)
	if !b.grow(&c.held, c.beyondFloor(size)-c.held) {
		if c.unfollowed {
			// A run read only after its end is held back until its gap is known (maybeRotated):
			// the budget decides for it.
			if err := c.maybeRotated(ctx, true); err != nil {
				return err
			}
		}
		if err := c.flush(ctx); err != nil {
			return err
		}
		c.buf, size = bytes.Buffer{}, segmentHeadroom
		b.set(&c.held, c.beyondFloor(size))
	}
	c.room = size
	return nil
}

const (
	// minSegmentBuffer is the least a segment's buffer grows by.
	minSegmentBuffer = 4 << 10
	// keepEmpty is the most an emptied buffer keeps (what a slow container's segment needs):
	// a bigger one is let go, grown again by the next segment that needs it.
	keepEmpty = 16 << 10
)

// segmentWriter is where compress writes a segment's gzip members: into the capture's buffer,
// which it grows as they need, by doubling up to the room fitMemory got leave for, and past it by
// a headroom at a time (a compressed block is about segmentHeadroom at most, which the room has).
type segmentWriter struct{ c *capture }

func (w segmentWriter) Write(p []byte) (int, error) {
	buf := &w.c.buf
	if buf.Available() < len(p) {
		room := w.c.room
		if w.c.cfg.Memory == nil {
			room = int(w.c.cfg.SegmentBytes) + segmentHeadroom
		}
		size := max(buf.Len()+len(p), min(2*buf.Cap(), room), minSegmentBuffer)
		if buf.Len()+len(p) > room {
			// Past the room, by a headroom: a member bigger than the headroom (a rawBlock waiting
			// and a long line's piece, of output that barely compresses) is written by flate a
			// few hundred bytes at a time, and growing by just those copied the whole segment
			// for each (TestSegmentBufferGrowsByHeadroom).
			size = buf.Len() + max(len(p), segmentHeadroom)
		}
		grown := make([]byte, buf.Len(), size)
		copy(grown, buf.Bytes())
		*buf = *bytes.NewBuffer(grown)
	}
	return buf.Write(p)
}

// beyondFloor is what the capture's buffers take beyond CaptureFloor with a segment buffer of
// room segBuf. Its lines waiting to be compressed count at the most that their buffer keeps
// (compress lets a bigger one go), so that their growth up to that needs no leave.
func (c *capture) beyondFloor(segBuf int) int64 {
	return max(0, int64(segBuf+max(c.raw.Cap(), 4*rawBlock))-CaptureFloor)
}

// releaseMemory gives back what the capture holds of the budget, once it is over.
func (c *capture) releaseMemory() {
	if c.cfg.Memory != nil {
		c.cfg.Memory.set(&c.held, 0)
	}
}

package capture

import "testing"

// TestSegmentBufferGrowsByHeadroom: a gzip member written past the segment buffer's room, a few
// hundred bytes at a time as flate writes output that barely compresses, grows the buffer once or
// twice, not at each write: growing by each write copied the whole segment (up to SegmentBytes)
// for every 240 bytes a tenant's incompressible long lines produced.
func TestSegmentBufferGrowsByHeadroom(t *testing.T) {
	c := &capture{cfg: Config{Memory: NewBudget(1 << 30), SegmentBytes: 8 << 20}}
	w := segmentWriter{c}
	fill := make([]byte, 4<<20)
	if _, err := w.Write(fill); err != nil {
		t.Fatal(err)
	}
	c.room = c.buf.Len() // the room is used up: what follows is past it
	grew, last := 0, c.buf.Cap()
	chunk := make([]byte, 240)
	for range 73 << 10 / len(chunk) { // a 73 KiB member
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
		if c.buf.Cap() != last {
			grew, last = grew+1, c.buf.Cap()
		}
	}
	if grew > 2 {
		t.Errorf("a 73 KiB member past the room grew the 4 MiB segment buffer %d times, want at most 2", grew)
	}
}

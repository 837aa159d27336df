package capture

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"time"
)

// position is how far a capture has come in its run's log, in the stream's own terms: pods/log
// gives each line the timestamp of its first record and nothing else, so a position is made of
// timestamps. Lines need not come in timestamp order (containerd stamps stdout and stderr in
// separate goroutines, and a node's clock can step back), so the position keeps the greatest
// timestamp captured and the timestamp of the last line captured apart.
type position struct {
	// max is the greatest timestamp captured, maxLines how many lines captured carry exactly it.
	max      time.Time
	maxLines int32
	// last is the timestamp of the last line captured (in the stream's order).
	last time.Time
	// partial is how many bytes of the last line are captured when the line did not end yet: a
	// line is captured in pieces, and a segment may end inside one.
	partial int64
}

// sha256StateSize is the size of a marshalled sha256 state (crypto/sha256's marshaledSize).
const sha256StateSize = 4 + 8*4 + sha256.BlockSize + 8

// encodeState is a segment's HashState: the run's sha256 state, followed, when the position is
// not simply "after the last line at max", by the last line's timestamp and the bytes of it
// captured so far (8 bytes each, big-endian). The trailer keeps the database schema as it was.
func encodeState(h hash.Hash, p position) ([]byte, error) {
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, err
	}
	if p.partial == 0 && p.last.Equal(p.max) {
		return state, nil
	}
	state = binary.BigEndian.AppendUint64(state, uint64(p.last.UnixNano()))
	return binary.BigEndian.AppendUint64(state, uint64(p.partial)), nil
}

// decodeState restores a segment's sha256 state into h and fills in p's last and partial (see
// encodeState).
func decodeState(state []byte, h hash.Hash, p *position) error {
	p.last, p.partial = p.max, 0
	if len(state) == sha256StateSize+16 {
		p.last = time.Unix(0, int64(binary.BigEndian.Uint64(state[sha256StateSize:]))).UTC()
		p.partial = int64(binary.BigEndian.Uint64(state[sha256StateSize+8:]))
		state = state[:sha256StateSize]
	}
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return fmt.Errorf("hash state: %w", err)
	}
	return nil
}

// fingerprint identifies a captured line well enough to recognise it when a stream delivers it
// again: its timestamp (nanoseconds) and a hash of its first bytes, with their count in the low
// byte. Two lines with the same nanosecond and the same first fpBytes bytes are taken for one.
type fingerprint struct {
	ts int64
	h  uint64
}

// fpBytes is how many of a line's first bytes its fingerprint covers.
const fpBytes = 128

func fingerprintOf(ts time.Time, first []byte) fingerprint {
	n := min(len(first), fpBytes)
	return fingerprint{ts: ts.UnixNano(), h: prefixHash(first[:n])}
}

func prefixHash(b []byte) uint64 {
	f := fnv.New64a()
	f.Write(b)
	return f.Sum64()&^0xff | uint64(len(b))
}

// matches reports whether l's first piece is the line fp was taken of.
func (fp fingerprint) matches(l line) bool {
	n := int(fp.h & 0xff)
	return fp.ts == l.ts.UnixNano() && len(l.data) >= n && prefixHash(l.data[:n]) == fp.h
}

// ringSize bounds the fingerprints a capture keeps: 64 KiB at most, allocated as lines come.
const ringSize = 4096

// ring holds the fingerprints of the last lines captured, oldest first, so that lines a stream
// delivers again (a reopened stream from its sinceTime, or the node's reader replaying its file)
// are recognised by what they are, not by their timestamps alone.
type ring struct {
	fps   []fingerprint
	start int
	// evictedMax is the greatest timestamp among the lines no longer held (captured before the
	// capture started, or pushed out): a line not found that is no later may be one of them.
	// pushedMax is that of the lines pushed out only.
	evictedMax, pushedMax time.Time
}

func (r *ring) len() int { return len(r.fps) }

func (r *ring) at(i int) fingerprint { return r.fps[(r.start+i)%len(r.fps)] }

func (r *ring) add(fp fingerprint) {
	if len(r.fps) < ringSize {
		r.fps = append(r.fps, fp)
		return
	}
	old := time.Unix(0, r.fps[r.start].ts).UTC()
	if old.After(r.evictedMax) {
		r.evictedMax = old
	}
	if old.After(r.pushedMax) {
		r.pushedMax = old
	}
	r.fps[r.start] = fp
	r.start = (r.start + 1) % len(r.fps)
}

// find returns the index of the first line held, from index from on, that l is, or -1.
func (r *ring) find(l line, from int) int {
	for i := max(from, 0); i < len(r.fps); i++ {
		if r.at(i).matches(l) {
			return i
		}
	}
	return -1
}

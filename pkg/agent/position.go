package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"

	"github.com/klauspost/compress/gzip"
)

// A run's position in its files (issue 25: "the agent's durable position is per file"): the file
// and the offset in it of where the capture stands, recorded with each segment
// (record.Segment.SourcePosition) and resumed from after a restart. Timestamps cannot place a
// position among lines stamped alike or out of order (stdout against stderr, a clock stepped
// back); an offset in a file can. The sha256 state of the run's log is the segment's own
// (HashState): the position needs none.
//
// A file is known again by its inode and its first bytes (its first record: a timestamp to the
// nanosecond and more), and after the kubelet compressed it, by its first bytes decompressed.

// filePos is where a capture stands in a run's files: at off in f (or, decoded from a segment,
// in the file id names); cut: off is the start of the last line taken, of which the capture
// holds only part (it skips that part when served the line again); otherwise off is just after
// the last line taken.
type filePos struct {
	f   *heldFile
	id  fileID
	off int64
	cut bool
}

// fileID tells a file from the other files of its run, also once compressed.
type fileID struct {
	ino      uint64
	gz       bool
	headLen  int
	headHash uint64
}

// matches reports whether g is the file id names: the same first bytes and, unless either is
// compressed (a compressed copy is another inode), the same inode.
func (id fileID) matches(g fileID, head []byte) bool {
	return len(head) >= id.headLen && headHash(head[:id.headLen]) == id.headHash && (id.gz || g.gz || id.ino == g.ino)
}

func headHash(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

// positionVersion is the first byte of an encoded position.
const positionVersion = 1

// encodePosition encodes p for record.Segment.SourcePosition: version, flags (1 cut, 2 gz), the
// inode, the head's length and hash, the offset.
func encodePosition(p filePos) []byte {
	b := []byte{positionVersion, 0}
	if p.cut {
		b[1] |= 1
	}
	if p.id.gz {
		b[1] |= 2
	}
	b = binary.BigEndian.AppendUint64(b, p.id.ino)
	b = append(b, byte(p.id.headLen))
	b = binary.BigEndian.AppendUint64(b, p.id.headHash)
	return binary.BigEndian.AppendUint64(b, uint64(p.off))
}

// positionSize is the size of an encoded position.
const positionSize = 2 + 8 + 1 + 8 + 8

// decodePosition decodes a recorded position; nil: none recorded.
func decodePosition(b []byte) (*filePos, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) != positionSize || b[0] != positionVersion {
		return nil, fmt.Errorf("decode file position: %d bytes of version %d, want %d of version %d", len(b), b[0], positionSize, positionVersion)
	}
	p := &filePos{cut: b[1]&1 != 0}
	p.id.gz = b[1]&2 != 0
	p.id.ino = binary.BigEndian.Uint64(b[2:])
	p.id.headLen = int(b[10])
	p.id.headHash = binary.BigEndian.Uint64(b[11:])
	off := binary.BigEndian.Uint64(b[19:])
	if off > math.MaxInt64 || p.id.headLen == 0 || p.id.headLen > headSize {
		return nil, errors.New("decode file position: out of range")
	}
	p.off = int64(off)
	return p, nil
}

// contentHead reads the first headSize bytes of f's content (decompressed, if compressed), f open.
func (f *heldFile) contentHead() []byte {
	var r io.Reader = io.NewSectionReader(f.f, 0, headSize*4)
	if f.gz {
		zr, err := gzip.NewReader(io.NewSectionReader(f.f, 0, math.MaxInt64))
		if err != nil {
			return nil
		}
		defer zr.Close()
		r = zr
	}
	b := make([]byte, headSize)
	n, _ := io.ReadFull(r, b)
	return b[:n]
}

// identity is f's id and head, from its cache once its head is whole (s.mu held).
func (f *heldFile) identity() (fileID, []byte) {
	if f.idHead != nil && (len(f.idHead) == headSize || f.f == nil) {
		return f.id, f.idHead
	}
	if f.f == nil {
		return f.id, f.idHead
	}
	head := f.contentHead()
	f.idHead = head
	f.id = fileID{ino: f.ino, gz: f.gz, headLen: len(head), headHash: headHash(head)}
	return f.id, head
}

// locate finds the file p names among the run's open files (s.mu held); nil: gone.
func (r *runFiles) locate(p *filePos) *heldFile {
	if p.f != nil {
		switch {
		case p.f.f != nil:
			return p.f
		case p.f.copy != nil && p.f.copy.f != nil:
			return p.f.copy // let go for its compressed copy: the offset is the same
		}
		return nil
	}
	for _, f := range r.files {
		if f.f == nil {
			continue
		}
		if id, head := f.identity(); p.id.headLen > 0 && p.id.matches(id, head) {
			return f
		}
	}
	return nil
}

package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// Stream is the output stream a container's bytes came from, as its CRI log file records it.
type Stream byte

const (
	// StreamUnknown: the bytes were captured through pods/log, which merges the streams.
	StreamUnknown Stream = 0
	StreamStdout  Stream = 1
	StreamStderr  Stream = 2
)

// StreamRun is a run of bytes of one stream.
type StreamRun struct {
	Stream Stream
	Bytes  int64
}

// StreamTagger is implemented by a Source's stream that knows which output stream each byte of a
// line came from (the node agent's file source: it reads the CRI records). Offsets count every
// byte read from the stream, timestamps included; only a line's content bytes are asked for.
type StreamTagger interface {
	// Streams returns the streams of the bytes [from, to) of the stream, in order, and forgets
	// what comes before to: it is asked for every piece of every line, in stream order.
	Streams(from, to int64) []StreamRun
}

// The stream index: beside a run's log (its key plus archive.StreamsSuffix) and in each segment
// (record.Segment.Streams), the log's bytes as a run-length list, in order: each run is one
// uvarint, its length in bytes shifted left by 2, or'ed with its Stream (0 unknown, 1 stdout, 2
// stderr). Adjacent runs may share a stream, so that segments' indexes concatenate. A reader
// splits the archived log back into stdout and stderr with it (SplitStreams). Bytes captured
// through pods/log have stream 0.
//
// A segment's index is at most MaxSegmentStreams bytes: how often the streams alternate is the
// tenant's to choose (short lines on stdout and stderr in turn make an index half the log's
// size), and every segment's index is loaded at assembly. Past the bound, the rest of the
// segment's bytes are one run of stream 0 (unknown): a clear record, in bounded memory.

// MaxSegmentStreams bounds a segment's stream index, in bytes.
const MaxSegmentStreams = 64 << 10

// streamIndex builds a segment's stream index, merging adjacent runs of one stream.
type streamIndex struct {
	enc  []byte
	last StreamRun
	// full: the index reached MaxSegmentStreams; the rest of the segment is of unknown stream.
	full bool
}

func (x *streamIndex) add(r StreamRun) {
	if r.Bytes <= 0 {
		return
	}
	if x.full {
		r.Stream = StreamUnknown
	}
	if r.Stream == x.last.Stream || x.last.Bytes == 0 {
		x.last.Stream, x.last.Bytes = r.Stream, x.last.Bytes+r.Bytes
		return
	}
	x.enc = appendStreamRun(x.enc, x.last)
	x.last = r
	// Room is kept for the run being built and the unknown one after it.
	if len(x.enc)+2*binary.MaxVarintLen64 > MaxSegmentStreams {
		x.full = true
		x.last.Stream = StreamUnknown
	}
}

// bytes is a copy of the index so far (nil: nothing added).
func (x *streamIndex) bytes() []byte {
	if x.last.Bytes == 0 && len(x.enc) == 0 {
		return nil
	}
	b := append([]byte(nil), x.enc...)
	if x.last.Bytes > 0 {
		b = appendStreamRun(b, x.last)
	}
	return b
}

func (x *streamIndex) reset() { x.enc, x.last, x.full = x.enc[:0], StreamRun{}, false }

func appendStreamRun(b []byte, r StreamRun) []byte {
	return binary.AppendUvarint(b, uint64(r.Bytes)<<2|uint64(r.Stream))
}

// DecodeStreams reads a stream index.
func DecodeStreams(b []byte) ([]StreamRun, error) {
	var runs []StreamRun
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("decode stream index: bad varint")
		}
		b = b[n:]
		runs = append(runs, StreamRun{Stream: Stream(v & 3), Bytes: int64(v >> 2)})
	}
	return runs, nil
}

// SplitStreams splits a log by its stream index into the bytes of stdout and of stderr; bytes of
// unknown stream are an error.
func SplitStreams(log, index []byte) (stdout, stderr []byte, err error) {
	runs, err := DecodeStreams(index)
	if err != nil {
		return nil, nil, err
	}
	var off int64
	for _, r := range runs {
		if off+r.Bytes > int64(len(log)) {
			return nil, nil, fmt.Errorf("split streams: the index covers %d bytes or more, the log holds %d", off+r.Bytes, len(log))
		}
		part := log[off : off+r.Bytes]
		switch r.Stream {
		case StreamStdout:
			stdout = append(stdout, part...)
		case StreamStderr:
			stderr = append(stderr, part...)
		default:
			return nil, nil, fmt.Errorf("split streams: bytes %d to %d have no known stream", off, off+r.Bytes)
		}
		off += r.Bytes
	}
	if off != int64(len(log)) {
		return nil, nil, fmt.Errorf("split streams: the index covers %d bytes, the log holds %d", off, len(log))
	}
	return stdout, stderr, nil
}

// dropStreamBytes drops the first n bytes of runs.
func dropStreamBytes(runs []StreamRun, n int64) []StreamRun {
	for len(runs) > 0 && n > 0 {
		if runs[0].Bytes > n {
			runs[0].Bytes -= n
			return runs
		}
		n -= runs[0].Bytes
		runs = runs[1:]
	}
	return runs
}

// CountingReader counts the bytes read through it, as io.LimitedReader bounds them: with a
// bufio.Reader on top, the offset of the next byte the bufio.Reader returns is N minus its
// Buffered. The node agent reads its CRI files through one too.
type CountingReader struct {
	R io.Reader // the underlying reader
	N int64     // the bytes read so far
}

// Read reads from R and counts what it read.
func (c *CountingReader) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}

// putStreams stores the stream index of an assembled log beside it (key plus archive.StreamsSuffix), if
// any of its segments knows its streams: the segments' indexes concatenated, a segment without
// one (captured through pods/log) as one run of unknown stream.
func putStreams(ctx context.Context, store objstore.Store, ref Ref, key string, segs []record.Segment, retainUntil time.Time) error {
	if !slices.ContainsFunc(segs, func(s record.Segment) bool { return s.Streams != nil }) {
		return nil
	}
	var index []byte
	for _, s := range segs {
		switch {
		case s.Streams != nil:
			index = append(index, s.Streams...)
		case s.Bytes > 0:
			index = appendStreamRun(index, StreamRun{Stream: StreamUnknown, Bytes: s.Bytes})
		}
	}
	opts := objstore.PutOptions{ContentType: "application/octet-stream", RetainUntil: retainUntil}
	if stored, err := storedLocked(ctx, store, key+archive.StreamsSuffix, int64(len(index)), retainUntil); err != nil {
		return fmt.Errorf("store the stream index of the log of %s: %w", ref, err)
	} else if stored {
		return nil
	}
	if err := lockedElse(store.Put(ctx, key+archive.StreamsSuffix, bytes.NewReader(index), opts)); err != nil {
		return fmt.Errorf("store the stream index of the log of %s: %w", ref, err)
	}
	return nil
}

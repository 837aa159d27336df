package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/record"
)

// pieceSize is the most a reader holds of one record: longer content is served in pieces, as
// capture reads lines (so a line of any length costs bounded memory).
const pieceSize = 64 << 10

// maxHeader bounds a CRI record's "<timestamp> <stream> <tag> " header; a longer one is not a
// record (it is skipped to its newline, as the kubelet skips a record it cannot parse).
const maxHeader = 256

// recheck is how often a following reader looks at its files without an inotify event (the
// kubelet's reader does every second too).
const recheck = time.Second

// reader serves one run's log files, in write order, as pods/log with timestamps=true serves the
// current one (the kubelet's ReadLogs): each CRI record's content, a partial (P) record's without
// its newline, the record's timestamp before the first record of each line, records stamped
// before Since (whole seconds) left out. Unlike the kubelet it reads every file of the run,
// rotated and compressed ones included, each through the descriptor held since it appeared: a
// rotated file is read to its end before the next (containerd writes no more to it once the next
// has bytes). It tells each content byte's stream (capture.StreamTagger).
type reader struct {
	ctx    context.Context
	s      *FileSource
	k      RunKey
	rf     *runFiles
	follow bool
	since  time.Time

	done map[*heldFile]bool
	cur  *heldFile
	// curName is cur's name when taken (the source renames it under its lock).
	curName string
	br      *bufio.Reader
	zr      *gzip.Reader
	// file reads cur's file from its start: its position past the file's size says it was
	// truncated.
	file *io.SectionReader
	// drainEOF: a later file had bytes when cur was last at its end, so cur's next end is its last.
	drainEOF bool
	lastTS   time.Time
	// servedGz: cur is compressed and some of its content was served.
	servedGz bool

	// The record being read: inContent after its header; its timestamp, stream, partial tag;
	// whether it is left out (before since), how many content bytes it had, and its last byte.
	inContent bool
	ts        time.Time
	stream    capture.Stream
	partial   bool
	skipRec   bool
	recLen    int64
	recLast   byte
	newLine   bool

	out     []byte
	emitted int64
	closed  atomic.Bool // Close is called while the capture's reader goroutine may read
	// tags are the streams of the content bytes served and not yet asked for: Streams is called
	// by the capture while its reader goroutine reads.
	tagMu sync.Mutex
	tags  []tagRun
}

type tagRun struct {
	start, end int64
	stream     capture.Stream
}

func newReader(ctx context.Context, s *FileSource, k RunKey, opts capture.OpenOptions) *reader {
	s.mu.Lock()
	rf := s.run(k, "")
	s.mu.Unlock()
	r := &reader{ctx: ctx, s: s, k: k, rf: rf, follow: opts.Follow, done: map[*heldFile]bool{}, newLine: true}
	if !opts.Since.IsZero() {
		r.since = opts.Since.Truncate(time.Second) // pods/log takes sinceTime in whole seconds
	}
	return r
}

// Read serves the log.
func (r *reader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.closed.Load() {
			return 0, errors.New("read log: reader closed")
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// Close ends the reader; the files stay held by the source.
func (r *reader) Close() error {
	r.closed.Store(true)
	return nil
}

// Streams implements capture.StreamTagger.
func (r *reader) Streams(from, to int64) []capture.StreamRun {
	r.tagMu.Lock()
	defer r.tagMu.Unlock()
	var out []capture.StreamRun
	i := 0
	for ; i < len(r.tags); i++ {
		t := r.tags[i]
		if t.start >= to {
			break
		}
		if s, e := max(t.start, from), min(t.end, to); e > s {
			out = append(out, capture.StreamRun{Stream: t.stream, Bytes: e - s})
		}
		if t.end > to {
			break
		}
	}
	r.tags = r.tags[i:]
	return out
}

// emit appends output; content bytes are tagged with the record's stream.
func (r *reader) emit(b []byte, content bool) {
	if len(b) == 0 {
		return
	}
	if content {
		if r.cur.gz && !r.servedGz {
			// Worth a line: the kubelet serves no compressed file, so these bytes reach the
			// archive only through the agent.
			r.servedGz = true
			r.s.log.Info("Serving a compressed log file", "file", filepath.Join(r.rf.dir, r.curName))
		}
		end := r.emitted + int64(len(b))
		r.tagMu.Lock()
		if n := len(r.tags); n > 0 && r.tags[n-1].stream == r.stream && r.tags[n-1].end == r.emitted {
			r.tags[n-1].end = end
		} else {
			r.tags = append(r.tags, tagRun{start: r.emitted, end: end, stream: r.stream})
		}
		r.tagMu.Unlock()
	}
	r.out = append(r.out, b...)
	r.emitted += int64(len(b))
}

// fill produces some output, or returns io.EOF at the end of a read without follow.
func (r *reader) fill() error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	r.s.mu.Lock()
	changed := r.rf.changed
	r.s.mu.Unlock()
	if r.cur == nil && !r.next() {
		return r.wait(changed)
	}
	var err error
	if r.inContent {
		err = r.content()
	} else {
		err = r.header()
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return r.atEnd(changed)
	default:
		// The file was let go (closed) or cannot be read: go on with the next.
		r.s.log.V(1).Info("Log file no longer readable; going on with the next", "file", r.curName, "error", err.Error())
		r.finishFile()
		return nil
	}
}

// next takes the first file of the run in write order not read yet; false: none.
func (r *reader) next() bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	for _, f := range r.rf.files {
		if r.done[f] {
			continue
		}
		if f.f == nil {
			r.done[f] = true // closed: released (durable) or let go (its gap is recorded)
			continue
		}
		r.cur, r.curName, r.drainEOF, r.lastTS, r.servedGz = f, f.name, false, time.Time{}, false
		r.file = io.NewSectionReader(f.f, 0, math.MaxInt64)
		var src io.Reader = r.file
		if f.gz {
			zr, err := gzip.NewReader(src)
			if err != nil {
				r.done[f] = true
				r.cur = nil
				continue
			}
			r.zr, src = zr, zr
		}
		r.br = bufio.NewReaderSize(src, pieceSize)
		return true
	}
	return false
}

// laterHasBytes reports whether a file after cur has bytes: containerd writes no more to cur.
func (r *reader) laterHasBytes() bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	after := false
	for _, f := range r.rf.files {
		if f == r.cur {
			after = true
			continue
		}
		if !after || f.f == nil {
			continue
		}
		if f.gz {
			return true
		}
		if st, err := f.f.Stat(); err == nil && st.Size() > 0 {
			return true
		}
	}
	return false
}

// atEnd handles the end of cur: a compressed file or one a later file follows is done (after one
// more read to its end); the last file ends a read without follow, and is waited on with follow.
func (r *reader) atEnd(changed chan struct{}) error {
	if r.cur.gz || r.drainEOF {
		r.finishFile()
		return nil
	}
	if r.truncated() {
		return nil
	}
	if r.laterHasBytes() {
		r.drainEOF = true // read on to the end once more: what was written before the switch
		return nil
	}
	if !r.follow {
		r.finishFile()
		if r.next() {
			return nil
		}
		return io.EOF
	}
	return r.wait(changed)
}

// truncated reports whether cur was truncated in place (its size is below what was read of it):
// the bytes written past the reader's position before the truncation are lost, which is recorded
// as a gap, and the file is read again from its start.
func (r *reader) truncated() bool {
	r.s.mu.Lock()
	f := r.cur.f
	r.s.mu.Unlock()
	if f == nil {
		return false
	}
	read, _ := r.file.Seek(0, io.SeekCurrent)
	st, err := f.Stat()
	if err != nil || st.Size() >= read {
		return false
	}
	if r.inContent {
		r.endRecord()
	}
	r.s.mu.Lock()
	g := record.Gap{PodUID: r.k.PodUID, Container: r.k.Container, Run: r.k.Run, After: r.lastTS, Before: firstTime(r.cur),
		Reason: record.GapTruncatedOnNode,
		Detail: fmt.Sprintf("file %s truncated in place from %d bytes read to %d bytes: what was written past the agent's position before it is lost", r.curName, read, st.Size())}
	onGap := r.s.onGap
	r.s.mu.Unlock()
	r.s.log.Info("Log file truncated in place; reading it again from its start", "file", filepath.Join(r.rf.dir, r.curName), "read", read, "size", st.Size())
	if onGap != nil {
		onGap(r.k, g)
	}
	r.file = io.NewSectionReader(f, 0, math.MaxInt64)
	r.br = bufio.NewReaderSize(r.file, pieceSize)
	return true
}

// wait waits for the run's files to change (or the recheck period), or returns io.EOF for a read
// without follow.
func (r *reader) wait(changed chan struct{}) error {
	if !r.follow {
		return io.EOF
	}
	t := time.NewTimer(recheck)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-changed:
	case <-t.C:
	}
	return nil
}

// finishFile ends cur: a record cut at its end ends there (the kubelet serves it without newline).
func (r *reader) finishFile() {
	if r.inContent {
		r.endRecord()
	}
	r.s.mu.Lock()
	r.cur.drained = true
	if r.lastTS.After(r.cur.lastTS) {
		r.cur.lastTS = r.lastTS
	}
	r.done[r.cur] = true
	r.s.mu.Unlock()
	if r.zr != nil {
		_ = r.zr.Close()
		r.zr = nil
	}
	r.cur, r.br = nil, nil
}

// header reads a record's header once it is all in the file; io.EOF: not yet.
func (r *reader) header() error {
	b, err := r.br.Peek(maxHeader)
	if len(b) == 0 {
		if err == nil {
			err = io.EOF
		}
		return err
	}
	sp := spaces(b, 3)
	nl := bytes.IndexByte(b, '\n')
	if sp < 0 || (nl >= 0 && nl < sp) {
		if nl >= 0 || len(b) >= maxHeader {
			r.s.log.V(1).Info("Skipping a malformed CRI record", "file", r.curName)
			return r.skipRecord()
		}
		if err == nil {
			err = io.EOF
		}
		return err // the header is not all written yet
	}
	ts, stream, tag, ok := parseHeader(b[:sp])
	if !ok {
		return r.skipRecord()
	}
	_, _ = r.br.Discard(sp + 1)
	r.inContent, r.ts, r.stream, r.partial, r.recLen = true, ts, stream, bytes.HasPrefix(tag, []byte("P")), 0
	if ts.After(r.lastTS) {
		r.lastTS = ts
	}
	r.skipRec = !r.since.IsZero() && ts.Before(r.since)
	if !r.skipRec && r.newLine {
		r.emit(append([]byte(ts.Format("2006-01-02T15:04:05.000000000Z07:00")), ' '), false)
	}
	return nil
}

// skipRecord skips to the next newline (a malformed record).
func (r *reader) skipRecord() error {
	for {
		_, err := r.br.ReadSlice('\n')
		if err != bufio.ErrBufferFull {
			return err
		}
	}
}

// content serves the next piece of the record's content.
func (r *reader) content() error {
	data, err := r.br.ReadSlice('\n')
	if err == nil && r.partial {
		data = data[:len(data)-1] // a partial record's newline is the file's, not the line's
	}
	if len(data) > 0 {
		r.recLen += int64(len(data))
		r.recLast = data[len(data)-1]
		if !r.skipRec {
			r.emit(data, true)
		}
	}
	switch err {
	case nil:
		r.endRecord()
		return nil
	case bufio.ErrBufferFull:
		return nil
	}
	return err
}

// endRecord ends the record: the next starts a line if this one ended with a newline (or was
// empty), as the kubelet decides.
func (r *reader) endRecord() {
	r.newLine = r.recLen == 0 || r.recLast == '\n'
	r.inContent = false
}

// spaces returns the index of the n-th space in b, or -1.
func spaces(b []byte, n int) int {
	for i, c := range b {
		if c == ' ' {
			if n--; n == 0 {
				return i
			}
		}
	}
	return -1
}

// parseHeader parses "<RFC3339Nano> <stdout|stderr> <tag>".
func parseHeader(h []byte) (time.Time, capture.Stream, []byte, bool) {
	f := bytes.SplitN(h, []byte(" "), 3)
	if len(f) != 3 {
		return time.Time{}, 0, nil, false
	}
	ts, err := time.Parse(time.RFC3339Nano, string(f[0]))
	if err != nil {
		return time.Time{}, 0, nil, false
	}
	var st capture.Stream
	switch string(f[1]) {
	case "stdout":
		st = capture.StreamStdout
	case "stderr":
		st = capture.StreamStderr
	default:
		return time.Time{}, 0, nil, false
	}
	return ts, st, f[2], true
}

package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
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
	// curHead is cur's first bytes (uncompressed) when opened: a truncation shows in them.
	curHead string
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

	// start, when set, is where the reader starts instead of from since: the capture's position in
	// the files (exact; see position.go).
	start *filePos
	// cnt counts what is read of cur from base on: the offset of what br holds next is
	// base + cnt.N - br.Buffered().
	cnt  *capture.CountingReader
	base int64

	// out is the output produced, served up to served.
	out     []byte
	served  int
	emitted int64
	closed  atomic.Bool // Close is called while the capture's reader goroutine may read
	// tags are the streams of the content bytes served and not yet asked for: Streams is called
	// by the capture while its reader goroutine reads.
	tagMu sync.Mutex
	tags  []tagRun
	// marks are the lines served whose bytes the capture has not all asked for (Streams), and pos
	// the position after the last piece it asked for: both under tagMu.
	marks []lineMark
	pos   *filePos
}

// lineMark is one line served: it starts at the stream's offset at, with the record at start in
// file f; once ended (end >= 0, the stream's offset after its content), next is the offset after
// its last record, in file nextF.
type lineMark struct {
	at, end     int64
	f, nextF    *heldFile
	start, next int64
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
		// A capture resuming: from its position in the files, when they still hold it; else
		// from the timestamp, as pods/log serves it.
		if !r.startAtPosition() {
			r.since = opts.Since.Truncate(time.Second) // pods/log takes sinceTime in whole seconds
		}
	}
	s.mu.Lock()
	rf.reader = r
	s.mu.Unlock()
	return r
}

// startAtPosition readies the reader to start at the run's position in its files (the last
// reader's, or the one recorded with the last segment): the files before it are done. False: no
// position known, or its file is gone.
func (r *reader) startAtPosition() bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	p := r.rf.pos
	if r.rf.reader != nil {
		if rp := r.rf.reader.position(); rp != nil {
			p = rp
		}
	}
	if p == nil {
		return false
	}
	f := r.rf.locate(p)
	if f == nil {
		r.s.log.Info("The file of the capture's position is gone; resuming by timestamp", "run", r.k.String())
		return false
	}
	for _, g := range r.rf.files {
		if g == f {
			break
		}
		// Before the position: read, its bytes taken by the capture.
		r.done[g] = true
		g.drained = true
	}
	r.start = &filePos{f: f, off: p.off, cut: p.cut}
	r.pos = r.start
	if p.f == nil {
		// Worth a line: a restart (or a capture run again after a failure), not a reopening.
		r.s.log.Info("Resuming the capture from its position in the files", "file", filepath.Join(r.rf.dir, f.name), "offset", p.off)
	}
	return true
}

// StartsExactly implements capture.ExactStart.
func (r *reader) StartsExactly() (exact, cut bool) {
	if r.start == nil {
		return false, false
	}
	return true, r.start.cut
}

// position is the position after the last piece the capture asked for (Streams); nil: none yet.
func (r *reader) position() *filePos {
	r.tagMu.Lock()
	defer r.tagMu.Unlock()
	return r.pos
}

// fileOff is the offset in cur of what the reader parses next.
func (r *reader) fileOff() int64 {
	return r.base + r.cnt.N - int64(r.br.Buffered())
}

// markLine notes a line served from its first record, at start in cur (tagMu: Streams reads the marks).
func (r *reader) markLine(start int64) {
	r.tagMu.Lock()
	r.marks = append(r.marks, lineMark{at: r.emitted, end: -1, f: r.cur, start: start})
	r.tagMu.Unlock()
}

// markLineEnd notes that the line being served ended here.
func (r *reader) markLineEnd() {
	r.tagMu.Lock()
	if n := len(r.marks); n > 0 && r.marks[n-1].end < 0 {
		m := &r.marks[n-1]
		m.end, m.nextF, m.next = r.emitted, r.cur, r.fileOff()
	}
	r.tagMu.Unlock()
}

// advance moves the position to the stream's offset to, the end of a piece the capture took
// (tagMu held): after the line, if the piece ended it, else at the line's start, cut.
func (r *reader) advance(to int64) {
	i := 0
	for i+1 < len(r.marks) && r.marks[i+1].at < to {
		i++
	}
	r.marks = r.marks[i:]
	if len(r.marks) == 0 || r.marks[0].at >= to {
		return
	}
	m := r.marks[0]
	if m.end >= 0 && m.end <= to {
		r.pos = &filePos{f: m.nextF, off: m.next}
		r.marks = r.marks[1:]
		return
	}
	r.pos = &filePos{f: m.f, off: m.start, cut: true}
}

// Read serves the log.
func (r *reader) Read(p []byte) (int, error) {
	for r.served == len(r.out) {
		r.out, r.served = r.out[:0], 0 // all served: its buffer is filled again from its start
		if r.closed.Load() {
			return 0, errors.New("read log: reader closed")
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.out[r.served:])
	r.served += n
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
	r.advance(to)
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

// stampLayout is how pods/log prints a line's timestamp.
const stampLayout = "2006-01-02T15:04:05.000000000Z07:00"

// stamp serves a line's timestamp and its space: the record's own text when it is in pods/log's
// form already (containerd's, but for a fraction ending in zeros, which RFC 3339 drops), else
// formatted, in place either way (formatting each line's was the reader's largest cost).
func (r *reader) stamp(ts time.Time, text []byte) {
	n := len(r.out)
	if len(text) == len(stampLayout)-len("Z07:00")+1 && text[len(text)-1] == 'Z' && text[19] == '.' {
		r.out = append(r.out, text...)
	} else {
		r.out = ts.AppendFormat(r.out, stampLayout)
	}
	r.out = append(r.out, ' ')
	r.emitted += int64(len(r.out) - n)
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
		if r.toCopy() {
			return nil
		}
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
		if r.done[f] || (f.orig != nil && r.done[f.orig]) {
			continue // read (a copy: its file was)
		}
		if f.f == nil {
			r.done[f] = true // closed: released (durable) or let go (its gap is recorded)
			continue
		}
		r.cur, r.curName, r.drainEOF, r.lastTS, r.servedGz = f, f.name, false, time.Time{}, false
		var off int64
		if r.start != nil && r.start.f == f {
			off, r.start = r.start.off, nil
		}
		if err := r.openCur(off); err != nil {
			r.s.log.Error(err, "Log file not readable; going on with the next", "file", f.name)
			r.done[f] = true
			r.cur = nil
			continue
		}
		return true
	}
	return false
}

// toCopy goes on reading cur's compressed copy where cur was let go for one (swapForCopy): at
// the same offset of its content, in the same record.
func (r *reader) toCopy() bool {
	r.s.mu.Lock()
	cp := r.cur.copy
	r.s.mu.Unlock()
	if cp == nil {
		return false
	}
	off := r.fileOff()
	r.done[r.cur] = true
	r.cur, r.curName = cp, cp.name
	if err := r.openCur(off); err != nil {
		r.s.log.Error(err, "Compressed copy of a log file not readable; going on with the next", "file", cp.name)
		return false
	}
	return true
}

// openCur reads cur from off (in its content: decompressed, if compressed).
func (r *reader) openCur(off int64) error {
	f := r.cur
	r.file = io.NewSectionReader(f.f, 0, math.MaxInt64)
	var src io.Reader = r.file
	if f.gz {
		zr, err := gzip.NewReader(src)
		if err != nil {
			return fmt.Errorf("read compressed log file: %w", err)
		}
		if _, err := io.CopyN(io.Discard, zr, off); err != nil {
			_ = zr.Close()
			return fmt.Errorf("read compressed log file to the position %d: %w", off, err)
		}
		r.zr, src = zr, zr
	} else {
		if _, err := r.file.Seek(off, io.SeekStart); err != nil {
			return fmt.Errorf("read log file from the position %d: %w", off, err)
		}
		r.curHead = readHead(f.f)
	}
	r.cnt, r.base = &capture.CountingReader{R: src}, off
	r.br = bufio.NewReaderSize(r.cnt, pieceSize)
	return nil
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
	if err != nil {
		return false
	}
	how := fmt.Sprintf("truncated in place from %d bytes read to %d bytes", read, st.Size())
	if st.Size() >= read {
		if !r.regrown(f) {
			return false
		}
		how = fmt.Sprintf("truncated in place and written again past the agent's position (%d bytes read, %d now: its first bytes changed)", read, st.Size())
	}
	if r.inContent {
		r.endRecord()
	}
	r.s.mu.Lock()
	g := record.Gap{PodUID: r.k.PodUID, Container: r.k.Container, Run: r.k.Run, After: r.lastTS, Before: firstTime(r.cur),
		Reason: record.GapTruncatedOnNode,
		Detail: fmt.Sprintf("file %s %s: what was written past the agent's position before it is lost", r.curName, how)}
	onGap := r.s.onGap
	r.s.mu.Unlock()
	r.s.log.Info("Log file truncated in place; reading it again from its start", "file", filepath.Join(r.rf.dir, r.curName), "read", read, "size", st.Size())
	if onGap != nil {
		onGap(r.k, g)
	}
	if err := r.openCur(0); err != nil {
		r.finishFile()
	}
	return true
}

// regrown reports whether cur's first bytes are no longer those read when it was opened: it was
// truncated and written again past the reader's position before the reader looked at its size.
// (Written to, a log file only grows: its start never changes but by a truncation.)
func (r *reader) regrown(f *os.File) bool {
	head := readHead(f)
	n := min(len(head), len(r.curHead))
	if head[:n] != r.curHead[:n] {
		return true
	}
	if len(head) > len(r.curHead) {
		r.curHead = head // it was shorter when opened: the rest of its head is known now
	}
	return false
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
	start := r.fileOff()
	_, _ = r.br.Discard(sp + 1)
	r.inContent, r.ts, r.stream, r.partial, r.recLen = true, ts, stream, bytes.HasPrefix(tag, []byte("P")), 0
	if ts.After(r.lastTS) {
		r.lastTS = ts
	}
	r.skipRec = !r.since.IsZero() && ts.Before(r.since)
	if !r.skipRec && r.newLine {
		r.markLine(start)
		r.stamp(ts, b[:bytes.IndexByte(b, ' ')])
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
	if r.newLine && !r.skipRec {
		r.markLineEnd()
	}
	if r.cur != nil {
		r.cur.readOff.Store(r.fileOff())
	}
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
	i := bytes.IndexByte(h, ' ')
	if i < 0 {
		return time.Time{}, 0, nil, false
	}
	j := bytes.IndexByte(h[i+1:], ' ')
	if j < 0 {
		return time.Time{}, 0, nil, false
	}
	stream, tag := h[i+1:i+1+j], h[i+2+j:]
	ts, err := time.Parse(time.RFC3339Nano, string(h[:i]))
	if err != nil {
		return time.Time{}, 0, nil, false
	}
	var st capture.Stream
	switch string(stream) {
	case "stdout":
		st = capture.StreamStdout
	case "stderr":
		st = capture.StreamStderr
	default:
		return time.Time{}, 0, nil, false
	}
	return ts, st, tag, true
}

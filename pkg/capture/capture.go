// Package capture follows a container's log while the container runs and writes it durably, in
// segments, to the object store, so that what the node later rotates away, or garbage-collects
// after the pod's deletion, is already safe. A capture resumes after any break (a rotated or reset
// stream, an API server or archiver restart) from its last durable line without duplicating a
// byte, and records a gap, never a silently shorter log, when output was lost before it was read.
//
// Positions are the per-line timestamps pods/log adds with timestamps=true: each line starts with
// the timestamp of its first record, and the kubelet's reader filters by them (sinceTime, whole
// seconds). A resumed stream starts at the second of the last durable line; the lines up to and
// with that line are skipped (several lines may share a timestamp: they are counted). If the
// resumed stream no longer holds that line, the file was rotated in between and whatever was
// written in between may be lost: a gap.
package capture

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/klauspost/compress/gzip"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// Ref names one run of a container: its restart count while it ran.
type Ref struct {
	Namespace, Pod, PodUID, Container string
	Run                               int32
}

func (r Ref) String() string {
	return fmt.Sprintf("%s/%s container %s run %d", r.Namespace, r.Pod, r.Container, r.Run)
}

// OpenOptions choose what a Source streams.
type OpenOptions struct {
	// Follow keeps the stream open for new output.
	Follow bool
	// Previous reads the container's previous run (the kubelet keeps only the last one).
	Previous bool
	// Since, when set, starts at that time (pods/log rounds it down to the second).
	Since time.Time
}

// Source opens a container's log with per-line timestamps (pods/log with timestamps=true).
type Source interface {
	Open(ctx context.Context, ref Ref, opts OpenOptions) (io.ReadCloser, error)
}

// Records is what a capture keeps in the database (implemented by *db.DB).
type Records interface {
	Segments(ctx context.Context, podUID, container string, run int32) ([]record.Segment, error)
	PutSegment(ctx context.Context, s record.Segment) error
	DeleteSegments(ctx context.Context, podUID, container string, run int32) error
	PutGap(ctx context.Context, g record.Gap) error
}

// End says whether a run is over and how to read its rest.
type End struct {
	// Over: the run has ended (its container terminated or restarted), or will not be seen to end.
	Over bool
	// Previous: the run's log is now the container's previous one (it restarted).
	Previous bool
	// Lost, when set, says why the rest of the run's log cannot be read at all (it restarted again
	// before it was read, say): Capture then returns a *LostError without trying.
	Lost record.GapReason
}

// Config tunes captures.
type Config struct {
	// SegmentBytes and SegmentAge bound a segment: it is written once it holds SegmentBytes of
	// output or is SegmentAge old, at the next line boundary. A crash costs at most a re-read of
	// one segment, and a capture holds about one segment (compressed) in memory.
	SegmentBytes int64
	SegmentAge   time.Duration
	// Poll is how often a capture checks whether its run is over.
	Poll time.Duration
	// Retry is the longest pause before a stream is reopened.
	Retry time.Duration
	// NodeLogMaxSize is the nodes' log rotation size (the kubelet's containerLogMaxSize). A run
	// never followed (it ended while the archiver was down) is read from its current file only:
	// if that file comes within a tenth of this size, older files may have been rotated away, and
	// the run gets a GapMaybeRotated gap before its first line. A follow stream that lagged and
	// jumped far enough to have skipped a rotated file gets one over the jump (skipWatch). 0 turns
	// both checks off.
	NodeLogMaxSize int64
	// ObserveLag, when set, is given how far behind its container each line of a follow stream
	// arrives (now minus the line's timestamp, so clock skew between node and archiver counts
	// too). It is the early warning of the one loss a capture sees only afterwards, and only as
	// possible: a stream more than one rotated file behind has the node's reader skip the files in
	// between (skipWatch).
	ObserveLag func(time.Duration)
	// ObserveReopen, when set, is told why each follow stream of a running container ended before
	// it is reopened: "ended" (the node closed it: its streaming idle timeout, an API server
	// restart), "broken" (reading it failed), "open" (it could not be opened), "store" (a segment
	// or gap could not be recorded) or "status" (whether the run is over could not be told).
	ObserveReopen func(cause string)
	// Memory, when set, bounds the segments of all captures together (see Budget).
	Memory *Budget
}

// DefaultConfig is what the archiver uses unless told otherwise.
var DefaultConfig = Config{SegmentBytes: 8 << 20, SegmentAge: 30 * time.Second, Poll: time.Second, Retry: 5 * time.Second,
	NodeLogMaxSize: 10 << 20}

// Final names a run's final log object (previous: the run's log is the container's previous one)
// and gives its retain-until date (zero: unlocked).
type Final func(previous bool) (key string, retainUntil time.Time)

// Capture follows the log of one container run into segments until over reports the run ended,
// then reads the rest without follow. It resumes from the segments already recorded. It returns
// once everything readable is durable: the segments and any gaps are recorded. An error means it
// must be run again (the store or database failed, or the rest could not be read yet).
//
// A run whose whole log is still in memory when it ends (nothing was stored of it yet: a short
// run, or one read only after its end, within one segment) is written straight to its final
// object, named by final (previous: the run's log is the container's previous one), and returned:
// no segment, compose or delete, which for the many small logs of short pods is most of the
// store's work. Otherwise it returns nil and the segments are to be assembled (Assemble).
func Capture(ctx context.Context, cfg Config, src Source, recs Records, store objstore.Store, segKey func(seq int32) string,
	ref Ref, over func(context.Context) (End, error), final Final) (*Assembled, error) {
	c, err := resume(ctx, cfg, recs, store, segKey, ref)
	if err != nil {
		return nil, err
	}
	defer c.releaseMemory()
	c.final = final
	retry := 100 * time.Millisecond
	for first := true; ; first = false {
		end, err := over(ctx)
		if err != nil {
			return nil, err
		}
		if end.Lost != "" {
			return nil, &LostError{Ref: ref, Reason: end.Lost}
		}
		if end.Over {
			// Nothing durable and already over: the run was never followed.
			c.unfollowed = first && c.seq == 0 && cfg.NodeLogMaxSize > 0
			return c.finish(ctx, src, end)
		}
		opened := time.Now()
		err = c.follow(ctx, src, over)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !errors.Is(err, errOver) {
			c.reopening(ctx, err)
		}
		// follow honours the segment's age only while its stream stays open.
		if err := c.flushAged(ctx); err != nil {
			return nil, err
		}
		if err != nil && !errors.Is(err, errOver) {
			// A stream that broke soon after it was opened, or failed to open, is reopened later
			// and later, up to Retry; one that lasted, at once. The node's reader fails every
			// stream when it cannot watch the log file (out of inotify instances, say): it answers
			// the lines so far, then its error, and each reopening reads the whole file again.
			if time.Since(opened) < cfg.Retry {
				retry = min(2*retry, cfg.Retry)
			} else {
				retry = 100 * time.Millisecond
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(retry):
			}
		}
	}
}

// capture is the state of one run's capture: what is durable, and the segment being filled.
type capture struct {
	cfg    Config
	recs   Records
	store  objstore.Store
	segKey func(int32) string
	ref    Ref
	// final names the run's log object, for a run written whole at its end (see Capture).
	final Final

	// Durable position.
	seq       int32
	total     int64
	last      time.Time
	lastLines int32
	hash      hash.Hash

	// The segment being filled: whole lines, gzip-compressed, with its own position. Lines wait
	// in raw until a block is full, then go into buf as one gzip member (see compress).
	buf        bytes.Buffer
	raw        bytes.Buffer
	segBytes   int64
	segStart   time.Time
	segLast    time.Time
	segLines   int32
	segHash    hash.Hash
	segPending bool
	// segSkip counts the lines at segLast the current stream has delivered again.
	segSkip int32

	// unfollowed: the run is read only after its end, from nothing durable; its first segment is
	// held back until it is known whether its start may have been rotated away (maybeRotated), so
	// that a crash cannot leave segments without that gap.
	unfollowed bool
	firstTime  time.Time
	fileBytes  int64 // the size of what was read, as the node's file holds it

	// watch spots where the follow stream may have skipped rotated files (zero: not following).
	watch skipWatch
	// held is what the capture holds of cfg.Memory (fitMemory).
	held int64
}

func resume(ctx context.Context, cfg Config, recs Records, store objstore.Store, segKey func(int32) string, ref Ref) (*capture, error) {
	segs, err := recs.Segments(ctx, ref.PodUID, ref.Container, ref.Run)
	if err != nil {
		return nil, fmt.Errorf("resume capture of %s: %w", ref, err)
	}
	c := &capture{cfg: cfg, recs: recs, store: store, segKey: segKey, ref: ref, hash: sha256.New()}
	if n := len(segs); n > 0 {
		s := segs[n-1]
		if err := c.hash.(encoding.BinaryUnmarshaler).UnmarshalBinary(s.HashState); err != nil {
			return nil, fmt.Errorf("resume capture of %s: hash state of segment %d: %w", ref, s.Seq, err)
		}
		c.seq, c.total, c.last, c.lastLines = s.Seq+1, s.TotalBytes, s.LastTime, s.LastTimeLines
	}
	c.reset()
	return c, nil
}

// reset starts an empty segment at the durable position.
func (c *capture) reset() {
	c.buf.Reset()
	c.raw.Reset()
	c.segBytes, c.segStart, c.segLast, c.segLines, c.segPending = 0, time.Time{}, c.last, c.lastLines, false
	c.segHash = cloneHash(c.hash)
}

func cloneHash(h hash.Hash) hash.Hash {
	state, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
	n := sha256.New()
	_ = n.(encoding.BinaryUnmarshaler).UnmarshalBinary(state)
	return n
}

// line is one line of the stream: its timestamp and content (with its newline, if it had one).
type line struct {
	ts   time.Time
	data []byte
	// partial: the stream ended before the line's newline.
	partial bool
	// fileBytes is the line's size in the node's CRI log file: "<timestamp> stdout|stderr F "
	// (stdout and stderr have the same length) before the content. Lines the runtime split into
	// partial records count one prefix only.
	fileBytes int
}

// errOver ends a follow stream because the run is over.
var errOver = errors.New("run over")

// streamError is why a follow stream ended with an error: its cause, for ObserveReopen.
type streamError struct {
	cause string
	err   error
}

func (e *streamError) Error() string { return e.cause + ": " + e.err.Error() }
func (e *streamError) Unwrap() error { return e.err }

func streamFailed(cause string, err error) error {
	if err == nil {
		return nil
	}
	return &streamError{cause: cause, err: err}
}

// reopening reports a follow stream that ended while its run goes on: to ObserveReopen, and to the
// log (a stream the node closed is routine, at V(1); a failure at the default level, once per
// reopening, which the backoff spaces out).
func (c *capture) reopening(ctx context.Context, err error) {
	cause, level := "ended", 1
	var se *streamError
	if errors.As(err, &se) {
		cause, level = se.cause, 0
	}
	if c.cfg.ObserveReopen != nil {
		c.cfg.ObserveReopen(cause)
	}
	logr.FromContextOrDiscard(ctx).V(level).Info("Log stream ended; reopening it", "log", c.ref.String(), "cause", cause, "error", err)
}

// follow streams the run's log from the durable position, writing segments as they fill or age,
// until the stream ends or breaks, or the run is over (errOver).
func (c *capture) follow(ctx context.Context, src Source, over func(context.Context) (End, error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// From the last line captured, durable or not: what the segment holds stays in memory.
	c.segSkip = 0
	c.watch = skipWatch{maxSize: c.cfg.NodeLogMaxSize}
	defer func() { c.watch = skipWatch{} }()
	rc, err := src.Open(ctx, c.ref, OpenOptions{Follow: true, Since: c.segLast})
	if err != nil {
		return streamFailed("open", err)
	}
	defer rc.Close()
	lines := make(chan line)
	readErr := make(chan error, 1)
	go func() { readErr <- readLines(ctx, rc, lines) }()
	tick := time.NewTicker(c.cfg.Poll)
	defer tick.Stop()
	first := true
	for {
		select {
		case l := <-lines:
			if l.partial {
				continue // the stream broke mid-line: the whole line comes again when it is reopened
			}
			if c.cfg.ObserveLag != nil {
				c.cfg.ObserveLag(time.Since(l.ts))
			}
			if err := c.add(ctx, l, &first); err != nil {
				return streamFailed("store", err)
			}
		case err := <-readErr:
			return streamFailed("broken", err)
		case <-tick.C:
			if err := c.flushAged(ctx); err != nil {
				return streamFailed("store", err)
			}
			end, err := over(ctx)
			if err != nil {
				return streamFailed("status", err)
			}
			if end.Over {
				return errOver
			}
		}
	}
}

// flushAged writes the segment being filled once it is SegmentAge old.
func (c *capture) flushAged(ctx context.Context) error {
	if c.segPending && time.Since(c.segStart) >= c.cfg.SegmentAge {
		return c.flush(ctx)
	}
	return nil
}

// finish reads the rest of an ended run without follow and writes the last segment, or the whole
// log when nothing of it was stored yet (see Capture).
func (c *capture) finish(ctx context.Context, src Source, end End) (*Assembled, error) {
	c.segSkip = 0
	rc, err := src.Open(ctx, c.ref, OpenOptions{Previous: end.Previous, Since: c.segLast})
	if err != nil {
		return nil, &ReadError{Ref: c.ref, Err: err}
	}
	defer rc.Close()
	lines := make(chan line)
	readErr := make(chan error, 1)
	go func() { readErr <- readLines(ctx, rc, lines) }()
	first := true
	for {
		select {
		case l := <-lines:
			if err := c.add(ctx, l, &first); err != nil {
				return nil, err
			}
		case err := <-readErr:
			if err != nil {
				return nil, &ReadError{Ref: c.ref, Err: err}
			}
			if c.seq == 0 && c.final != nil {
				key, retainUntil := c.final(end.Previous)
				return c.whole(ctx, key, retainUntil)
			}
			return nil, c.flush(ctx)
		}
	}
}

// whole writes the run's log, all of it in the segment being filled, as its final object, locked
// until retainUntil (zero: unlocked).
func (c *capture) whole(ctx context.Context, key string, retainUntil time.Time) (*Assembled, error) {
	if err := c.compress(true); err != nil {
		return nil, err
	}
	opts := objstore.PutOptions{ContentType: archive.LogContentType, ContentEncoding: "gzip", RetainUntil: retainUntil}
	// Locked already: an earlier pass that crashed before recording it stored the same lines.
	if err := lockedElse(c.store.Put(ctx, key, bytes.NewReader(c.buf.Bytes()), opts)); err != nil {
		return nil, fmt.Errorf("store the log of %s: %w", c.ref, err)
	}
	return &Assembled{Key: key, Bytes: c.segBytes, StoredBytes: int64(c.buf.Len()), SHA256: hex.EncodeToString(c.segHash.Sum(nil))}, nil
}

// ReadError is a failure to read the log itself (as opposed to storing it): the caller retries
// it until a deadline, then records the rest as a gap with Unreadable.
type ReadError struct {
	Ref Ref
	Err error
}

func (e *ReadError) Error() string { return fmt.Sprintf("read log of %s: %v", e.Ref, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// LostError says that the rest of a run's log cannot be read at all (End.Lost).
type LostError struct {
	Ref    Ref
	Reason record.GapReason
}

func (e *LostError) Error() string {
	return fmt.Sprintf("the rest of the log of %s is lost: %s", e.Ref, e.Reason)
}

// add takes one line of a stream: it skips what is durable already, records a gap when the
// stream no longer holds the last durable line, and appends the rest to the segment.
func (c *capture) add(ctx context.Context, l line, first *bool) error {
	wasFirst := *first
	*first = false
	switch {
	case c.segLast.IsZero():
	case l.ts.Before(c.segLast):
		// Already captured. The kubelet's reader replays the current file from its start when it
		// takes a stale event for a rotation: the lines at segLast come again after these.
		c.segSkip = 0
		return nil
	case l.ts.Equal(c.segLast) && c.segSkip < c.segLines:
		c.segSkip++
		return nil
	case wasFirst && l.ts.After(c.segLast):
		// The stream starts after the last line captured: it was rotated away in between.
		if err := c.gap(ctx, l.ts, record.GapRotated, "the log file was rotated before the rest of it was read"); err != nil {
			return err
		}
	}
	if why := c.watch.take(l, time.Now()); why != "" {
		if err := c.gap(ctx, l.ts, record.GapMaybeRotated, why); err != nil {
			return err
		}
	}
	if !c.segPending {
		c.segPending, c.segStart = true, time.Now()
	}
	c.raw.Write(l.data)
	if c.raw.Len() >= rawBlock {
		if err := c.compress(false); err != nil {
			return err
		}
	}
	c.segHash.Write(l.data)
	c.segBytes += int64(len(l.data))
	if l.ts.Equal(c.segLast) {
		c.segLines++
	} else {
		c.segLast, c.segLines = l.ts, 1
	}
	c.segSkip = c.segLines
	if c.unfollowed {
		if c.firstTime.IsZero() {
			c.firstTime = l.ts
		}
		c.fileBytes += int64(l.fileBytes)
		if err := c.maybeRotated(ctx); err != nil || c.unfollowed {
			return err
		}
	}
	if c.segBytes >= c.cfg.SegmentBytes {
		return c.flush(ctx)
	}
	return c.fitMemory(ctx)
}

// maybeRotated records, for a run never followed, a gap before its first line once the file read
// comes within a tenth of the node's rotation size: the node may have rotated older output away.
// The check is over (unfollowed is cleared) once that is recorded.
func (c *capture) maybeRotated(ctx context.Context) error {
	if c.fileBytes >= c.cfg.NodeLogMaxSize-c.cfg.NodeLogMaxSize/10 {
		g := record.Gap{PodUID: c.ref.PodUID, Container: c.ref.Container, Run: c.ref.Run, Before: c.firstTime, Reason: record.GapMaybeRotated,
			Detail: fmt.Sprintf("read only after it ended (never followed); its current file held %d bytes or more, close to the node's rotation size of %d: older files may have been rotated away",
				c.fileBytes, c.cfg.NodeLogMaxSize)}
		if err := c.recs.PutGap(ctx, g); err != nil {
			return fmt.Errorf("record gap in the log of %s: %w", c.ref, err)
		}
		c.unfollowed = false
	}
	return nil
}

// rawBlock is how much output a capture holds uncompressed before it compresses it.
const rawBlock = 32 << 10

// gzipWriters are shared by every capture: a compressor's state is about 480 KiB, so one per
// followed container would cost half a GiB at 1,000 of them.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

// compress appends the lines waiting in raw to the segment as one gzip member (gzip readers read
// concatenated members as one stream, as they read the concatenated segments of a composed log).
// With empty, a segment still empty gets an empty member, so that it is valid gzip.
func (c *capture) compress(empty bool) error {
	if c.raw.Len() == 0 && !(empty && c.buf.Len() == 0) {
		return nil
	}
	zw := gzipWriters.Get().(*gzip.Writer)
	defer func() {
		zw.Reset(io.Discard) // the pool must not keep this capture's buffer
		gzipWriters.Put(zw)
	}()
	zw.Reset(&c.buf)
	if _, err := zw.Write(c.raw.Bytes()); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if c.raw.Cap() > 4*rawBlock {
		c.raw = bytes.Buffer{} // a long line grew it: do not keep that much per capture
	}
	c.raw.Reset()
	return nil
}

// gap records that output after the durable position and before `before` (zero: up to the end)
// is missing.
func (c *capture) gap(ctx context.Context, before time.Time, reason record.GapReason, detail string) error {
	g := record.Gap{PodUID: c.ref.PodUID, Container: c.ref.Container, Run: c.ref.Run, After: c.segLast, Before: before, Reason: reason, Detail: detail}
	if err := c.recs.PutGap(ctx, g); err != nil {
		return fmt.Errorf("record gap in the log of %s: %w", c.ref, err)
	}
	return nil
}

// flush writes the segment being filled, if it holds anything, and makes its position durable.
func (c *capture) flush(ctx context.Context) error {
	if !c.segPending {
		return nil
	}
	if err := c.compress(false); err != nil {
		return err
	}
	key := c.segKey(c.seq)
	stored := int64(c.buf.Len())
	if err := c.store.Put(ctx, key, bytes.NewReader(c.buf.Bytes()), objstore.PutOptions{ContentType: "application/gzip"}); err != nil {
		return fmt.Errorf("store segment %d of the log of %s: %w", c.seq, c.ref, err)
	}
	state, err := c.segHash.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return err
	}
	s := record.Segment{PodUID: c.ref.PodUID, Container: c.ref.Container, Run: c.ref.Run, Seq: c.seq, ObjectKey: key,
		StoredBytes: stored, Bytes: c.segBytes, TotalBytes: c.total + c.segBytes, LastTime: c.segLast, LastTimeLines: c.segLines, HashState: state}
	if err := c.recs.PutSegment(ctx, s); err != nil {
		return fmt.Errorf("record segment %d of the log of %s: %w", c.seq, c.ref, err)
	}
	c.seq, c.total, c.last, c.lastLines, c.hash = c.seq+1, s.TotalBytes, c.segLast, c.segLines, c.segHash
	c.reset()
	return nil
}

// readLines parses a timestamped log stream into lines, sending each on out. A line's content is
// read whole, so memory holds one line at a time.
func readLines(ctx context.Context, r io.Reader, out chan<- line) error {
	br := bufio.NewReaderSize(r, 16<<10)
	for {
		ts, err := br.ReadString(' ')
		if err == io.EOF && ts == "" {
			return nil
		}
		if err != nil {
			return err // a stream cut inside a timestamp: treated as broken
		}
		t, err := time.Parse(time.RFC3339Nano, ts[:len(ts)-1])
		if err != nil {
			// The node's reader writes its errors into the stream once it has started it.
			rest, _ := br.Peek(min(br.Buffered(), 200))
			text, _, _ := strings.Cut(ts+string(rest), "\n")
			return fmt.Errorf("log line without timestamp (an error of the node's log reader, or timestamps=true not asked): %q", text)
		}
		data, err := br.ReadBytes('\n')
		l := line{ts: t, data: data, fileBytes: len(ts) + len("stdout F ") + len(data)}
		switch {
		case err == io.EOF:
			l.partial = true
		case err != nil:
			return err
		}
		select {
		case out <- l:
		case <-ctx.Done():
			return ctx.Err()
		}
		if l.partial {
			return nil
		}
	}
}

// Assembled describes a run's log once assembled into one object.
type Assembled struct {
	Key                string
	Bytes, StoredBytes int64
	SHA256             string
}

// Assemble composes a run's recorded segments (recs.Segments) into one object under key (an
// empty gzip member when the run wrote nothing), locked until retainUntil (zero: unlocked), and
// returns its size and sha256. It does not delete the segments: call Forget once the result is
// recorded.
func Assemble(ctx context.Context, store objstore.Store, ref Ref, key string, segs []record.Segment, retainUntil time.Time) (Assembled, error) {
	opts := objstore.PutOptions{ContentType: archive.LogContentType, ContentEncoding: "gzip", RetainUntil: retainUntil}
	a := Assembled{Key: key}
	h := sha256.New()
	if len(segs) == 0 {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_ = zw.Close()
		if err := store.Put(ctx, key, bytes.NewReader(b.Bytes()), opts); lockedElse(err) != nil {
			return Assembled{}, fmt.Errorf("store the empty log of %s: %w", ref, err)
		}
		a.StoredBytes = int64(b.Len())
	} else {
		keys := make([]string, len(segs))
		for i, s := range segs {
			if s.Seq != int32(i) {
				return Assembled{}, fmt.Errorf("assemble the log of %s: segment %d is missing", ref, i)
			}
			keys[i] = s.ObjectKey
			a.StoredBytes += s.StoredBytes
		}
		if err := store.Compose(ctx, key, keys, opts); lockedElse(err) != nil {
			return Assembled{}, fmt.Errorf("assemble the log of %s: %w", ref, err)
		}
		last := segs[len(segs)-1]
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(last.HashState); err != nil {
			return Assembled{}, err
		}
		a.Bytes = last.TotalBytes
	}
	a.SHA256 = hex.EncodeToString(h.Sum(nil))
	return a, nil
}

// lockedElse is err, or nil if err is objstore.ErrLocked: a locked object under the key of an
// assembled log was assembled by an earlier pass from the same segments (they are deleted only
// once the log is recorded), so it holds the same bytes, and GCS refuses to replace it.
func lockedElse(err error) error {
	if errors.Is(err, objstore.ErrLocked) {
		return nil
	}
	return err
}

// Forget deletes a run's segments (recs.Segments), objects and rows, once its assembled log is
// recorded.
func Forget(ctx context.Context, recs Records, store objstore.Store, ref Ref, segs []record.Segment) error {
	for _, s := range segs {
		if err := store.Delete(ctx, s.ObjectKey); err != nil {
			return fmt.Errorf("delete segment %d of the log of %s: %w", s.Seq, ref, err)
		}
	}
	return recs.DeleteSegments(ctx, ref.PodUID, ref.Container, ref.Run)
}

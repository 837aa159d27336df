// Package capture follows a container's log while the container runs and writes it durably, in
// segments, to the object store, so that what the node later rotates away, or garbage-collects
// after the pod's deletion, is already safe. A capture resumes after any break (a rotated or reset
// stream, an API server or archiver restart) from its last durable line without duplicating a
// byte, and records a gap, never a silently shorter log, when output was lost before it was read.
//
// Positions are the per-line timestamps pods/log adds with timestamps=true: each line starts with
// the timestamp of its first record, and the kubelet's reader filters each record by them
// (sinceTime, whole seconds). Lines need not come in timestamp order. A resumed stream starts a
// second before the greatest timestamp captured; what it delivers again before the last line
// captured is recognised by fingerprint (timestamp and first bytes, for the last lines captured)
// or, for lines captured before the capture started, by timestamp and count (see position), and
// skipped. Lines of a live stream are never dropped for their timestamps: only a run of lines
// that is the stream delivering captured lines again (the node's reader replaying its file) is.
// If the resumed stream no longer holds the last line captured, the file was rotated in between
// and whatever was written in between may be lost: a gap.
//
// A line is read and stored in pieces of at most pieceSize bytes, so a line of any length costs
// bounded memory; a segment may end inside a line, and a resumed capture skips the part of that
// line it holds.
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
	"github.com/jobvault/jobvault/pkg/audit"
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
	// Terminated: the run's container terminated but the run is not over: its pod runs and the
	// container may restart, which makes its log the previous one. Such a run's log is complete:
	// it is read once without follow, and the capture waits, without streams, until Over.
	Terminated bool
	// StartedAt and FinishedAt bound the run as its container status tells them, when known
	// (zero: not known yet).
	StartedAt, FinishedAt time.Time
	// ContainerID is the run's container as the status names it ("" if it does not): a status that
	// names another one for the run later is not the run's, and ends its capture (GapOtherRun).
	ContainerID string
	// Limit is the earliest a later run of the container can have stamped a line, as the status
	// tells once it shows a later run: the run's finish second, or the second before the next
	// run's start second if that is later (the next container starts after this one finished; a
	// process may write a moment before its start is recorded). Zero: no later run is known.
	// Final: no later run can exist (the pod ended, or the container will not restart): every
	// read of the container is the run's. See bind.go.
	Limit time.Time
	Final bool
	// StillRunning: the run is over only by the caller's decision (its pod passed its termination
	// margin, or its node is lost while its kubelet still serves logs) while its status shows it
	// running: its end may not be read, and a GapStillRunning gap says so.
	StillRunning bool
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
	// Settle is how long after a read opened a status that still shows no later run of the
	// container binds the read to the run (bind.go); 0: the first status read after the read
	// opened (at most Poll later). Holding a read longer costs memory, and a stream held back
	// past the node's rotation loses what the node rotates away.
	Settle time.Duration
}

// heldMax bounds what a capture holds of a read not yet bound to its run (bind.go): the stream
// waits beyond it.
const heldMax = 4 << 20

// DefaultConfig is what the archiver uses unless told otherwise.
var DefaultConfig = Config{SegmentBytes: 8 << 20, SegmentAge: 30 * time.Second, Poll: time.Second, Retry: 5 * time.Second,
	NodeLogMaxSize: 10 << 20, Settle: 0}

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
	defer c.yield(ctx, over)
	c.final = final
	if m := managedBy(ctx); m != nil {
		c.changed = m.changed
		if c.startOpen {
			c.quiet = m.quiet
		}
		defer func() { m.quiet = c.quietMark() }()
	}
	retry := 100 * time.Millisecond
	for first := true; ; first = false {
		end, err := over(ctx)
		if err == nil {
			end, err = c.observe(ctx, end)
		}
		if err != nil {
			return nil, err
		}
		if end.Lost != "" {
			// What was read of the run is kept: stored, the rest a gap.
			if err := c.flush(ctx); err != nil {
				return nil, err
			}
			return nil, &LostError{Ref: ref, Reason: end.Lost}
		}
		if end.Over || end.Terminated {
			// Nothing durable and already ended: the run was never followed.
			if first {
				c.unfollowed = c.seq == 0 && cfg.NodeLogMaxSize > 0
			}
		}
		if end.Over {
			return c.finish(ctx, src, end, over)
		}
		if err := c.settle(ctx, over); err != nil {
			return nil, err // the last read's lines held are decided before another opens
		}
		if end.Terminated {
			// Its log is complete: read it once, then only watch for the run to be over.
			if !c.drained && !c.readToEnd(end) {
				if err := c.read(ctx, src, false, over); err != nil {
					return nil, err
				}
			}
			c.drained = true
			if err := c.flushAged(ctx); err != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(cfg.Poll):
			case <-c.changed:
			}
			continue
		}
		opened := time.Now()
		err = c.follow(ctx, src, over)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err == nil {
			c.cleanOpen = opened
		}
		if !errors.Is(err, errOver) {
			c.reopening(ctx, err)
		}
		if se := (*streamError)(nil); errors.As(err, &se) && se.cause == "store" {
			// A segment was not stored or not recorded, so what is durable is uncertain: a record
			// whose reply was lost is durable. Filling the segment on and storing it again under
			// its number would leave a row that describes other bytes than its object holds, and
			// the segment would grow while the store is down. The caller runs the capture again,
			// from what is recorded.
			return nil, err
		}
		// follow honours the segment's age only while its stream stays open.
		if err := c.flushAged(ctx); err != nil {
			return nil, err
		}
		if !errors.Is(err, errOver) {
			// A stream that ended or broke soon after it was opened, or failed to open, is
			// reopened later and later, up to Retry; one that lasted, at once. The node's reader
			// fails every stream when it cannot watch the log file (out of inotify instances,
			// say): it answers the lines so far, then its error, and each reopening reads the
			// whole file again. And it ends a follow stream cleanly, at once, when the container
			// is not running (a status not yet updated says it is).
			if time.Since(opened) < cfg.Retry {
				retry = min(2*retry, cfg.Retry)
			} else {
				retry = 100 * time.Millisecond
			}
			if err := c.waitReopen(ctx, retry, over); err != nil {
				return nil, err
			}
		}
	}
}

// waitReopen waits d before a stream is reopened, less if the run's status says it ended: its rest
// is read at once (see managed). The status is read first, as a change may have been taken while
// the stream ended (settle), then at each change; any other change waits on, so that a pod changed
// often does not undo the back-off.
func (c *capture) waitReopen(ctx context.Context, d time.Duration, over func(context.Context) (End, error)) error {
	ended := func() bool {
		end, err := over(ctx)
		return err == nil && (end.Over || end.Terminated || end.Lost != "")
	}
	if ended() {
		return nil
	}
	wait := time.NewTimer(d)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			return nil
		case <-c.changed:
			if ended() {
				return nil
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
	seq   int32
	total int64
	pos   position
	hash  hash.Hash

	// The segment being filled: whole lines, gzip-compressed, with its own position. Lines wait
	// in raw until a block is full, then go into buf as one gzip member (see compress).
	buf        bytes.Buffer
	raw        bytes.Buffer
	segBytes   int64
	segStart   time.Time
	segPos     position
	segHash    hash.Hash
	segPending bool
	// segStreams is the stream index of the segment's bytes, when the stream tells them (tags).
	segStreams streamIndex
	tags       StreamTagger

	// seen holds the fingerprints of the last lines captured, durable or not.
	seen ring
	// The stream being read. resuming: it was opened from a position and has not yet passed the
	// last line captured; cursor is where in seen it is; fbCount and fbPastMax track it by
	// timestamps where seen cannot (lines captured before the capture started). replayAt, when
	// not -1, is where in seen a replay by the node's reader is. keep says whether the current
	// line is stored, skip how many of its bytes are held already.
	resuming bool
	// atCut: the stream starts exactly at the start of the last line captured, cut; noReplay: it
	// delivers no line again (ExactStart).
	atCut     bool
	noReplay  bool
	cursor    int
	fbCount   int32
	fbPastMax bool
	replayAt  int
	keep      bool
	skip      int64

	// unfollowed: the run is read only after its end, from nothing durable; its first segment is
	// held back until it is known whether its start may have been rotated away (maybeRotated), so
	// that a crash cannot leave segments without that gap.
	unfollowed bool
	firstTime  time.Time
	fileBytes  int64 // the size of what was read, as the node's file holds it

	// watch spots where the follow stream may have skipped rotated files (off: not following).
	watch skipWatch
	// drained: the run's container terminated and its log was read to its end (End.Terminated).
	drained bool
	// cleanOpen is when the last follow stream that the node ended cleanly was opened (see
	// readToEnd).
	cleanOpen time.Time
	// changed is signalled when the run's pod changed (see managed): its status is read then
	// rather than at the next Poll.
	changed <-chan struct{}
	// The binding of reads to the run (bind.go). ends is when the run's lines end, from its
	// container's finish (zero: not known yet): even a read bound to the run gives none stamped
	// later (see observe).
	bind binding
	ends time.Time

	// The start rule (judgeStart): started is the run's start from its status (zero: not known),
	// opened when the stream being read was opened. While startOpen, the run's first line read
	// (first) is yet to be judged; answered is when the node answered its stream (the archiver's
	// clock), quiet until when a stream opened in time followed the run and read nothing (see
	// from). backlog counts the file bytes of the lines measured, and peak is their greatest rate
	// from first on. Those are the lines stamped before their stream opened or, when first's
	// stream was answered late, every line read until the judgement.
	started   time.Time
	opened    time.Time
	answered  time.Time
	quiet     time.Time
	startOpen bool
	late      bool
	first     time.Time
	backlog   int64
	peak      float64
	// held is what the capture holds of cfg.Memory, room what its segment's buffer may grow to
	// (fitMemory).
	held int64
	room int
}

func resume(ctx context.Context, cfg Config, recs Records, store objstore.Store, segKey func(int32) string, ref Ref) (*capture, error) {
	segs, err := recs.Segments(ctx, ref.PodUID, ref.Container, ref.Run)
	if err != nil {
		return nil, fmt.Errorf("resume capture of %s: %w", ref, err)
	}
	c := &capture{cfg: cfg, recs: recs, store: store, segKey: segKey, ref: ref, hash: sha256.New(), replayAt: -1}
	if n := len(segs); n > 0 {
		s := segs[n-1]
		c.seq, c.total, c.pos.max, c.pos.maxLines = s.Seq+1, s.TotalBytes, s.LastTime, s.LastTimeLines
		if err := decodeState(s.HashState, c.hash, &c.pos); err != nil {
			return nil, fmt.Errorf("resume capture of %s: segment %d: %w", ref, s.Seq, err)
		}
		c.seen.evictedMax = c.pos.max
	}
	c.startOpen = len(segs) == 0 && cfg.NodeLogMaxSize > 0
	c.reset()
	return c, nil
}

// reset starts an empty segment at the durable position.
func (c *capture) reset() {
	c.buf.Reset()
	c.raw.Reset()
	c.segBytes, c.segStart, c.segPos, c.segPending = 0, time.Time{}, c.pos, false
	c.segStreams.reset()
	c.segHash = cloneHash(c.hash)
}

// open opens a stream from the last line captured, durable or not (what the segment holds stays
// in memory), and readies the capture to skip what the stream delivers again. The stream starts
// a second before the greatest timestamp captured: lines stamped a little earlier than it may
// follow it in the file.
func (c *capture) open(ctx context.Context, src Source, opts OpenOptions) (io.ReadCloser, error) {
	c.resuming, c.atCut, c.cursor, c.fbCount, c.fbPastMax, c.replayAt, c.keep, c.skip = !c.segPos.max.IsZero(), false, 0, 0, false, -1, false, 0
	if c.resuming {
		opts.Since = c.segPos.max.Add(-time.Second)
	}
	c.opened = time.Now()
	rc, err := src.Open(ctx, c.ref, opts)
	c.tags, _ = rc.(StreamTagger)
	x, exactly := rc.(ExactStart)
	c.noReplay = exactly
	if exactly && c.resuming {
		if exact, cut := x.StartsExactly(); exact {
			// Nothing to recognise: the stream holds no line captured but, cut, the last one.
			c.resuming, c.atCut = false, cut
		}
	}
	c.bind.opened(time.Now()) // after the answer: the node chose the container before
	// A stream that starts exactly at the position reads the run's own file (the node agent's
	// source), not whatever container a status picks: it is the run's (bind.go).
	c.bind.bound = c.bind.bound || exactly
	return rc, err
}

// ExactStart is implemented by a Source's stream that can start exactly at the capture's position
// instead of from a timestamp (the node agent: from the file and offset its source recorded with
// the last piece the capture took; see record.Segment.SourcePosition). Timestamps cannot place a
// position among lines stamped alike or out of order; an offset can. Such a stream never delivers
// a line again (it is no node reader replaying its file): every line past the position is new,
// however it is stamped.
type ExactStart interface {
	// StartsExactly reports whether the stream starts just after the last line the capture took
	// (exact), or, cut as well, at the start of that line when the capture took only part of it.
	StartsExactly() (exact, cut bool)
}

func cloneHash(h hash.Hash) hash.Hash {
	state, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
	n := sha256.New()
	_ = n.(encoding.BinaryUnmarshaler).UnmarshalBinary(state)
	return n
}

// line is one piece of a line of the stream: the line's timestamp and up to pieceSize bytes of
// its content (the last piece with its newline, if it had one).
type line struct {
	ts   time.Time
	data []byte
	// start: the piece starts its line; end: it ends it.
	start, end bool
	// partial: the stream ended before the line's newline (end is set too).
	partial bool
	// off is where data starts in the stream (for StreamTagger).
	off int64
	// at is when a follow stream delivered it (zero: not followed), for the skip watch: a line
	// held before it is added (bind.go) arrived when it did.
	at time.Time
	// fileBytes is the piece's size in the node's CRI log file: "<timestamp> stdout|stderr F "
	// (stdout and stderr have the same length) before the content of a line's first piece. Lines
	// the runtime split into partial records count one prefix only.
	fileBytes int
}

// pieceSize bounds what a capture holds of one line: a longer line is read and stored in pieces.
const pieceSize = 64 << 10

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
	c.watch.follow(c.cfg.NodeLogMaxSize)
	defer c.watch.stop()
	rc, err := c.open(ctx, src, OpenOptions{Follow: true})
	if err != nil {
		return streamFailed("open", err)
	}
	defer rc.Close()
	lines := make(chan line)
	readErr := make(chan error, 1)
	go func() { readErr <- readLines(ctx, rc, lines, c.resuming) }()
	tick := time.NewTicker(c.cfg.Poll)
	defer tick.Stop()
	for {
		in := lines
		if c.bind.pendingBytes >= heldMax {
			in = nil // held lines wait for the status (bind.go): the stream waits with them
		}
		select {
		case l := <-in:
			l.at = time.Now()
			if l.start {
				c.bind.sawLine(l)
				if c.cfg.ObserveLag != nil {
					c.cfg.ObserveLag(time.Since(l.ts))
				}
			}
			if err := c.add(ctx, l); err != nil {
				return streamFailed("store", err)
			}
			continue
		case err := <-readErr:
			// What the stream held is decided while it is still followed (its skip watch on).
			if serr := c.settle(ctx, over); serr != nil {
				return streamFailed("status", serr)
			}
			return streamFailed("broken", err)
		case <-tick.C:
		case <-c.changed:
			// Its pod changed: the status may say the run ended, and a deleted pod's logs go
			// within a second of that (see managed). Read the rest now, not at the next tick.
		}
		c.followedQuiet()
		if err := c.flushAged(ctx); err != nil {
			return streamFailed("store", err)
		}
		end, err := over(ctx)
		if err != nil {
			return streamFailed("status", err)
		}
		if end, err = c.observe(ctx, end); err != nil {
			return streamFailed("store", err)
		}
		if end.Over || end.Terminated {
			return errOver // read to its end without follow
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

// finish reads the rest of an ended run without follow (unless it was drained already) and
// writes the last segment, or the whole log when nothing of it was stored yet (see Capture).
func (c *capture) finish(ctx context.Context, src Source, end End, over func(context.Context) (End, error)) (*Assembled, error) {
	if !c.drained && !c.readToEnd(end) {
		if err := c.read(ctx, src, end.Previous, over); err != nil {
			return nil, err
		}
		if err := c.settle(ctx, over); err != nil {
			return nil, err
		}
	}
	if end.StillRunning {
		if err := c.gap(ctx, time.Time{}, record.GapStillRunning,
			"read as ended while its status showed it running (its pod passed the termination margin, or its node was lost): its end may be missing"); err != nil {
			return nil, err
		}
	}
	if c.seq == 0 && c.final != nil {
		key, retainUntil := c.final(end.Previous)
		return c.whole(ctx, key, retainUntil)
	}
	return nil, c.flush(ctx)
}

// readToEnd reports whether a follow stream already read the ended run to its end: one the node
// ended cleanly, opened after the run finished (FinishedAt has whole seconds: a second after it),
// read a file that no longer grew to its end, as a read without follow would. It spares that read,
// which a real kubelet cannot answer once it removed the container, seconds after a deleted pod's
// containers stop. Only for the container's last run: after a restart a stream serves the next.
func (c *capture) readToEnd(end End) bool {
	return !end.Previous && !end.FinishedAt.IsZero() && c.cleanOpen.After(end.FinishedAt.Add(time.Second))
}

// read reads the rest of an ended run's log without follow. When the read fails, what it read is
// stored first (unless the run is held back whole, see maybeRotated): the caller records the rest
// as a gap once it gives up, and a line read is never thrown away.
func (c *capture) read(ctx context.Context, src Source, previous bool, over func(context.Context) (End, error)) error {
	err := c.readRest(ctx, src, previous, over)
	var unread *ReadError
	if errors.As(err, &unread) && !c.unfollowed {
		if ferr := c.flush(ctx); ferr != nil {
			return ferr
		}
	}
	return err
}

func (c *capture) readRest(ctx context.Context, src Source, previous bool, over func(context.Context) (End, error)) error {
	rc, err := c.open(ctx, src, OpenOptions{Previous: previous})
	if err != nil {
		return &ReadError{Ref: c.ref, Err: err}
	}
	defer rc.Close()
	lines := make(chan line)
	readErr := make(chan error, 1)
	go func() { readErr <- readLines(ctx, rc, lines, c.resuming) }()
	for {
		select {
		case l := <-lines:
			if err := c.add(ctx, l); err != nil {
				return err
			}
			if c.bind.pendingBytes >= heldMax {
				// Held lines wait for the status (bind.go); the stream waits with them.
				if err := c.settle(ctx, over); err != nil {
					return err
				}
			}
		case err := <-readErr:
			if err != nil {
				return &ReadError{Ref: c.ref, Err: err}
			}
			return nil
		}
	}
}

// whole writes the run's log, all of it in the segment being filled, as its final object, locked
// until retainUntil (zero: unlocked). The store checks the object against the checksum of the
// buffer it is written from, and the result carries that sha256 (StoredSHA256) when this write
// stored it: the seal trusts it instead of reading the object back.
func (c *capture) whole(ctx context.Context, key string, retainUntil time.Time) (*Assembled, error) {
	if err := c.judgeStart(ctx); err != nil {
		return nil, err
	}
	if err := c.compress(true); err != nil {
		return nil, err
	}
	sum := hex.EncodeToString(c.segHash.Sum(nil))
	a, err := putWhole(ctx, c.store, c.ref, key, c.buf.Bytes(), sum, retainUntil)
	if err != nil {
		return nil, fmt.Errorf("store the log of %s: %w", c.ref, err)
	}
	a.Bytes, a.SHA256 = c.segBytes, sum
	return &a, nil
}

// putWhole stores b, a whole log already compressed in memory whose uncompressed bytes hash to
// sum (hex sha256), under key, locked until retainUntil (zero: unlocked), with its checksum for
// the store to check (a mismatch fails with objstore.ErrChecksum and stores nothing). It returns
// the object's key, stored size and, when this write stored it, the sha256 the store accepted.
//
// The write is once (objstore.PutOptions.IfAbsent): a final log is never replaced. An object
// found under the key that holds the same log was written by an earlier pass that stopped before
// recording it; this write checked nothing then, so the seal is to read that object back. One
// that holds another log is a *ConflictError: nothing is replaced.
func putWhole(ctx context.Context, store objstore.Store, ref Ref, key string, b []byte, sum string, retainUntil time.Time) (Assembled, error) {
	checksum := objstore.ChecksumOf(b)
	opts := objstore.PutOptions{ContentType: archive.LogContentType, ContentEncoding: "gzip", RetainUntil: retainUntil, Checksum: checksum, IfAbsent: true}
	a := Assembled{Key: key, StoredBytes: int64(len(b))}
	err := store.Put(ctx, key, bytes.NewReader(b), opts)
	switch {
	case err == nil:
		a.StoredSHA256 = hex.EncodeToString(checksum.SHA256[:])
	case errors.Is(err, objstore.ErrExists), errors.Is(err, objstore.ErrLocked):
		if a.StoredBytes, err = sameLog(ctx, store, ref, key, sum); err != nil {
			return Assembled{}, err
		}
	default:
		return Assembled{}, err
	}
	return a, nil
}

// sameLog checks the object under key, found there by a write meant to store a log whose
// uncompressed bytes hash to sum, reading it back as the seal does (audit.HashObject): it returns
// the object's stored size when it holds that log, a *ConflictError when it holds another, or
// anything but a gzip log (nothing this write can change: written again, it would conflict
// again). A failure to read the object is an error of its own (objstore.ErrNotFound if there is
// none), retried.
func sameLog(ctx context.Context, store objstore.Store, ref Ref, key, sum string) (int64, error) {
	h, err := audit.HashObject(ctx, store, key, true)
	switch {
	case err != nil:
		return 0, fmt.Errorf("read the object already under %s: %w", key, err)
	case h.ContentErr != nil:
		return 0, &ConflictError{Ref: ref, Key: key, Found: fmt.Sprintf("not a gzip log (%v)", h.ContentErr), Want: sum}
	case h.ContentSHA256 != sum:
		return 0, &ConflictError{Ref: ref, Key: key, Found: "sha256 " + h.ContentSHA256, Want: sum}
	}
	return h.Bytes, nil
}

// ConflictError: the final object of a run's log was found holding another log (a write-once
// write found it taken): it was left as it is, and the run's log is not stored under that name.
// Writing again cannot succeed while that object is there: the caller records the run's loss,
// with this as the reason.
type ConflictError struct {
	Ref Ref
	Key string
	// Found says what the object holds; Want is the sha256 of the uncompressed log to store.
	Found, Want string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("the log of %s was not stored: %s holds another log already (%s, not sha256 %s), left as it is", e.Ref, e.Key, e.Found, e.Want)
}

func (e *ConflictError) Unwrap() error { return objstore.ErrExists }

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

// add takes one piece of a line of a stream: it skips what is captured already, records a gap
// when the stream no longer holds the last line captured, and appends the rest to the segment.
func (c *capture) add(ctx context.Context, l line) error {
	if held, err := c.hold(ctx, l); held || err != nil {
		return err
	}
	if l.start {
		c.skip = 0
		past, err := c.past(ctx, l)
		if err != nil {
			return err
		}
		keep := !past
		if keep {
			if keep, err = c.classify(ctx, l); err != nil {
				return err
			}
		}
		c.keep = keep
	}
	var streams []StreamRun
	if c.tags != nil {
		streams = c.tags.Streams(l.off, l.off+int64(len(l.data))) // asked for every piece: the tagger forgets
	}
	if !c.keep {
		return nil
	}
	fresh := l.start && c.skip == 0 // a new line, not the rest of one cut
	data := l.data
	if c.skip > 0 {
		n := int(min(c.skip, int64(len(data))))
		data, c.skip = data[n:], c.skip-int64(n)
		streams = dropStreamBytes(streams, int64(n))
	}
	for _, r := range streams {
		c.segStreams.add(r)
	}
	if err := c.trackStart(ctx, l); err != nil {
		return err
	}
	at := l.at
	if at.IsZero() {
		at = time.Now()
	}
	if why := c.watch.take(l, at); why != "" {
		if err := c.gap(ctx, l.ts, record.GapMaybeRotated, why); err != nil {
			return err
		}
	}
	if fresh {
		c.took(l) // after the gaps: they start where the position was before this line
	}
	if !c.segPending {
		c.segPending, c.segStart = true, time.Now()
	}
	c.raw.Write(data)
	if c.raw.Len() >= rawBlock {
		if err := c.compress(false); err != nil {
			return err
		}
	}
	c.segHash.Write(data)
	c.segBytes += int64(len(data))
	if l.end && !l.partial {
		c.segPos.partial = 0
	} else {
		c.segPos.partial += int64(len(data))
	}
	if c.unfollowed {
		if c.firstTime.IsZero() {
			c.firstTime = l.ts
		}
		c.fileBytes += int64(l.fileBytes)
		if err := c.maybeRotated(ctx, false); err != nil {
			return err
		}
		if c.unfollowed {
			return c.fitMemory(ctx) // held back whole, within the budget (see fitMemory)
		}
	}
	if c.segBytes >= c.cfg.SegmentBytes {
		return c.flush(ctx)
	}
	return c.fitMemory(ctx)
}

// trackStart measures, for the start rule, the lines read before their stream opened, and judges
// the start at the first line stamped after; when the first line's stream was answered late, it
// measures every line read instead, and judges as soon as they call for the gap, else when the
// first segment is stored (flush, whole).
func (c *capture) trackStart(ctx context.Context, l line) error {
	if !c.startOpen {
		return nil
	}
	if c.first.IsZero() {
		c.first, c.answered = l.ts, c.bind.openedAt
		c.late = !c.started.IsZero() && c.nodeTime(c.answered).Sub(c.from()) > timelyOpen
	}
	if !c.late && !l.ts.Before(c.opened) {
		return c.judgeStart(ctx)
	}
	c.backlog += int64(l.fileBytes)
	// The peak of the rate from the first line on: a burst followed by a pause is a burst.
	span := max(l.ts.Sub(c.first), 100*time.Millisecond)
	c.peak = max(c.peak, float64(c.backlog)/span.Seconds())
	if c.late && !c.unfollowed && c.unproven() {
		// A run read only after it ended is judged once its "possibly rotated" check had its say.
		return c.judgeStart(ctx)
	}
	return nil
}

// followedQuiet notes, while a follow stream is open and has read no line of a run not judged
// yet, that the run wrote nothing until now if that stream was answered in time (see from): a
// reset stream, reopened soon after, is then not late. Not while the stream holds lines not bound
// to the run yet (bind.go): they are read, and may be the run's first.
func (c *capture) followedQuiet() {
	if c.startOpen && c.first.IsZero() && len(c.bind.pending) == 0 && !c.started.IsZero() &&
		c.nodeTime(c.bind.openedAt).Sub(c.from()) <= timelyOpen {
		c.quiet = time.Now()
	}
}

// quietMark is the quiet mark to keep for a capture that resumes the run: none once its start is
// judged.
func (c *capture) quietMark() time.Time {
	if !c.startOpen {
		return time.Time{}
	}
	return c.quiet
}

// nodeTime is t, of the archiver's clock, on the node's, as far as its stamps show it ahead: a
// stream's answer, whose lateness a node clock behind can only make look greater (more gaps, none
// missed).
func (c *capture) nodeTime(t time.Time) time.Time { return t.Add(c.bind.ahead) }

// from is when, on the node's clock, the run may have begun writing what the capture has not
// seen: the start of its start second, or later, when a stream answered in time has followed it
// reading nothing (quiet). The mark, of the archiver's clock, is put on the node's by the least
// the node was seen ahead (or the most it may be behind, bind.low): a line arrives after its
// stamp, so that bound moves the mark earlier, never later, than it was on the node. Before any
// line arrived, the clocks are taken as one.
func (c *capture) from() time.Time {
	from := c.started.Truncate(time.Second)
	if c.quiet.IsZero() {
		return from
	}
	q := c.quiet
	if c.bind.seen {
		q = q.Add(c.bind.low)
	}
	if q.After(from) {
		from = q
	}
	return from
}

// timelyOpen is how long after the start of its run's start second a stream opened for the run's
// start is answered: the API keeps whole seconds, a kubelet reports a start within a second or two
// (its PLEG relists every second), and the archiver opens the stream once it sees the report.
const timelyOpen = 4 * time.Second

// judgeStart records an "unknown start" gap before the run's first line read unless that line is
// its first beyond doubt, as far as pods/log can tell: the node serves only the current file, so
// output before it was rotated away if the run wrote a rotation file's worth before it. The rule:
// the run's start is known to the second (its status's startedAt); the lines read give the run's
// write rate, at its peak (from the first line read to each line after, over 100 ms at least, so
// that a burst followed by a pause counts as the burst); if at that rate, doubled for headroom as
// a burst may have come first, the run could have written a rotation file between the start of
// its start's second and its first line read (or the node's answer, if that came first), the gap
// is recorded. A run whose start the status does not give is not judged here (unknown runs are
// judged by the "possibly rotated" check of unfollowed runs only).
//
// Which lines give the rate depends on when the stream was answered. The node opens the file a
// moment after the request leaves (seconds under load), and a rotation in between leaves it a file
// begun after the open, or with a line or two from just before it: what the file held at the open
// then says nothing of the rate (seen: 2 of 6 late captures beside three busy loops lost their
// first 4 s with no gap). So a stream answered more than timelyOpen after the start second (the
// archiver was down, or the capture waited for a slot) is judged by every line read until its
// first segment is stored. One answered sooner was opened for the run's start: its rate is that of
// the lines written before it opened, and a file with none is taken as the run's first, as in the
// model and on a node the run's first output often comes as the stream opens (judging those by the
// rate after gave gaps to captures that had all: a writer of 0.66 MB/s on a real kubelet, opened
// 1.6 s into its start second, against 1 MiB rotations). While such a stream follows a quiet run,
// the time it had moves on (from), so that a stream reset and reopened is not late.
//
// What stays unseen: a run that fills a rotation file in less than timelyOpen, and whose first
// file is rotated while that stream's request is on its way; a burst rotated away whole before a
// quiet start; lines a lagging stream had not delivered when it broke. Only the node agent
// (pkg/agent) sees those. Times of the node and the archiver compare as far as the node's stamps
// show its clock ahead or behind (see nodeTime, from): a clock seconds ahead of what an old first
// line shows, or seconds behind before any line arrived, can hide a rotation.
func (c *capture) judgeStart(ctx context.Context) error {
	if !c.startOpen || c.first.IsZero() {
		return nil
	}
	c.startOpen = false
	if !c.unproven() {
		return nil
	}
	c.unfollowed = false // this gap covers what its check would record
	from, w := c.from(), c.window()
	detail := fmt.Sprintf("the first line read was written %s after %s, before its stream opened; at the %.0f bytes/s the node's file shows at its peak, twice that could have filled a rotated file (%d bytes) before it",
		w.Round(time.Millisecond), from.UTC().Format(time.RFC3339Nano), c.peak, c.cfg.NodeLogMaxSize)
	if c.late {
		detail = fmt.Sprintf("the capture's stream was answered late for the run's start; %s after %s came its first line or the answer; at the %.0f bytes/s the lines read show at their peak, twice that could have filled a rotated file (%d bytes) before its first line",
			w.Round(time.Millisecond), from.UTC().Format(time.RFC3339Nano), c.peak, c.cfg.NodeLogMaxSize)
	}
	g := record.Gap{PodUID: c.ref.PodUID, Container: c.ref.Container, Run: c.ref.Run, Before: c.first, Reason: record.GapUnknownStart, Detail: detail}
	if err := c.recs.PutGap(ctx, g); err != nil {
		return fmt.Errorf("record gap in the log of %s: %w", c.ref, err)
	}
	return nil
}

// unproven reports whether, by the start rule (judgeStart), the run could have written a rotation
// file before its first line read, at twice the peak rate measured so far.
func (c *capture) unproven() bool {
	w := c.window()
	if c.started.IsZero() || w <= 0 || c.backlog == 0 {
		return false
	}
	return 2*c.peak*w.Seconds() >= float64(c.cfg.NodeLogMaxSize)
}

// window is how long the run had, from when it may have begun writing unseen (from), to write what
// was rotated away before its first line read: up to that line or, if the node answered its
// stream before, up to the answer (on the node's clock): what the node rotated away it rotated
// before it opened the file.
func (c *capture) window() time.Duration {
	end := c.first
	if answered := c.nodeTime(c.answered); answered.Before(end) {
		end = answered
	}
	return end.Sub(c.from())
}

// observe takes what the status tells of the run: its start for the start rule, what binds the
// reads to it (bind.go), and its finish. That is known to the second (the API keeps whole
// seconds), and the runtime stamps the output left in the container's pipe as it copies it, a
// little after the exit: the run's lines are stamped before the end of the second after.
func (c *capture) observe(ctx context.Context, end End) (End, error) {
	if !end.StartedAt.IsZero() {
		c.started = end.StartedAt
	}
	if !end.FinishedAt.IsZero() {
		c.ends = end.FinishedAt.Truncate(time.Second).Add(2 * time.Second)
	}
	return c.judge(ctx, end)
}

// past reports whether l is stamped after the run's lines end (ends): not the run's, whatever
// read gave it. The first such line records a GapOtherRun gap, once.
func (c *capture) past(ctx context.Context, l line) (bool, error) {
	if c.ends.IsZero() || l.ts.Before(c.ends) {
		return false, nil
	}
	if c.bind.gapped {
		return true, nil
	}
	c.bind.gapped = true
	return true, c.gap(ctx, time.Time{}, record.GapOtherRun,
		fmt.Sprintf("a read was served lines stamped %s, after the run finished (%s): another run's; they were not stored",
			l.ts.UTC().Format(time.RFC3339Nano), c.ends.Add(-2*time.Second).UTC().Format(time.RFC3339)))
}

// took records a new line in the position and among the lines seen.
func (c *capture) took(l line) {
	c.seen.add(fingerprintOf(l.ts, l.data))
	p := &c.segPos
	switch {
	case l.ts.After(p.max):
		p.max, p.maxLines = l.ts, 1
	case l.ts.Equal(p.max):
		p.maxLines++
	}
	p.last, p.partial = l.ts, 0
}

// classify decides, at a line's first piece, whether the line is stored: not if the stream
// delivers it again (a reopened stream before the last line captured, or a replay of the node's
// reader). When the line is the last one captured and only part of it is held, it is stored from
// where it was cut (skip).
func (c *capture) classify(ctx context.Context, l line) (bool, error) {
	if c.resuming {
		return c.resumed(ctx, l)
	}
	if c.atCut {
		c.atCut = false
		return c.caughtUp(), nil // the line the position is in: stored from where it was cut
	}
	if c.noReplay {
		return true, nil
	}
	if c.replayAt >= 0 {
		// A replay goes on while it delivers the lines captured, in order.
		if c.replayAt < c.seen.len() && c.seen.at(c.replayAt).matches(l) {
			return c.again(c.replayAt), nil
		}
		c.replayAt = -1
	}
	if !l.ts.After(c.segPos.max) && l.ts.Before(c.segPos.last) {
		// The node's reader replays the current file from its start when it takes a stale event
		// for a rotation: a line captured already, by its fingerprint, starts a replay. A line
		// merely stamped earlier is new. A replay starts a step back in time from the line the
		// stream gave last; a line stamped alike is the next of a run of lines stamped alike (CRI-O
		// stamps every line of one read alike) and new, even if it reads as one captured.
		if j := c.seen.find(l, 0); j >= 0 {
			return c.again(j), nil
		}
		if pushed := c.seen.pushedMax; c.seen.len() > 0 && (l.ts.Before(c.seen.evictedMax) || !pushed.IsZero() && !l.ts.After(pushed)) {
			// Older than every line still held: a replay from further back than they reach. (A
			// line stamped earlier that is new comes microseconds, not thousands of lines, late.
			// One at the last durable timestamp of a restarted capture may be new: several lines
			// share a timestamp.)
			return false, nil
		}
	}
	return true, nil
}

// again takes line j of seen delivered again: the stream goes on from j+1. When j is the last line
// captured, the stream has caught up; that line is stored from where it was cut if it is only
// partly held.
func (c *capture) again(j int) bool {
	c.replayAt = j + 1
	if j < c.seen.len()-1 {
		return false
	}
	return c.caughtUp()
}

// caughtUp ends the replay at the last line captured, which the stream delivered again.
func (c *capture) caughtUp() bool {
	c.resuming, c.replayAt = false, -1
	c.skip = c.segPos.partial
	return c.skip > 0
}

// resumed classifies a line of a stream opened from the position, before it passed the last line
// captured.
func (c *capture) resumed(ctx context.Context, l line) (bool, error) {
	if j := c.seen.find(l, c.cursor); j >= 0 {
		c.cursor = j + 1
		return c.again(j), nil
	}
	p := c.segPos
	switch {
	case c.seen.len() > 0 && !l.ts.After(c.seen.evictedMax):
		return false, nil // captured before the lines held, as old as one of those no longer held
	case c.seen.len() == 0 && !l.ts.After(p.max):
		// Only the position tells (the capture restarted): the lines before the last line at max
		// are counted, then those to the last line captured skipped.
		if !c.fbPastMax {
			if l.ts.Equal(p.max) {
				if c.fbCount++; c.fbCount >= p.maxLines {
					c.fbPastMax = true
					if p.last.Equal(p.max) {
						return c.caughtUp(), nil
					}
				}
			}
			return false, nil
		}
		if l.ts.Equal(p.last) {
			return c.caughtUp(), nil
		}
		if !l.ts.Equal(p.max) {
			return false, nil
		}
	}
	// The stream went past the last line captured without it: the node's file no longer holds it.
	c.resuming, c.replayAt = false, -1
	detail := "the log file was rotated before the rest of it was read"
	if p.partial > 0 {
		detail = "the log file was rotated before the rest of it was read (the last line captured was cut)"
	}
	return true, c.gap(ctx, l.ts, record.GapRotated, detail)
}

// maybeRotated records, for a run never followed, a gap before its first line once the file read
// comes within a tenth of the node's rotation size: the node may have rotated older output away.
// The check is over (unfollowed is cleared) once that is recorded.
//
// With short, the capture memory (Config.Memory) cannot hold the run back any longer: the gap is
// recorded without knowing, so that the segment can be stored.
func (c *capture) maybeRotated(ctx context.Context, short bool) error {
	detail := fmt.Sprintf("read only after it ended (never followed); its current file held %d bytes or more, close to the node's rotation size of %d: older files may have been rotated away",
		c.fileBytes, c.cfg.NodeLogMaxSize)
	if short {
		detail = fmt.Sprintf("read only after it ended (never followed); the archiver's capture memory was short before its current file (%d bytes read) could be told whole or not: older files may have been rotated away",
			c.fileBytes)
	}
	if short || c.fileBytes >= c.cfg.NodeLogMaxSize-c.cfg.NodeLogMaxSize/10 {
		g := record.Gap{PodUID: c.ref.PodUID, Container: c.ref.Container, Run: c.ref.Run, Before: c.firstTime, Reason: record.GapMaybeRotated,
			Detail: detail}
		if err := c.recs.PutGap(ctx, g); err != nil {
			return fmt.Errorf("record gap in the log of %s: %w", c.ref, err)
		}
		c.unfollowed, c.startOpen = false, false // one gap before the first line
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
	zw.Reset(segmentWriter{c})
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
	g := record.Gap{PodUID: c.ref.PodUID, Container: c.ref.Container, Run: c.ref.Run, After: c.segPos.max, Before: before, Reason: reason, Detail: detail}
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
	if err := c.judgeStart(ctx); err != nil {
		return err
	}
	if err := c.compress(false); err != nil {
		return err
	}
	key := c.segKey(c.seq)
	stored := int64(c.buf.Len())
	if err := c.store.Put(ctx, key, bytes.NewReader(c.buf.Bytes()), objstore.PutOptions{ContentType: "application/gzip"}); err != nil {
		return fmt.Errorf("store segment %d of the log of %s: %w", c.seq, c.ref, err)
	}
	killPoint("segment-stored")
	state, err := encodeState(c.segHash, c.segPos)
	if err != nil {
		return err
	}
	s := record.Segment{PodUID: c.ref.PodUID, Container: c.ref.Container, Run: c.ref.Run, Seq: c.seq, ObjectKey: key,
		StoredBytes: stored, Bytes: c.segBytes, TotalBytes: c.total + c.segBytes, LastTime: c.segPos.max, LastTimeLines: c.segPos.maxLines, HashState: state,
		Streams: c.segStreams.bytes()}
	if err := c.recs.PutSegment(ctx, s); err != nil {
		return fmt.Errorf("record segment %d of the log of %s: %w", c.seq, c.ref, err)
	}
	killPoint("segment-recorded")
	c.seq, c.total, c.pos, c.hash = c.seq+1, s.TotalBytes, c.segPos, c.segHash
	c.reset()
	return nil
}

// readLines parses a timestamped log stream into pieces of lines of at most pieceSize bytes,
// sending each on out, so memory holds one piece at a time whatever the lines' length. A stream
// opened from a position (resumed) may start inside a line: the kubelet's reader filters each
// record by sinceTime and prefixes only a line's first record, so the later records of a line
// split across the second are sent without timestamp. That lead, before the first timestamp, is
// part of a line captured already and skipped; a stream that holds nothing else is an error (the
// node's reader writes its errors into the stream). The kubelet's reader decides whether to
// prefix a record by the record before it, written or filtered, so such a rest also follows a
// line stamped after sinceTime when the line it ends was stamped before it (out of order): it is
// skipped too when a stamped line follows it; at the end of the stream it is taken for the node's
// reader's error, as a lead alone is.
func readLines(ctx context.Context, r io.Reader, out chan<- line, resumed bool) error {
	cr := &CountingReader{R: r}
	br := bufio.NewReaderSize(cr, readBuffer)
	if resumed {
		lead, err := skipLead(br)
		if err != nil {
			return err
		}
		if _, err := br.Peek(1); err == io.EOF && lead != "" {
			return noTimestamp(lead)
		}
	}
	for stamped := false; ; stamped = true {
		// Past the first line, a resumed stream may hold such a rest of a line anywhere: a line
		// stamped before sinceTime, out of order, between lines after it. A stream with no
		// timestamp at all is still an error: the first line without one after the lead is.
		for resumed && stamped {
			lead, err := skipLead(br)
			if err != nil {
				return err
			}
			if lead == "" {
				break
			}
			if _, err := br.Peek(1); err == io.EOF {
				return noTimestamp(lead) // the last words of the stream: the node's reader failed
			}
		}
		tsb, err := br.ReadSlice(' ')
		if err == io.EOF && len(tsb) == 0 {
			return nil
		}
		var t time.Time
		if err == nil {
			t, err = time.Parse(time.RFC3339Nano, string(tsb[:len(tsb)-1]))
		}
		if err != nil {
			rest, _ := br.Peek(min(br.Buffered(), 200))
			text, _, _ := strings.Cut(string(tsb)+string(rest), "\n")
			return noTimestamp(text)
		}
		fileBytes := len(tsb) + len("stdout F ")
		for start := true; ; start = false {
			off := cr.N - int64(br.Buffered())
			data, err := readPiece(br)
			l := line{ts: t, data: data, start: start, off: off, fileBytes: fileBytes + len(data)}
			fileBytes = 0
			switch err {
			case nil:
				l.end = true
			case bufio.ErrBufferFull:
			case io.EOF:
				l.end, l.partial = true, true
			default:
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
			if l.end {
				break
			}
		}
	}
}

// readBuffer is the stream reader's buffer: what a followed stream holds while it waits, so kept
// small (a thousand followed containers hold a thousand); pieces are put together from it.
const readBuffer = 4 << 10

// readPiece reads the next piece of a line, a copy: up to its newline, or pieceSize bytes
// (bufio.ErrBufferFull, the line goes on), or the end of the stream. pieceSize is a multiple of
// the reader's buffer, which returns it whole when full.
func readPiece(br *bufio.Reader) ([]byte, error) {
	data, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return bytes.Clone(data), err
	}
	// A line longer than the buffer: its piece doubles up to pieceSize (at most four
	// allocations, 120 KiB, for a piece of a long line; twice its size for a line of a few KiB),
	// where append's growth took eight and a quarter MiB.
	piece := append(make([]byte, 0, 2*len(data)), data...)
	for err == bufio.ErrBufferFull && len(piece) < pieceSize {
		data, err = br.ReadSlice('\n')
		if n := len(piece) + len(data); n > cap(piece) {
			grown := make([]byte, len(piece), max(min(2*cap(piece), pieceSize), n))
			copy(grown, piece)
			piece = grown
		}
		piece = append(piece, data...)
	}
	return piece, err
}

// tsMax is the longest timestamp pods/log writes (RFC 3339 with nanoseconds and a zone offset).
const tsMax = len("2006-01-02T15:04:05.999999999-07:00")

// skipLead skips the start of a stream up to its first newline unless it starts with a timestamp
// and a space, and returns the start of what it skipped (empty: nothing).
func skipLead(br *bufio.Reader) (string, error) {
	for n := 1; ; n = br.Buffered() + 1 {
		head, err := br.Peek(min(n, tsMax+1))
		if len(head) == 0 {
			return "", nil // an empty stream
		}
		sp, nl := bytes.IndexByte(head, ' '), bytes.IndexByte(head, '\n')
		switch {
		case sp >= 0 && (nl < 0 || sp < nl):
			if _, perr := time.Parse(time.RFC3339Nano, string(head[:sp])); perr == nil {
				return "", nil
			}
		case nl < 0 && len(head) <= tsMax && err == nil:
			continue // too short to tell yet
		}
		more, _ := br.Peek(min(br.Buffered(), 200))
		text, _, _ := strings.Cut(string(more), "\n")
		return text, skipLine(br)
	}
}

// skipLine reads past the next newline, or to the end of the stream.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		switch err {
		case nil, io.EOF:
			return nil
		case bufio.ErrBufferFull:
		default:
			return err
		}
	}
}

func noTimestamp(text string) error {
	return fmt.Errorf("log line without timestamp (an error of the node's log reader, or timestamps=true not asked): %q", text)
}

// Assembled describes a run's log once assembled into one object.
type Assembled struct {
	Key                string
	Bytes, StoredBytes int64
	// SHA256 is the lower-case hex sha256 of the log's (uncompressed) bytes.
	SHA256 string
	// StoredSHA256, when set, is the lower-case hex sha256 of the stored object, checked by the
	// store as it received it (objstore.PutOptions.Checksum): set for a log written whole from
	// memory by this pass, empty for one composed from segments (no store checks the composed
	// whole against a hash given in advance) or found locked (see putWhole). Record it only
	// with the row that records the log stored (Stored).
	StoredSHA256 string
}

// Stored returns row recording the log as stored in the object a describes.
func (a Assembled) Stored(row record.LogObject) record.LogObject {
	row.State, row.ObjectKey, row.Bytes, row.StoredBytes, row.SHA256, row.StoredSHA256 = record.LogStored, a.Key, a.Bytes, a.StoredBytes, a.SHA256, a.StoredSHA256
	return row
}

// Assemble composes a run's recorded segments (recs.Segments) into one object under key (an
// empty gzip member when the run wrote nothing, written whole as putWhole does), locked until
// retainUntil (zero: unlocked), and returns its size and sha256. It does not delete the segments:
// call Forget once the result is recorded.
//
// A composed log carries no StoredSHA256: S3 composes by multipart copy, whose object has no
// sha256 of the whole for the service to check, and neither S3 nor GCS is given one in advance,
// so the seal reads it back (docs/design/0009).
func Assemble(ctx context.Context, store objstore.Store, ref Ref, key string, segs []record.Segment, retainUntil time.Time) (Assembled, error) {
	opts := objstore.PutOptions{ContentType: archive.LogContentType, ContentEncoding: "gzip", RetainUntil: retainUntil}
	a := Assembled{Key: key}
	h := sha256.New()
	if len(segs) == 0 {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_ = zw.Close()
		var err error
		if a, err = putWhole(ctx, store, ref, key, b.Bytes(), emptySHA256, retainUntil); err != nil {
			return Assembled{}, fmt.Errorf("store the empty log of %s: %w", ref, err)
		}
	} else {
		keys := make([]string, len(segs))
		for i, s := range segs {
			if s.Seq != int32(i) {
				return Assembled{}, fmt.Errorf("assemble the log of %s: segment %d is missing", ref, i)
			}
			keys[i] = s.ObjectKey
			a.StoredBytes += s.StoredBytes
		}
		last := segs[len(segs)-1]
		var p position
		if err := decodeState(last.HashState, h, &p); err != nil {
			return Assembled{}, fmt.Errorf("assemble the log of %s: segment %d: %w", ref, last.Seq, err)
		}
		a.Bytes = last.TotalBytes
		// A final log is written once, as putWhole's are: an object under the key was composed by
		// an earlier pass that stopped before recording it (the same log: it stands, and is not
		// written again, which on a versioned bucket would leave a second version), or holds
		// another log (a *ConflictError: it is left as it is). Compose takes no condition here
		// (objstore's S3 compose does not send one), so this looks first: only captures of one run
		// write its key, and they are one at a time.
		switch _, err := store.Stat(ctx, key); {
		case err == nil:
			if a.StoredBytes, err = sameLog(ctx, store, ref, key, hex.EncodeToString(cloneHash(h).Sum(nil))); err != nil {
				return Assembled{}, fmt.Errorf("assemble the log of %s: %w", ref, err)
			}
		case !errors.Is(err, objstore.ErrNotFound):
			return Assembled{}, fmt.Errorf("assemble the log of %s: look for %s: %w", ref, key, err)
		default:
			if err := store.Compose(ctx, key, keys, opts); err != nil {
				return Assembled{}, fmt.Errorf("assemble the log of %s: %w", ref, err)
			}
		}
		if err := putStreams(ctx, store, ref, key, segs, retainUntil); err != nil {
			return Assembled{}, err
		}
	}
	a.SHA256 = hex.EncodeToString(h.Sum(nil))
	return a, nil
}

// emptySHA256 is the sha256 of an empty log.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// lockedElse is err, or nil if err is objstore.ErrLocked: a locked stream index under its key was
// written by an earlier pass from the same segments (they are deleted only once the log is
// recorded), so it holds the same bytes, and GCS refuses to replace it (putStreams).
func lockedElse(err error) error {
	if errors.Is(err, objstore.ErrLocked) {
		return nil
	}
	return err
}

// storedLocked reports whether a locked object (retainUntil set) of size bytes is under key
// already: an earlier pass wrote it from the same segments (see lockedElse) and failed or stopped
// before recording the log. Written again, it would be a second version on a versioned S3 bucket,
// which Object Lock keeps: one HEAD, for the locked stream indexes of logs assembled from segments.
func storedLocked(ctx context.Context, store objstore.Store, key string, size int64, retainUntil time.Time) (bool, error) {
	if retainUntil.IsZero() {
		return false, nil
	}
	info, err := store.Stat(ctx, key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look for %s: %w", key, err)
	}
	return info.Size == size, nil
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

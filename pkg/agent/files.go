// Package agent is the node agent (issue 25): it captures container logs from the CRI log files on
// its node, held open by descriptor from the moment they appear until their bytes are durable, so
// that neither the kubelet's rotation nor its container GC nor load can take a byte. It runs the
// archiver's own capture loop (capture.Capture) over a FileSource, which serves a run's files as
// pods/log with timestamps=true would, but never skips a rotated file and tells each byte's stream.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/record"
)

// RunKey names a container run on the node: its pod's UID, container and restart count, as the
// file's path does.
type RunKey struct {
	PodUID, Container string
	Run               int32
}

func (k RunKey) String() string {
	return fmt.Sprintf("pod %s container %s run %d", k.PodUID, k.Container, k.Run)
}

// logName matches a run's log file names: <run>.log, rotated <run>.log.<time>, compressed .gz.
var logName = regexp.MustCompile(`^(\d+)\.log(?:\.(\d{8}-\d{6}))?(\.gz)?$`)

// rotationTime is the format of the kubelet's rotated file suffix.
const rotationTime = "20060102-150405"

// heldFile is one log file the agent holds open.
type heldFile struct {
	f    *os.File // nil once closed or let go
	ino  uint64
	name string // last name it was seen under
	gz   bool
	// order is the rotation time of a rotated file, MaxInt64 for the current one (it tells a
	// compressed copy of a file held); seq is the order files were taken in: their write order.
	order, seq int64
	// size as last seen, and whether the file is unlinked (it then takes disk only because held).
	size    int64
	deleted bool
	// lastTS is the greatest timestamp read from the file; drained: a reader read it to its end
	// after a later file had bytes (nothing more will come).
	lastTS  time.Time
	drained bool
	// letGo: the file was closed before its bytes were durable (held-bytes limit).
	letGo bool
	// head is the start of a closed file: once closed, its inode may be reused by a new file.
	head string
	// id and idHead tell the file again after a restart (identity; see position.go).
	id     fileID
	idHead []byte
	// copy is the compressed copy it was let go for (its bytes are all there), orig the file a
	// copy stands for: a reader goes on in the copy where it was in the file.
	copy, orig *heldFile
	// readOff is how far a reader has read it (atomic: the reader updates it, bound reads it).
	readOff atomic.Int64
}

// runFiles are the files of one container run, in write order.
type runFiles struct {
	dir   string
	files []*heldFile
	// durable is the greatest timestamp of the run that is durable (its capture's position).
	durable time.Time
	// changed is closed (and replaced) whenever a file of the run appears or grows.
	changed chan struct{}
	// pos is where the run's capture resumes in its files, from its last segment (nil: unknown),
	// unless reader, the run's last reader, took lines since: then its position (reader.position).
	pos    *filePos
	reader *reader
	// goneSince is when a file of the run was first seen held only by the agent (deleted from the
	// disk), or every file gone, while the agent does not own the run (zero: not so).
	goneSince time.Time
}

func (r *runFiles) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// FileSource watches a node's pod logs directory and holds every run's log files open. It is a
// capture.Source (Open).
type FileSource struct {
	dir string
	log logr.Logger
	// MaxHeld bounds the bytes of held files that are deleted from the disk (0: no bound); past it,
	// the oldest is let go and OnLetGo told.
	maxHeld int64
	onLetGo func(RunKey, LetGo)
	// onGap is told of a gap the source found (a file truncated in place); nil: none recorded.
	onGap func(RunKey, record.Gap)

	mu      sync.Mutex
	runs    map[RunKey]*runFiles
	seq     int64
	held    int64
	watcher *fsnotify.Watcher
	watched map[string]bool
	// owned are the runs the agent owned at its last poll (forgetUnowned).
	owned map[RunKey]bool
}

// LetGo describes a file let go before its bytes were durable.
type LetGo struct {
	Name string
	// After is the run's durable position then, Before the first timestamp of the next file held
	// (zero: none).
	After, Before time.Time
	// Size is the file's size, Unread what no reader had read of it (what read is in a capture's
	// hands, lost only if that capture must read it again).
	Size, Unread int64
}

// NewFileSource starts watching dir (the kubelet's podLogsDir) and opens every log file in it.
// maxHeld bounds the bytes held of deleted files (0: no bound); onLetGo is told of each file let
// go past it (it records the gap). Run must be running for it to follow changes.
func NewFileSource(dir string, maxHeld int64, onLetGo func(RunKey, LetGo), log logr.Logger) (*FileSource, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch pod logs: %w", err)
	}
	s := &FileSource{dir: dir, log: log, maxHeld: maxHeld, onLetGo: onLetGo, runs: map[RunKey]*runFiles{}, watcher: w, watched: map[string]bool{}}
	if err := s.scanAll(); err != nil {
		_ = w.Close()
		return nil, err
	}
	return s, nil
}

// Run follows the directory until ctx ends, then closes every file.
func (s *FileSource) Run(ctx context.Context) error {
	defer s.close()
	// The events are the fast path; a rescan each second catches what they miss (an overflowed
	// queue, a directory that appeared before it was watched).
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-s.watcher.Events:
			if !ok {
				return errors.New("watch pod logs: watcher closed")
			}
			s.event(ev)
		case err := <-s.watcher.Errors:
			s.log.Error(err, "Watching pod logs failed; rescanning")
			_ = s.scanAll()
		case <-tick.C:
			if err := s.scanAll(); err != nil {
				s.log.Error(err, "Scanning pod logs failed")
			}
			s.bound()
		}
	}
}

func (s *FileSource) close() {
	_ = s.watcher.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runs {
		for _, f := range r.files {
			f.close()
		}
	}
}

func (f *heldFile) close() {
	if f.f != nil {
		f.identity() // a position in it stays encodable
		f.head = readHead(f.f)
		_ = f.f.Close()
		f.f = nil
	}
}

// event handles one inotify event: a new pod or container directory is watched and scanned, a new
// or written log file opened or its run woken.
func (s *FileSource) event(ev fsnotify.Event) {
	path := ev.Name
	rel, err := filepath.Rel(s.dir, path)
	if err != nil {
		return
	}
	switch depth := strings.Count(rel, string(filepath.Separator)); {
	case depth < 2 && ev.Has(fsnotify.Create):
		s.scanDir(path, depth+1)
	case depth == 2:
		if ev.Has(fsnotify.Write) {
			s.wake(filepath.Dir(path))
			return
		}
		s.scanContainer(filepath.Dir(path))
	}
}

// scanAll watches and scans the whole tree.
func (s *FileSource) scanAll() error {
	if err := s.watch(s.dir); err != nil {
		return err
	}
	s.scanDir(s.dir, 0)
	return nil
}

// scanDir scans a directory at depth (0: the pod logs dir, 1: a pod's, 2: a container's).
func (s *FileSource) scanDir(dir string, depth int) {
	if depth > 0 && !realDir(dir) {
		return
	}
	if depth == 2 {
		s.scanContainer(dir)
		return
	}
	if err := s.watch(dir); err != nil {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			s.scanDir(filepath.Join(dir, e.Name()), depth+1)
		}
	}
}

func (s *FileSource) watch(dir string) error {
	s.mu.Lock()
	done := s.watched[dir]
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.watcher.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	s.mu.Lock()
	s.watched[dir] = true
	s.mu.Unlock()
	return nil
}

// podDir parses "<namespace>_<pod>_<uid>".
func podUIDOf(podDir string) (string, bool) {
	i := strings.LastIndexByte(podDir, '_')
	if i < 0 || i == len(podDir)-1 {
		return "", false
	}
	return podDir[i+1:], true
}

// scanContainer opens the log files of a container directory that are not held yet, and updates
// the order and state of those held.
func (s *FileSource) scanContainer(dir string) {
	uid, ok := podUIDOf(filepath.Base(filepath.Dir(dir)))
	if !ok {
		return
	}
	container := filepath.Base(dir)
	if !realDir(dir) || !realDir(filepath.Dir(dir)) {
		return
	}
	if err := s.watch(dir); err != nil && !os.IsNotExist(errors.Unwrap(err)) {
		s.log.V(1).Info("Not watching a container log directory", "dir", dir, "error", err.Error())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	// In write order (rotated files by their rotation time, then the current one), the
	// uncompressed name first: a file being compressed exists under both names for a moment, and
	// the uncompressed one is the one to hold. Files are held in the order first taken, which is
	// the order they appear in: their write order.
	type found struct {
		k     RunKey
		name  string
		order int64
		gz    bool
	}
	var fs []found
	for _, e := range ents {
		m := logName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		run, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil {
			continue
		}
		order := int64(math.MaxInt64)
		if m[2] != "" {
			t, err := time.Parse(rotationTime, m[2])
			if err != nil {
				continue
			}
			order = t.UnixNano()
		}
		fs = append(fs, found{RunKey{PodUID: uid, Container: container, Run: int32(run)}, e.Name(), order, m[3] != ""})
	}
	slices.SortFunc(fs, func(a, b found) int {
		if c := cmpInt(int64(a.k.Run), int64(b.k.Run)); c != 0 {
			return c
		}
		if c := cmpInt(a.order, b.order); c != 0 {
			return c
		}
		return strings.Compare(boolKey(a.gz), boolKey(b.gz))
	})
	for _, f := range fs {
		s.take(f.k, dir, f.name, f.order, f.gz)
	}
	s.wake(dir)
}

func boolKey(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// take holds the file dir/name of run k, unless it holds it already (then it updates its order).
// Only a regular file is taken: a symlink (it would serve another pod's log, or any file the
// agent can read, as this run's) or a special file (a FIFO would block the agent) is not.
func (s *FileSource) take(k RunKey, dir, name string, order int64, gz bool) {
	path := filepath.Join(dir, name)
	st, err := os.Lstat(path)
	if err != nil {
		return
	}
	if !st.Mode().IsRegular() {
		s.log.V(1).Info("Not a regular file; not taken", "file", path, "mode", st.Mode().String())
		return
	}
	ino := inode(st)
	s.mu.Lock()
	r := s.run(k, dir)
	for _, f := range r.files {
		if f.ino == ino && f.gz == gz && (f.f != nil || f.head == headOf(path)) {
			f.name, f.size = name, st.Size()
			if order != math.MaxInt64 {
				f.order = order
			}
			s.mu.Unlock()
			return
		}
		if gz && !f.gz && f.order == order {
			s.mu.Unlock()
			return // the compressed copy of a file held
		}
	}
	s.mu.Unlock()
	fh, err := openRegular(path)
	if err != nil {
		return
	}
	st2, err := fh.Stat()
	if err != nil || inode(st2) != ino {
		_ = fh.Close() // replaced in between: the next scan takes the new one
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	r.files = append(r.files, &heldFile{f: fh, ino: ino, name: name, gz: gz, order: order, seq: s.seq, size: st2.Size()})
	kind := "current"
	switch {
	case gz:
		kind = "compressed"
	case order != math.MaxInt64:
		kind = "rotated"
	}
	filesHeld.WithLabelValues(kind).Inc()
	r.signal()
	s.log.V(1).Info("Holding log file", "run", k.String(), "file", name)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// headSize is how much of a file's start tells it from another file under a reused inode: its
// first record's timestamp and more.
const headSize = 64

func readHead(f *os.File) string {
	b := make([]byte, headSize)
	n, _ := f.ReadAt(b, 0)
	return string(b[:n])
}

func headOf(path string) string {
	f, err := openRegular(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return readHead(f)
}

// run returns the files of k, creating the entry (s.mu held).
func (s *FileSource) run(k RunKey, dir string) *runFiles {
	r := s.runs[k]
	if r == nil {
		r = &runFiles{changed: make(chan struct{})}
		s.runs[k] = r
	}
	if dir != "" {
		r.dir = dir
	}
	return r
}

// wake tells the readers of every run of a container directory that its files changed.
func (s *FileSource) wake(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runs {
		if r.dir == dir {
			r.signal()
		}
	}
}

// openRegular opens path for reading only if it is a regular file: no symlink followed, no
// special file (O_NONBLOCK: opening a FIFO does not wait for a writer).
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open log file: %w", err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("open log file %s: not a regular file", path)
	}
	return f, nil
}

// realDir reports whether dir is a directory and not a symlink to one: the agent follows no
// symlink below the pod logs directory (it could lead anywhere the agent can read).
func realDir(dir string) bool {
	st, err := os.Lstat(dir)
	return err == nil && st.IsDir()
}

func inode(st os.FileInfo) uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Ino
	}
	return 0
}

// Durable tells the source that the run's capture made its lines up to t durable: the files the
// capture cannot ask for again (every line stamped before the second before t, and a later file
// has begun) are closed.
func (s *FileSource) Durable(k RunKey, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[k]
	if r == nil || !t.After(r.durable) {
		return
	}
	r.durable = t
	for i, f := range r.files {
		if i == len(r.files)-1 || !r.stored(f) {
			break // in order: a later file is not released before an earlier one
		}
		f.close()
	}
}

// stored reports whether every byte of f is durable: it was drained (or let go: its rest is a
// gap, nothing more of it will be read) and its last line is before what a resumed capture asks
// for again (s.mu held).
func (r *runFiles) stored(f *heldFile) bool {
	// A resumed capture asks from the second before its position (capture.open), whole seconds.
	since := r.durable.Add(-time.Second).Truncate(time.Second)
	return (f.drained || f.letGo) && f.lastTS.Before(since)
}

// Forget closes every file of the run: its capture is complete.
func (s *FileSource) Forget(k RunKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[k]; r != nil {
		for _, f := range r.files {
			f.close()
		}
		delete(s.runs, k)
	}
}

// forgetUnowned closes every file of a run not in owned once, for grace, a file of it has been
// held only by the agent (deleted from the disk) or every file gone: the archiver claims a run
// when it first captures it, so a run unclaimed that long is not the agent's (the API captures
// it), and its deleted files must not take the disk (the held bytes are the owned runs'). Its
// files still on the disk are taken again by the next scan, costing nothing held.
func (s *FileSource) forgetUnowned(owned map[RunKey]bool, grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owned = owned
	now := time.Now()
	for k, r := range s.runs {
		if owned[k] {
			r.goneSince = time.Time{}
			continue
		}
		pinned, gone := false, true
		for _, f := range r.files {
			f.refresh()
			pinned = pinned || (f.f != nil && f.deleted)
			gone = gone && (f.f == nil || f.deleted)
		}
		switch {
		case !pinned && !gone:
			r.goneSince = time.Time{}
		case r.goneSince.IsZero():
			r.goneSince = now
		case now.Sub(r.goneSince) > grace:
			for _, f := range r.files {
				if f.deleted {
					f.close() // the deleted ones first: they are what the disk holds for the agent
				}
			}
			for _, f := range r.files {
				f.close()
			}
			delete(s.runs, k)
		}
	}
}

// refresh updates the size of an open file and whether it is deleted from the disk (s.mu held).
func (f *heldFile) refresh() {
	if f.f == nil {
		return
	}
	if st, err := f.f.Stat(); err == nil {
		f.size = st.Size()
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			f.deleted = sys.Nlink == 0
		}
	}
}

// Runs lists the runs whose files the source holds or held.
func (s *FileSource) Runs() []RunKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RunKey, 0, len(s.runs))
	for k := range s.runs {
		out = append(out, k)
	}
	return out
}

// Held reports the bytes of deleted files held open.
func (s *FileSource) Held() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// bound measures the held bytes (the files held that are deleted from the disk) and, past the
// limit, lets go of the oldest until under it.
func (s *FileSource) bound() {
	type cand struct {
		k RunKey
		r *runFiles
		f *heldFile
	}
	s.mu.Lock()
	var held int64
	var cands []cand
	for k, r := range s.runs {
		for _, f := range r.files {
			if f.f == nil {
				continue
			}
			f.refresh()
			if f.deleted {
				held += f.size
				cands = append(cands, cand{k, r, f})
			}
		}
	}
	s.held = held
	heldBytes.Set(float64(held))
	if s.maxHeld <= 0 || held <= s.maxHeld {
		s.mu.Unlock()
		return
	}
	// The files of runs the agent does not own go first (the API captures those runs; holding them
	// only spares a later claim), then those the kubelet compressed (letting go loses nothing),
	// then the oldest.
	copies := map[*heldFile]string{}
	for _, c := range cands {
		if gz := c.r.dir + string(filepath.Separator) + c.f.name + ".gz"; !c.f.gz && regularFile(gz) {
			copies[c.f] = gz
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if oa, ob := s.owned[a.k], s.owned[b.k]; oa != ob {
			if ob {
				return -1
			}
			return 1
		}
		if ca, cb := copies[a.f] != "", copies[b.f] != ""; ca != cb {
			if ca {
				return -1
			}
			return 1
		}
		return cmpInt(a.f.seq, b.f.seq)
	})
	var gone []func()
	for _, c := range cands {
		if held <= s.maxHeld {
			break
		}
		if c.r.stored(c.f) || c.r.swapForCopy(c.f, copies[c.f]) {
			// Its bytes are durable (an earlier file kept it from being released), or all in its
			// compressed copy on the disk: closing it loses nothing, so it records no gap.
			c.f.close()
			held -= c.f.size
			s.held = held
			heldBytes.Set(float64(held))
			c.r.signal()
			continue
		}
		// Only what no reader has read is lost: what was read is in the capture's hands.
		lg := LetGo{Name: c.f.name, After: c.r.durable, Size: c.f.size, Unread: c.f.size - min(c.f.readOff.Load(), c.f.size)}
		if i := slices.Index(c.r.files, c.f); i+1 < len(c.r.files) {
			lg.Before = firstTime(c.r.files[i+1])
		}
		c.f.close()
		c.f.letGo = true
		held -= c.f.size
		s.held = held
		heldBytes.Set(float64(held))
		filesLetGo.Inc()
		c.r.signal()
		if s.onLetGo != nil {
			k := c.k
			gone = append(gone, func() { s.onLetGo(k, lg) })
		}
	}
	s.mu.Unlock()
	for _, g := range gone {
		g()
	}
}

// swapForCopy puts the compressed copy of f at path (none: "") in f's place among the run's files
// (s.mu held): readers go on in it where they were in f. False: no copy that can be opened.
func (r *runFiles) swapForCopy(f *heldFile, path string) bool {
	if path == "" {
		return false
	}
	fh, err := openRegular(path)
	if err != nil {
		return false
	}
	st, err := fh.Stat()
	if err != nil {
		_ = fh.Close()
		return false
	}
	i := slices.Index(r.files, f)
	if i < 0 {
		_ = fh.Close()
		return false
	}
	cp := &heldFile{f: fh, ino: inode(st), name: filepath.Base(path), gz: true, order: f.order, seq: f.seq, size: st.Size(),
		drained: f.drained, lastTS: f.lastTS, orig: f}
	f.copy = cp
	r.files[i] = cp
	filesHeld.WithLabelValues("compressed").Inc()
	return true
}

// regularFile reports whether path is a regular file (no symlink followed).
func regularFile(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode().IsRegular()
}

// firstTime is the timestamp of a file's first record (zero: unknown).
func firstTime(f *heldFile) time.Time {
	if f.f == nil || f.gz {
		return time.Time{}
	}
	b := make([]byte, 64)
	n, _ := f.f.ReadAt(b, 0)
	ts, _, ok := strings.Cut(string(b[:n]), " ")
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Open serves the run's log as pods/log with timestamps=true would (see reader).
func (s *FileSource) Open(ctx context.Context, ref capture.Ref, opts capture.OpenOptions) (io.ReadCloser, error) {
	k := RunKey{PodUID: ref.PodUID, Container: ref.Container, Run: ref.Run}
	s.mu.Lock()
	r := s.runs[k]
	// An entry without files is a follow reader's wait for them (newReader makes it): the node
	// never held a file of the run, so a read to the end has nothing to say but that.
	none := r == nil || len(r.files) == 0
	s.mu.Unlock()
	if none && !opts.Follow {
		return nil, fmt.Errorf("open log of %s: no such file or directory: the node holds no file of it", ref)
	}
	return newReader(ctx, s, k, opts), nil
}

// Records wraps recs so that each segment it records tells the source what is durable (Durable):
// the capture's records, when the capture reads from this source.
func (s *FileSource) Records(recs capture.Records) capture.Records {
	return durableRecords{Records: recs, s: s}
}

type durableRecords struct {
	capture.Records
	s *FileSource
}

// PutSegment records the segment with the position in the run's files its last byte came from,
// and tells the source it is durable.
func (d durableRecords) PutSegment(ctx context.Context, seg record.Segment) error {
	k := RunKey{PodUID: seg.PodUID, Container: seg.Container, Run: seg.Run}
	seg.SourcePosition = d.s.position(k)
	if err := d.Records.PutSegment(ctx, seg); err != nil {
		return err
	}
	d.s.Durable(k, seg.LastTime)
	return nil
}

// Segments reads the run's segments, as a capture does to resume from the last: its position in
// the files is the one recorded with that segment.
func (d durableRecords) Segments(ctx context.Context, podUID, container string, run int32) ([]record.Segment, error) {
	segs, err := d.Records.Segments(ctx, podUID, container, run)
	if err != nil {
		return nil, err
	}
	var last []byte
	if n := len(segs); n > 0 {
		last = segs[n-1].SourcePosition
	}
	p, err := decodePosition(last)
	if err != nil {
		d.s.log.Error(err, "A segment's file position cannot be read; resuming by timestamp")
	}
	d.s.mu.Lock()
	r := d.s.run(RunKey{PodUID: podUID, Container: container, Run: run}, "")
	r.pos, r.reader = p, nil
	d.s.mu.Unlock()
	return segs, nil
}

// position is the encoded position of the run's capture in its files (nil: unknown).
func (s *FileSource) position(k RunKey) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[k]
	if r == nil {
		return nil
	}
	p := r.pos
	if r.reader != nil {
		if rp := r.reader.position(); rp != nil {
			p = rp
		}
	}
	if p == nil {
		return nil
	}
	if p.f != nil {
		id, _ := p.f.identity()
		if id.headLen == 0 {
			return nil // a file closed before it was ever read: no position in it to tell
		}
		p = &filePos{id: id, off: p.off, cut: p.cut}
	}
	return encodePosition(*p)
}

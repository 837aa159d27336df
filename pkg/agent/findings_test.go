package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"

	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/objstore"
)

// TestRunNeverSeenIsNotCompleteEmpty: a run whose files were gone before the agent saw any (it
// was down), not over yet at its first poll: the follow reader waits on an empty entry; once over,
// the read to the end must fail with a ReadError (the agent then records the "collected" gap,
// lost), never end empty as if the run had written nothing.
func TestRunNeverSeenIsNotCompleteEmpty(t *testing.T) {
	root := t.TempDir()
	s := startSource(t, root)
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := &memRecords{}
	cfg := capture.Config{SegmentBytes: 1000, SegmentAge: time.Hour, Poll: 10 * time.Millisecond, Retry: 20 * time.Millisecond}
	calls := 0
	over := func(context.Context) (capture.End, error) { calls++; return capture.End{Over: calls > 3}, nil }
	_, err = capture.Capture(t.Context(), cfg, s, s.Records(recs), store, func(seq int32) string { return fmt.Sprint(seq) }, ref, over, nil)
	var unread *capture.ReadError
	if !errors.As(err, &unread) {
		t.Fatalf("capture of a run no file of which was ever held ended with %v, want a ReadError", err)
	}
}

// TestLetGoFileDoesNotBlockRelease: a file let go before the reader reached it counts as drained:
// the later files of the run are released once their bytes are durable, and are never let go
// later with a gap for bytes that are stored.
func TestLetGoFileDoesNotBlockRelease(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	a, b, cur := filepath.Join(dir, "0.log.20261125-010000"), filepath.Join(dir, "0.log.20261125-010010"), filepath.Join(dir, "0.log")
	c.line(t, a, "stdout", "in A")
	c.t0 = c.t0.Add(10 * time.Second)
	c.line(t, b, "stdout", "in B")
	c.t0 = c.t0.Add(10 * time.Second)
	c.line(t, cur, "stdout", "in C")
	var lets []LetGo
	s, err := NewFileSource(root, 1, func(_ RunKey, lg LetGo) { lets = append(lets, lg) }, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	k := RunKey{PodUID: "uid1", Container: "main"}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	s.bound() // A is let go: deleted, over the 1-byte limit
	rc, err := s.Open(context.Background(), ref, capture.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); err != nil {
		t.Fatal(err)
	}
	s.Durable(k, c.t0.Add(time.Hour)) // everything read is durable
	s.mu.Lock()
	bHeld := s.runs[k].files[1].f != nil
	s.mu.Unlock()
	if bHeld {
		t.Errorf("B, drained and durable, is still held after A was let go")
	}
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	s.bound()
	if len(lets) != 1 || lets[0].Name != filepath.Base(a) {
		t.Errorf("let go %+v, want only A", lets)
	}
}

// fakeDB is the agent's database in memory: the runs it owns (runsErr fails AgentRuns) and its
// records (gaps refused with db.ErrNotOwner until claimed).
type fakeDB struct {
	mu       sync.Mutex
	runs     []db.AgentRun
	runsErr  error
	beats    int
	released []db.RunKey
}

func (f *fakeDB) Heartbeat(context.Context, string, int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats++
	return nil
}

func (f *fakeDB) AgentRuns(context.Context, string) ([]db.AgentRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]db.AgentRun(nil), f.runs...), f.runsErr
}

func (f *fakeDB) CompleteRun(context.Context, db.RunKey) error { return nil }

func (f *fakeDB) ReleaseRun(_ context.Context, k db.RunKey, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, k)
	return nil
}

func (f *fakeDB) AgentRecords(string) db.AgentRecords { return db.AgentRecords{} }

// fencedRecords refuses gaps with db.ErrNotOwner (or err) until claimed.
type fencedRecords struct {
	memRecords
	claimed atomic.Bool
	err     error
}

func (f *fencedRecords) PutGap(ctx context.Context, g record.Gap) error {
	if f.err != nil {
		return f.err
	}
	if !f.claimed.Load() {
		return fmt.Errorf("put gap: %w", db.ErrNotOwner)
	}
	return f.memRecords.PutGap(ctx, g)
}

// newTestAgent makes an agent over root with fake records, as New does.
func newTestAgent(t *testing.T, root string, fdb *fakeDB, recs capture.Records) *Agent {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Node, cfg.PodLogsDir, cfg.MaxHeldBytes = "node1", root, 1
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: cfg, db: fdb, recs: recs, store: store, log: logr.Discard(), captures: map[db.RunKey]*ownedRun{}, notes: map[db.RunKey][]record.Gap{}, storeFails: map[db.RunKey]failures{}}
	src, err := NewFileSource(root, cfg.MaxHeldBytes, a.letGo, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	src.onGap = a.noteGap
	t.Cleanup(src.close)
	a.src = src
	return a
}

// TestLetGoGapKeptUntilClaimed: a file of a run the archiver has not claimed yet is let go: the
// gap's write is refused (not the agent's run yet), so it is kept in memory and recorded once the
// run is claimed, and a database failure is retried; it is never dropped silently.
func TestLetGoGapKeptUntilClaimed(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	rot := filepath.Join(dir, "0.log.20261125-010000")
	c.line(t, rot, "stdout", "rotated")
	c.rec("stdout", "current", false)
	c.flush(t, filepath.Join(dir, "0.log"), false)
	fdb := &fakeDB{}
	recs := &fencedRecords{err: errors.New("database down")}
	a := newTestAgent(t, root, fdb, recs)
	if err := os.Remove(rot); err != nil {
		t.Fatal(err)
	}
	a.src.bound() // let go while the database is down
	recs.err = nil
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	a.poll(ctx, &wg) // not claimed yet: refused, kept
	if n := len(recs.gaps); n != 0 {
		t.Fatalf("%d gaps recorded before the run is claimed", n)
	}
	recs.claimed.Store(true)
	fdb.mu.Lock()
	fdb.runs = []db.AgentRun{{RunClaim: db.RunClaim{RunKey: db.RunKey{PodUID: "uid1", Container: "main"}, Namespace: "ns", Pod: "pod"}}}
	fdb.mu.Unlock()
	a.poll(ctx, &wg)
	recs.mu.Lock()
	defer recs.mu.Unlock()
	if len(recs.gaps) != 1 || recs.gaps[0].Reason != record.GapAgentLetGo {
		t.Errorf("gaps %+v once the run is claimed, want the let-go gap", recs.gaps)
	}
}

// TestUnownedDeletedFileReleased: a run the agent does not own (any other pod on the node) whose
// rotated file the kubelet deleted while its current file lives on: after the grace the agent
// closes its files, so the held bytes are only those of runs it owns.
func TestUnownedDeletedFileReleased(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	cur := filepath.Join(dir, "0.log")
	c.rec("stdout", strings.Repeat("x", 100000), false)
	c.flush(t, cur, false)
	s, err := NewFileSource(root, 0, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	rot := filepath.Join(dir, "0.log.20261125-010000")
	if err := os.Rename(cur, rot); err != nil {
		t.Fatal(err)
	}
	c.line(t, cur, "stdout", "new")
	s.scanContainer(dir)
	if err := os.Remove(rot); err != nil {
		t.Fatal(err)
	}
	const grace = 20 * time.Millisecond
	s.forgetUnowned(map[RunKey]bool{}, grace) // the grace starts
	s.bound()
	if held := s.Held(); held == 0 {
		t.Fatal("the deleted file is not held before the grace ends")
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		s.forgetUnowned(map[RunKey]bool{}, grace)
		s.bound()
		held := s.Held()
		if held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unowned run's deleted file still held (%d bytes) long after the grace", held)
		}
		time.Sleep(grace)
	}
	s.scanContainer(dir) // the current file is taken again: it costs nothing held
	s.bound()
	if held := s.Held(); held != 0 {
		t.Errorf("held %d bytes after the rescan, want 0", held)
	}
}

// oneLineRun writes a run of one line under a new pod logs dir: its root, and the run as the
// agent owns it.
func oneLineRun(t *testing.T) (string, db.AgentRun) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	c.rec("stdout", "line", false)
	c.flush(t, filepath.Join(dir, "0.log"), false)
	k := db.RunKey{PodUID: "uid1", Container: "main"}
	return root, db.AgentRun{RunClaim: db.RunClaim{RunKey: k, Namespace: "ns", Pod: "pod", JobName: "job", JobUID: "ju1"}}
}

// TestTakenOverCaptureStopped: a run the archiver took over is no longer among the agent's runs:
// the next poll stops its capture and closes its files.
func TestTakenOverCaptureStopped(t *testing.T) {
	root, run := oneLineRun(t)
	k := run.RunKey
	fdb := &fakeDB{runs: []db.AgentRun{run}}
	a := newTestAgent(t, root, fdb, &fencedRecords{})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	a.poll(ctx, &wg)
	a.mu.Lock()
	running := a.captures[k] != nil
	a.mu.Unlock()
	if !running {
		t.Fatal("no capture started for the run owned")
	}
	fdb.mu.Lock()
	fdb.runs = nil // taken over
	fdb.mu.Unlock()
	a.poll(ctx, &wg)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a.mu.Lock()
		running = a.captures[k] != nil
		a.mu.Unlock()
		if !running && !slices.Contains(a.src.Runs(), RunKey(k)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture of the run taken over still running: %v, its files held: %v", running, slices.Contains(a.src.Runs(), RunKey(k)))
		}
	}
}

// failingRecords refuses every segment: the database (or the store behind it) is down.
type failingRecords struct{ fencedRecords }

func (f *failingRecords) PutSegment(context.Context, record.Segment) error {
	return errors.New("database down")
}

// TestNoHeartbeatWhileStoresFail: an agent whose every store fails (or whose reads of its runs
// fail) stops beating, so the archiver takes its runs over in 15 s, not at --log-deadline; it
// beats again once it can store.
func TestNoHeartbeatWhileStoresFail(t *testing.T) {
	root, run := oneLineRun(t)
	run.Over = true
	fdb := &fakeDB{runs: []db.AgentRun{run}}
	recs := &failingRecords{}
	recs.claimed.Store(true)
	a := newTestAgent(t, root, fdb, recs)
	a.cfg.StoreDownGrace = 0 // the grace is TestStoreDownWithinGraceKeepsHeartbeat's
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	beats := func() int {
		fdb.mu.Lock()
		defer fdb.mu.Unlock()
		return fdb.beats
	}
	a.heartbeat(ctx)
	if beats() != 1 {
		t.Fatal("no heartbeat while all is well")
	}
	a.poll(ctx, &wg)
	for deadline := time.Now().Add(15 * time.Second); a.canStore() == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent still says it can store after its stores failed for 15 s")
		}
	}
	a.heartbeat(ctx)
	if n := beats(); n != 1 {
		t.Errorf("heartbeat recorded while every store fails (%d beats)", n)
	}
	a.stored(run.RunKey, true)
	fdb.mu.Lock()
	fdb.runsErr = errors.New("database down")
	fdb.mu.Unlock()
	for range maxFails {
		a.poll(ctx, &wg)
	}
	a.heartbeat(ctx)
	if n := beats(); n != 1 {
		t.Errorf("heartbeat recorded while the agent cannot read its runs (%d beats)", n)
	}
	fdb.mu.Lock()
	fdb.runsErr = nil
	fdb.mu.Unlock()
	a.poll(ctx, &wg)
	a.heartbeat(ctx)
	if n := beats(); n != 2 {
		t.Errorf("%d beats once the agent can store again, want 2", n)
	}
}

// TestOnlyRegularFilesTaken: a symlink in a container directory (to another pod's log), a
// symlinked pod directory, and a FIFO are not taken: another pod's log is never served as this
// run's, and a FIFO does not block the agent.
func TestOnlyRegularFilesTaken(t *testing.T) {
	dir, root := logDir(t)
	other := filepath.Join(root, "victim_pod_uid2", "c")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &criLog{t0: logT0}
	c.rec("stdout", "victim secret", false)
	c.flush(t, filepath.Join(other, "0.log"), false)
	if err := os.Symlink(filepath.Join(other, "0.log"), filepath.Join(dir, "0.log")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "victim_pod_uid2"), filepath.Join(root, "ns_link_uid3")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "1.log"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSource(t, root)
	for _, k := range s.Runs() {
		if k.PodUID == "uid3" || (k.PodUID == "uid1" && k.Run == 1) {
			t.Errorf("%s is held: a symlinked directory or a FIFO was taken", k)
		}
	}
	rc, err := s.Open(t.Context(), ref, capture.OpenOptions{})
	if err == nil {
		b, _ := io.ReadAll(rc)
		if strings.Contains(string(b), "victim secret") {
			t.Errorf("symlink followed: another pod's log served as uid1's: %q", b)
		}
	}
}

// TestTruncatedFileReadAgain: the current file is truncated in place (copytruncate, an operator
// freeing disk) while followed: the reader notices its size below its position, records a gap
// (truncated on the node), and reads the file again from its start: what is written after is
// served.
func TestTruncatedFileReadAgain(t *testing.T) {
	testTruncated(t, "after truncate")
}

// TestTruncatedRegrownReadAgain: as TestTruncatedFileReadAgain, but the file grows past the
// reader's position again before the reader looks: its size does not tell; its first bytes do.
func TestTruncatedRegrownReadAgain(t *testing.T) {
	testTruncated(t, "after truncate "+strings.Repeat("regrown", 200))
}

func testTruncated(t *testing.T, after string) {
	dir, root := logDir(t)
	cur := filepath.Join(dir, "0.log")
	c := &criLog{t0: logT0}
	c.rec("stdout", strings.Repeat("old", 100), false)
	c.flush(t, cur, false)
	s := startSource(t, root)
	gaps := make(chan record.Gap, 4)
	s.mu.Lock()
	s.onGap = func(_ RunKey, g record.Gap) { gaps <- g }
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rc, err := s.Open(ctx, ref, capture.OpenOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		br := bufio.NewReader(rc)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()
	timeout := time.After(10 * time.Second)
	select {
	case l := <-lines:
		if !strings.Contains(l, "oldold") {
			t.Fatalf("first line %q", l)
		}
	case <-timeout:
		t.Fatal("first line not served")
	}
	if err := os.Truncate(cur, 0); err != nil {
		t.Fatal(err)
	}
	c.rec("stdout", after, false)
	c.flush(t, cur, false)
	for served := false; !served; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("reader ended")
			}
			served = strings.Contains(l, "after truncate")
		case <-timeout:
			t.Fatal("line written after the truncation never served")
		}
	}
	select {
	case g := <-gaps:
		if g.Reason != record.GapTruncatedOnNode {
			t.Errorf("gap %+v, want reason %q", g, record.GapTruncatedOnNode)
		}
	default:
		t.Error("no gap recorded for the truncation")
	}
}

// oneRunFailing refuses the segments of pod uid1 only: that run's store fails (its object key, a
// segment too large), not the node's.
type oneRunFailing struct{ fencedRecords }

func (f *oneRunFailing) PutSegment(ctx context.Context, s record.Segment) error {
	if s.PodUID == "uid1" {
		return errors.New("segment refused")
	}
	return f.fencedRecords.PutSegment(ctx, s)
}

// TestOneRunFailingKeepsHeartbeat: the stores of one run fail again and again while the agent's
// other run stores (and then waits for output): the failures are that run's, not the node's, so
// the agent goes on beating and its other runs stay its own. (The failures were counted for the
// node: three of one run in a row stopped the heartbeat, and the archiver took every run over.)
func TestOneRunFailingKeepsHeartbeat(t *testing.T) {
	root, bad := oneLineRun(t)
	dir := filepath.Join(root, "ns_pod2_uid2", "main")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &criLog{t0: logT0}
	c.rec("stdout", "line of the run that stores", false)
	c.flush(t, filepath.Join(dir, "0.log"), false)
	good := bad
	good.PodUID, good.Pod, good.JobUID = "uid2", "pod2", "ju2"
	fdb := &fakeDB{runs: []db.AgentRun{bad, good}}
	recs := &oneRunFailing{}
	recs.claimed.Store(true)
	a := newTestAgent(t, root, fdb, recs)
	a.cfg.Capture = capture.Config{SegmentBytes: 1, SegmentAge: 10 * time.Millisecond, Poll: 10 * time.Millisecond, Retry: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	a.poll(ctx, &wg)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a.mu.Lock()
		failed := a.failed(bad.RunKey)
		a.mu.Unlock()
		if failed >= maxFails {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run uid1 failed %d times in 20 s, want %d", failed, maxFails)
		}
	}
	if segs, _ := recs.Segments(ctx, "", "", 0); len(segs) == 0 {
		t.Fatal("the run that stores stored nothing")
	}
	if err := a.canStore(); err != nil {
		t.Errorf("one run's failures stop the node's heartbeat: %v", err)
	}
}

// TestLetGoFileWithCompressedCopy: a rotated file the kubelet compressed (the .gz on the disk, the
// file itself unlinked and held only by the agent) is past the held-bytes limit: none of its bytes
// is lost, so it is let go without a gap, and its bytes are read from the compressed copy.
func TestLetGoFileWithCompressedCopy(t *testing.T) {
	dir, root := logDir(t)
	c := &criLog{t0: logT0}
	for i := range 1000 { // past the reader's buffer: it reads on from the file after the swap
		c.rec("stdout", fmt.Sprintf("rotated %d %s", i, strings.Repeat("r", 100)), false)
	}
	rot := filepath.Join(dir, "0.log.20261125-010000")
	c.flush(t, rot, false)
	c.rec("stderr", "current", false)
	c.flush(t, filepath.Join(dir, "0.log"), false)
	var lets []LetGo
	s, err := NewFileSource(root, 1, func(_ RunKey, lg LetGo) { lets = append(lets, lg) }, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	// A reader has begun the file (and holds part of it in its buffer), another has not.
	begun, err := s.Open(t.Context(), ref, capture.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 100)
	if _, err := io.ReadFull(begun, first); err != nil {
		t.Fatal(err)
	}
	gzipFile(t, rot, rot+".gz")
	s.scanContainer(dir)
	s.bound()
	if len(lets) > 0 {
		t.Errorf("let go with a gap: %+v; its bytes are all in its compressed copy", lets)
	}
	rest, err := io.ReadAll(begun)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(first) + string(rest); got != c.served.String() {
		t.Errorf("the reader begun served %d bytes, want %d", len(got), c.served.Len())
	}
	rc, err := s.Open(t.Context(), ref, capture.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := readAll(t, rc); got != c.served.String() {
		t.Errorf("served %d bytes, want %d", len(got), c.served.Len())
	}
}

// TestStoreDownWithinGraceKeepsHeartbeat: every store of the agent fails, for less than its
// grace: it goes on beating (its runs stay its own, their files held until the store is back),
// and stops once the grace has passed.
func TestStoreDownWithinGraceKeepsHeartbeat(t *testing.T) {
	root, run := oneLineRun(t)
	fdb := &fakeDB{runs: []db.AgentRun{run}}
	recs := &failingRecords{}
	recs.claimed.Store(true)
	a := newTestAgent(t, root, fdb, recs)
	a.cfg.StoreDownGrace = time.Hour
	a.mu.Lock()
	a.captures[run.RunKey] = &ownedRun{}
	a.mu.Unlock()
	for range 2 * maxFails {
		a.stored(run.RunKey, false)
	}
	if err := a.canStore(); err != nil {
		t.Errorf("the store down for less than the grace stops the heartbeat: %v", err)
	}
	a.cfg.StoreDownGrace = 0
	if err := a.canStore(); err == nil {
		t.Error("the store down past the grace does not stop the heartbeat")
	}
}

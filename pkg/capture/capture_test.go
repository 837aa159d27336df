package capture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// fakeNode is a container log as a node keeps it, for branch tests (the real path, through the API
// server and KWOK's use of the kubelet's reader, is proven in test/e2e): timestamped lines in a
// current file, rotation that drops what came before, follow streams that a test can break.
type fakeNode struct {
	mu      sync.Mutex
	lines   []fakeLine // every line written
	current int        // index of the first line of the current file
	over    bool
	wake    chan struct{}
	breakCh chan struct{}
	replay  bool // open follow streams send the current file again from its start
	opens   int
}

type fakeLine struct {
	ts   time.Time
	data string
	// partial: a partial record (the runtime split a long line); the next record continues it.
	partial bool
}

func newFakeNode() *fakeNode {
	return &fakeNode{wake: make(chan struct{}), breakCh: make(chan struct{})}
}

func (n *fakeNode) write(ts time.Time, data string) { n.writeRecord(fakeLine{ts: ts, data: data}) }

func (n *fakeNode) writeRecord(l fakeLine) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lines = append(n.lines, l)
	close(n.wake)
	n.wake = make(chan struct{})
}

func (n *fakeNode) rotate() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.current = len(n.lines)
}

// breakStreams ends every open follow stream, as a connection reset does.
func (n *fakeNode) breakStreams() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.breakCh)
	n.breakCh = make(chan struct{})
}

// replayStreams has every open follow stream send the current file again from its start, as the
// kubelet's reader does when it takes a stale event for a rotation.
func (n *fakeNode) replayStreams() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.replay = true
	close(n.wake)
	n.wake = make(chan struct{})
}

func (n *fakeNode) Open(ctx context.Context, _ Ref, opts OpenOptions) (io.ReadCloser, error) {
	since := opts.Since.Truncate(time.Second)
	pr, pw := io.Pipe()
	n.mu.Lock()
	next, broken := n.current, n.breakCh
	n.opens++
	n.mu.Unlock()
	go func() {
		// As the kubelet's reader: sinceTime filters each record, and a record gets the timestamp
		// prefix only if the record before it (filtered or not) ended a line.
		newLine := true
		for {
			n.mu.Lock()
			if n.replay && opts.Follow {
				next, n.replay, newLine = n.current, false, true
			}
			lines, wake := n.lines[max(next, n.current):], n.wake
			n.mu.Unlock()
			for _, l := range lines {
				next++
				prefix := newLine
				newLine = !l.partial
				if l.ts.Before(since) {
					continue
				}
				out := l.data
				if prefix {
					out = l.ts.UTC().Format(time.RFC3339Nano) + " " + out
				}
				if _, err := io.WriteString(pw, out); err != nil {
					return
				}
			}
			if !opts.Follow {
				pw.Close()
				return
			}
			select {
			case <-wake:
			case <-broken:
				pw.Close()
				return
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			}
		}
	}()
	return pr, nil
}

type memRecords struct {
	mu   sync.Mutex
	segs map[string][]record.Segment
	gaps []record.Gap
}

func (m *memRecords) key(pod, c string, run int32) string {
	return fmt.Sprintf("%s/%s/%d", pod, c, run)
}

func (m *memRecords) Segments(_ context.Context, pod, c string, run int32) ([]record.Segment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]record.Segment(nil), m.segs[m.key(pod, c, run)]...), nil
}

func (m *memRecords) PutSegment(_ context.Context, s record.Segment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.key(s.PodUID, s.Container, s.Run)
	for _, have := range m.segs[k] {
		if have.Seq == s.Seq {
			return nil
		}
	}
	m.segs[k] = append(m.segs[k], s)
	sort.Slice(m.segs[k], func(i, j int) bool { return m.segs[k][i].Seq < m.segs[k][j].Seq })
	return nil
}

func (m *memRecords) DeleteSegments(_ context.Context, pod, c string, run int32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.segs, m.key(pod, c, run))
	return nil
}

func (m *memRecords) PutGap(_ context.Context, g record.Gap) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gaps = append(m.gaps, g)
	return nil
}

type rig struct {
	node  *fakeNode
	recs  *memRecords
	store objstore.Store
	ref   Ref
	cfg   Config
	t0    time.Time
	n     int
	want  bytes.Buffer // every line written and not lost
}

func newRig(t *testing.T) *rig {
	store, err := objstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &rig{node: newFakeNode(), recs: &memRecords{segs: map[string][]record.Segment{}}, store: store,
		ref: Ref{Namespace: "ns", Pod: "p", PodUID: "uid", Container: "main"},
		cfg: Config{SegmentBytes: 300, SegmentAge: 50 * time.Millisecond, Poll: 10 * time.Millisecond, Retry: 20 * time.Millisecond},
		t0:  time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
}

// writeAt writes a line at ts, expected in the archive.
func (r *rig) writeAt(ts time.Time, data string) {
	r.node.write(ts, data)
	r.want.WriteString(data)
}

// write writes a line; lost lines are not expected in the archive.
func (r *rig) write(data string, lost bool) {
	// Several lines share each timestamp, as lines written in one go can.
	ts := r.t0.Add(time.Duration(r.n/3) * 7 * time.Millisecond)
	r.n++
	r.node.write(ts, data)
	if !lost {
		r.want.WriteString(data)
	}
}

func (r *rig) segKey(seq int32) string { return fmt.Sprintf("segs/%d.gz", seq) }

func (r *rig) over(context.Context) (End, error) {
	r.node.mu.Lock()
	defer r.node.mu.Unlock()
	return End{Over: r.node.over}, nil
}

func (r *rig) start(ctx context.Context) chan error { return r.run(ctx, r.over) }

// run runs the rig's capture with the status over.
func (r *rig) run(ctx context.Context, over func(context.Context) (End, error)) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := Capture(ctx, r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, over, nil)
		done <- err
	}()
	return done
}

func (r *rig) end(t *testing.T, done chan error) {
	t.Helper()
	r.node.mu.Lock()
	r.node.over = true
	r.node.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("Capture: %v", err)
	}
}

// check assembles the run and compares it with what was written and not lost.
func (r *rig) check(t *testing.T) {
	t.Helper()
	segs, err := r.recs.Segments(t.Context(), r.ref.PodUID, r.ref.Container, r.ref.Run)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Assemble(t.Context(), r.store, r.ref, "final.log.gz", segs, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := inspect.Cat(t.Context(), r.store, a.Key, &buf); err != nil {
		t.Fatal(err)
	}
	got := buf.Bytes()
	sum := sha256.Sum256(got)
	if !bytes.Equal(got, r.want.Bytes()) || a.Bytes != int64(len(got)) || a.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("assembled %d bytes (recorded %d, sha256 %s), want the %d bytes written:\ngot  %q\nwant %q",
			len(got), a.Bytes, a.SHA256, r.want.Len(), got, r.want.String())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *rig) segments() int {
	s, _ := r.recs.Segments(context.Background(), r.ref.PodUID, r.ref.Container, r.ref.Run)
	return len(s)
}

func TestCaptureResumesBrokenStreamsWithoutDuplicates(t *testing.T) {
	r := newRig(t)
	done := r.start(t.Context())
	for i := range 60 {
		r.write(fmt.Sprintf("line %02d of output\n", i), false)
		if i%7 == 3 {
			time.Sleep(30 * time.Millisecond)
			r.node.breakStreams()
		}
	}
	r.write("last line without newline", false)
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	r.check(t)
	if len(r.recs.gaps) != 0 {
		t.Errorf("gaps %+v, want none: nothing was rotated away", r.recs.gaps)
	}
	if r.segments() < 3 {
		t.Errorf("%d segments, want several (300-byte segments)", r.segments())
	}
}

func TestCaptureObservesLagOfFollowedLines(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var lags []time.Duration
	r.cfg.ObserveLag = func(d time.Duration) { mu.Lock(); lags = append(lags, d); mu.Unlock() }
	r.t0 = time.Now().Add(-time.Minute) // lines written a minute ago
	done := r.start(t.Context())
	for i := range 10 {
		r.write(fmt.Sprintf("line %d\n", i), false)
	}
	waitFor(t, "all lines observed", func() bool { mu.Lock(); defer mu.Unlock(); return len(lags) == 10 })
	r.end(t, done)
	r.check(t)
	for _, d := range lags {
		if d < 59*time.Second { // the rig spaces its lines a few ms apart after t0
			t.Errorf("lag %s, want about the minute since the lines were written", d)
		}
	}
}

func TestCaptureRecordsRotatedOutputAsGap(t *testing.T) {
	r := newRig(t)
	ctx, stop := context.WithCancel(t.Context())
	done := r.start(ctx)
	for i := range 20 {
		r.write(fmt.Sprintf("before %02d\n", i), false)
	}
	waitFor(t, "durable", func() bool { return r.segments() > 0 })
	time.Sleep(100 * time.Millisecond)
	stop() // the archiver is down ...
	<-done
	// ... while the container writes and the node rotates twice.
	for i := range 10 {
		r.write(fmt.Sprintf("lost %02d\n", i), true)
		if i == 4 {
			r.node.rotate()
		}
	}
	r.node.rotate()
	for i := range 5 {
		r.write(fmt.Sprintf("after %02d\n", i), false)
	}
	done = r.start(t.Context())
	time.Sleep(100 * time.Millisecond)
	r.end(t, done)
	r.check(t)
	if len(r.recs.gaps) != 1 || r.recs.gaps[0].Reason != record.GapRotated || !r.recs.gaps[0].Before.After(r.recs.gaps[0].After) {
		t.Errorf("gaps %+v, want one rotated-away gap between the last line captured and the next", r.recs.gaps)
	}
}

// TestCaptureDropsReplayedLines: the node's reader sends the current file again from its start in
// the middle of a stream; nothing is captured twice, even the lines sharing the last timestamp.
func TestCaptureDropsReplayedLines(t *testing.T) {
	r := newRig(t)
	r.cfg.SegmentBytes = 1 << 20 // one segment: the replay is met by what is in memory
	done := r.start(t.Context())
	for i := range 8 { // the rig gives each 3 lines one timestamp: the last 2 share one
		r.write(fmt.Sprintf("line %d\n", i), false)
	}
	time.Sleep(200 * time.Millisecond) // followed
	r.node.replayStreams()
	time.Sleep(200 * time.Millisecond)
	r.write("line 8\n", false)
	time.Sleep(200 * time.Millisecond)
	r.end(t, done)
	r.check(t)
}

func TestCaptureSurvivesRestartWithoutDuplicates(t *testing.T) {
	r := newRig(t)
	for round := range 4 {
		ctx, stop := context.WithCancel(t.Context())
		done := r.start(ctx)
		for i := range 25 {
			r.write(fmt.Sprintf("round %d line %02d\n", round, i), false)
		}
		waitFor(t, "durable", func() bool { return r.segments() > round })
		stop() // a crash: what the open segment held is read again after the restart
		<-done
	}
	done := r.start(t.Context())
	r.end(t, done)
	r.check(t)
	if len(r.recs.gaps) != 0 {
		t.Errorf("gaps %+v, want none", r.recs.gaps)
	}
}

// A run read only after its end, from nothing durable, may have lost older files to rotation: it
// gets a "possibly rotated" gap before its first line when its current file holds about the
// node's rotation size, and none when it holds clearly less. Its start, known or not, does not
// change that: the start rule judges such a run after this check (before: a late stream's rule
// recorded "start unknown" first).
func TestCaptureMarksUnfollowedRunNearRotationSize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lines   int
		gap     bool
		started bool // the status gives the run's start, long before the read
	}{{"near the rotation size", 95, true, false}, {"well below it", 50, false, false},
		{"near the rotation size, its start known", 95, true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.cfg.NodeLogMaxSize = 4000 // a line of 10 bytes takes 40 to 43 in the file
			for i := range 30 {
				r.write(fmt.Sprintf("rotated %02d\n", i), true)
			}
			r.node.rotate()
			for i := range tc.lines {
				r.write(fmt.Sprintf("kept %04d\n", i), false) // 10 bytes each
			}
			r.node.over = true
			over := r.over
			if tc.started {
				over = r.started(r.t0.Add(-10*time.Second), false)
			}
			if err := <-r.run(t.Context(), over); err != nil {
				t.Fatalf("Capture: %v", err)
			}
			r.check(t)
			if !tc.gap {
				if len(r.recs.gaps) != 0 {
					t.Errorf("gaps %+v, want none", r.recs.gaps)
				}
				return
			}
			if len(r.recs.gaps) != 1 {
				t.Fatalf("gaps %+v, want one", r.recs.gaps)
			}
			g := r.recs.gaps[0]
			if g.Reason != record.GapMaybeRotated || !g.After.IsZero() || !g.Before.Equal(r.t0.Add(10*7*time.Millisecond)) {
				t.Errorf("gap %+v, want %q before the first line kept (%s)", g, record.GapMaybeRotated, r.t0.Add(70*time.Millisecond))
			}
		})
	}
}

// failingNode answers every open as the kubelet's reader does when it cannot watch the log file:
// the lines so far (a new one each time), then its error in the body of the response it started.
type failingNode struct {
	mu    sync.Mutex
	opens int
}

func (n *failingNode) Open(context.Context, Ref, OpenOptions) (io.ReadCloser, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opens++
	ts := time.Date(2026, 11, 22, 10, 0, n.opens, 0, time.UTC).Format(time.RFC3339Nano)
	return io.NopCloser(strings.NewReader(ts + " line " + fmt.Sprint(n.opens) + "\nfailed to create fsnotify watcher: too many open files\n")), nil
}

// A stream that breaks soon after it opens is reopened with backoff, not in a tight loop that
// has the node read the whole log file again every 100 ms.
func TestCaptureBacksOffStreamsThatBreakAtOnce(t *testing.T) {
	r := newRig(t)
	r.cfg.Retry = 400 * time.Millisecond
	var mu sync.Mutex
	causes := map[string]int{}
	r.cfg.ObserveReopen = func(cause string) { mu.Lock(); causes[cause]++; mu.Unlock() }
	n := &failingNode{}
	ctx, stop := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer stop()
	if _, err := Capture(ctx, r.cfg, n, r.recs, r.store, r.segKey, r.ref, r.over, nil); err == nil {
		t.Fatal("Capture of a stream that never works ended without error")
	}
	// 100 ms then doubling up to 400 ms: opens at 0, 0.2, 0.6, 1.0 and 1.4 s; without backoff, 15.
	if n.opens > 6 {
		t.Errorf("%d opens in 1.5 s, want at most 6", n.opens)
	}
	// Every stream but the one the deadline cut was reported broken, and nothing else.
	mu.Lock()
	defer mu.Unlock()
	if causes["broken"] < n.opens-1 || len(causes) != 1 {
		t.Errorf("reopens reported %v after %d opens, want each as broken", causes, n.opens)
	}
}

// Segments are written once SegmentAge old even when no stream stays open long enough for the
// capture to look at their age.
func TestCaptureStoresAgedSegmentsWhileStreamsBreak(t *testing.T) {
	r := newRig(t)
	r.cfg.SegmentBytes, r.cfg.Poll, r.cfg.SegmentAge = 1<<20, time.Hour, 50*time.Millisecond
	done := r.start(t.Context())
	for i := range 30 {
		r.write(fmt.Sprintf("line %02d\n", i), false)
		time.Sleep(10 * time.Millisecond)
		r.node.breakStreams()
	}
	waitFor(t, "a segment stored", func() bool { return r.segments() > 0 })
	// Polls are an hour apart: only a break has the capture look whether the run is over, so
	// break its streams until it has seen it.
	r.node.mu.Lock()
	r.node.over = true
	r.node.mu.Unlock()
	for ended := false; !ended; {
		r.node.breakStreams()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Capture: %v", err)
			}
			ended = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	r.check(t)
}

func TestReadLinesReportsTheNodesError(t *testing.T) {
	err := readLines(t.Context(), strings.NewReader("failed to create fsnotify watcher: too many open files\n"), make(chan line), true)
	if err == nil || !strings.Contains(err.Error(), "failed to create fsnotify watcher: too many open files") {
		t.Errorf("error %v, want it to hold the node's error text", err)
	}
}

// A run read whole at its end goes straight to its final object when it fits one segment: no
// segment is recorded, and the object holds exactly what was written. One larger than a segment
// is captured in segments as before.
func TestCaptureWritesARunWholeWhenItFitsOneSegment(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines int
		whole bool
	}{{"short", 5, true}, {"longer than a segment", 40, false}, {"empty", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			for i := range tc.lines {
				r.write(fmt.Sprintf("line %d of a short run\n", i), false)
			}
			r.node.over = true
			var asked []bool
			a, err := Capture(t.Context(), r.cfg, r.node, r.recs, r.store, r.segKey, r.ref, r.over,
				func(previous bool) (string, time.Time) {
					asked = append(asked, previous)
					return "whole.log.gz", time.Time{}
				})
			if err != nil {
				t.Fatal(err)
			}
			if got := r.segments(); (a != nil) != tc.whole || (tc.whole && got != 0) || (!tc.whole && got == 0) {
				t.Fatalf("written whole: %v with %d segments recorded; want whole %v", a != nil, got, tc.whole)
			}
			if !tc.whole {
				r.check(t)
				return
			}
			var buf bytes.Buffer
			if err := inspect.Cat(t.Context(), r.store, a.Key, &buf); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(buf.Bytes())
			if !bytes.Equal(buf.Bytes(), r.want.Bytes()) || a.Key != "whole.log.gz" || a.Bytes != int64(r.want.Len()) || a.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("whole log %+v holds %q, want %q", a, buf.String(), r.want.String())
			}
			if len(asked) != 1 || asked[0] {
				t.Errorf("final asked with %v, want once for the current run", asked)
			}
			// The store checked the write against the sha256 the result carries (for the seal).
			rc, err := r.store.Get(t.Context(), a.Key)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			stored, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(stored); a.StoredSHA256 != hex.EncodeToString(sum[:]) || a.StoredBytes != int64(len(stored)) {
				t.Errorf("whole log %+v: the store holds %d bytes with sha256 %x", a, len(stored), sum)
			}
		})
	}
}

package archiver

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
)

// gapRecords counts the reads of segments and job rows, and fails PutGap when told to.
type gapRecords struct {
	*memRecords
	segmentReads, sealReads int
	failGap                 bool
}

func (g *gapRecords) Segments(context.Context, string, string, int32) ([]record.Segment, error) {
	g.segmentReads++
	return []record.Segment{{Seq: 7}}, nil
}

func (g *gapRecords) PutGap(context.Context, record.Gap) error {
	if g.failGap {
		return errors.New("database down")
	}
	return nil
}

func (g *gapRecords) JobForSeal(ctx context.Context, uid string) (db.SealRead, error) {
	g.sealReads++
	return g.memRecords.JobForSeal(ctx, uid)
}

// TestRunRecords: a capture's first read of its segments is StartRun's, later ones the
// database's; the gaps it records are known, each once, in time order, unless a write failed.
func TestRunRecords(t *testing.T) {
	ctx := t.Context()
	g := &gapRecords{memRecords: &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{}}}
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	r := &runRecords{Records: g, segments: []record.Segment{{Seq: 3}}, gaps: []record.Gap{{After: at(5), Reason: record.GapRotated}}}
	if segs, _ := r.Segments(ctx, "p", "c", 0); len(segs) != 1 || segs[0].Seq != 3 || g.segmentReads != 0 {
		t.Errorf("first Segments = %+v (%d reads), want StartRun's without a read", segs, g.segmentReads)
	}
	if segs, _ := r.Segments(ctx, "p", "c", 0); len(segs) != 1 || segs[0].Seq != 7 || g.segmentReads != 1 {
		t.Errorf("second Segments = %+v (%d reads), want the database's", segs, g.segmentReads)
	}
	for _, gap := range []record.Gap{{After: at(1), Reason: record.GapRotated}, {After: at(5), Reason: record.GapRotated}} {
		if err := r.PutGap(ctx, gap); err != nil {
			t.Fatal(err)
		}
	}
	own := record.Gap{After: at(9), Reason: record.GapCollected}
	gaps, ok := r.knownGaps(&own)
	if !ok || len(gaps) != 3 || !gaps[0].After.Equal(at(1)) || !gaps[1].After.Equal(at(5)) || gaps[2].Reason != record.GapCollected {
		t.Errorf("knownGaps = %+v, %t; want the gaps at 1, 5 (once) and 9", gaps, ok)
	}
	g.failGap = true
	if err := r.PutGap(ctx, record.Gap{After: at(2)}); err == nil {
		t.Fatal("PutGap succeeded with the database down")
	}
	if _, ok := r.knownGaps(nil); ok {
		t.Error("knownGaps is sure after a gap's write failed; want them read")
	}
	if _, ok := (*runRecords)(nil).knownGaps(nil); ok {
		t.Error("knownGaps of no runRecords is sure; want them read")
	}
}

// TestLoggedRuns: rows are remembered by pod name and UID; a pod recreated under its name starts
// over; forget drops them.
func TestLoggedRuns(t *testing.T) {
	var l loggedRuns
	pod := types.NamespacedName{Namespace: "ns", Name: "p"}
	l.add(pod, "uid-1", record.LogObject{Container: "main", Instance: record.InstanceCurrent}, true)
	if rows, archived := l.known(pod, "uid-1"); len(rows) != 1 || !archived {
		t.Errorf("known = %v, %t; want the row, archived", rows, archived)
	}
	if rows, archived := l.known(pod, "uid-2"); rows != nil || archived {
		t.Errorf("known for another pod of the name = %v, %t; want nothing", rows, archived)
	}
	l.add(pod, "uid-2", record.LogObject{Container: "main", Instance: record.InstanceCurrent}, false)
	if _, archived := l.known(pod, "uid-2"); archived {
		t.Error("a pod recreated under the name is archived; want it to start over")
	}
	l.forget(pod)
	if rows, _ := l.known(pod, "uid-2"); rows != nil {
		t.Errorf("known after forget = %v, want nothing", rows)
	}
}

// TestSealRecords: a seal's reads of its job come from one JobForSeal; another job's go to the
// database; a read dropped (captures stopped) is read again.
func TestSealRecords(t *testing.T) {
	ctx := t.Context()
	g := &gapRecords{memRecords: &memRecords{jobs: map[string]record.Job{}, pods: map[string]record.Pod{}}}
	s := &sealRecords{Records: g, uid: "job-1"}
	for range 2 {
		if _, _, err := s.ChainEntry(ctx, "job-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pods(ctx, "job-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Gaps(ctx, "job-1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Job(ctx, "job-2"); err != nil {
		t.Fatal(err)
	}
	if g.sealReads != 1 {
		t.Errorf("%d reads of the job's record, want 1", g.sealReads)
	}
	s.read = nil
	if _, err := s.Transitions(ctx, "job-1"); err != nil || g.sealReads != 2 {
		t.Errorf("after the read was dropped: %d reads (%v), want 2", g.sealReads, err)
	}
}

// TestTransitionsFingerprintNamesTheJob: a job recreated under the same name before the reconciler
// saw the old one gone, with the same phases at the same times, is another job: its transitions
// are written, not skipped as the old job's.
func TestTransitionsFingerprintNamesTheJob(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ts := []record.Transition{{Phase: "Pending", Time: at}}
	if transitionsFingerprint("uid-old", ts) == transitionsFingerprint("uid-new", ts) {
		t.Error("two jobs' equal transitions have one fingerprint: the second job's would not be written")
	}
	if transitionsFingerprint("uid-old", ts) != transitionsFingerprint("uid-old", ts) {
		t.Error("one job's transitions have two fingerprints")
	}
}

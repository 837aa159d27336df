package db

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

// TestDBRunInTwoTransactions (issue 28): a run's capture starts with one transaction (StartRun:
// the claim, the run's row, gaps and segments) and its log is recorded with one (RecordRunLog:
// sources, row, the pod archived), each what the single calls it replaces do, idempotent; a
// refused write leaves nothing of the transaction behind.
func TestDBRunInTwoTransactions(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	run := runFixture(t, records, "tx", "node-a")

	start, err := records.StartRun(ctx, run, healthyWithin, record.InstanceCurrent)
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	if start.Owner != record.CapturedByAPI || !start.First || start.Recorded != nil || len(start.Gaps) != 0 || len(start.Segments) != 0 {
		t.Fatalf("first StartRun = %+v, want the API's, first, nothing recorded", start)
	}
	seg := segment(run.RunKey, 0, "api")
	gap := record.Gap{PodUID: run.PodUID, Container: "main", After: at(time.Second), Reason: record.GapRotated}
	if err := records.PutSegment(ctx, seg); err != nil {
		t.Fatal(err)
	}
	if err := records.PutGap(ctx, gap); err != nil {
		t.Fatal(err)
	}
	again, err := records.StartRun(ctx, run, healthyWithin, record.InstanceCurrent)
	if err != nil {
		t.Fatalf("StartRun again: %v", err)
	}
	if again.Owner != record.CapturedByAPI || again.First || again.Recorded != nil {
		t.Errorf("StartRun again = owner %q, first %t, recorded %v; want the API's, not first, nothing recorded", again.Owner, again.First, again.Recorded)
	}
	if len(again.Segments) != 1 || again.Segments[0].ObjectKey != seg.ObjectKey || len(again.Gaps) != 1 || again.Gaps[0].Reason != gap.Reason {
		t.Errorf("StartRun again: segments %+v, gaps %+v; want the one of each recorded", again.Segments, again.Gaps)
	}

	row := record.LogObject{PodUID: run.PodUID, Container: "main", ContainerType: record.ContainerRegular, Instance: record.InstanceCurrent,
		ObjectKey: "logs/main.log.gz", Bytes: 100, StoredBytes: 10, SHA256: strings.Repeat("ab", 32), State: record.LogStored, Reason: "1 gap(s) in logs: 1 rotated"}
	sources := record.SourceRanges(again.Segments, record.InstanceCurrent)
	for range 2 { // idempotent
		if err := records.RecordRunLog(ctx, row, sources, &db.PodArchive{At: at(time.Minute)}); err != nil {
			t.Fatalf("RecordRunLog: %v", err)
		}
	}
	logs, err := records.PodLogObjects(ctx, run.PodUID)
	if err != nil || len(logs) != 1 || logs[0].ObjectKey != row.ObjectKey || logs[0].Reason != row.Reason {
		t.Errorf("PodLogObjects = %+v, %v; want the row recorded", logs, err)
	}
	if got, err := records.Sources(ctx, run.RunKey); err != nil || len(got) != 1 || got[0].To != seg.TotalBytes {
		t.Errorf("Sources = %+v, %v; want the segment's range", got, err)
	}
	if pod, err := records.Pod(ctx, run.PodUID); err != nil || pod.ArchiveState != record.ArchiveArchived {
		t.Errorf("pod's archive state %q (%v), want archived", pod.ArchiveState, err)
	}
	recorded, err := records.StartRun(ctx, run, healthyWithin, record.InstanceCurrent)
	if err != nil || recorded.Recorded == nil || recorded.Recorded.ObjectKey != row.ObjectKey {
		t.Errorf("StartRun of the recorded run = %+v, %v; want its row", recorded.Recorded, err)
	}

	// A refused write (an invalid row) writes none of the rest.
	other := runFixture(t, records, "tx-refused", "node-a")
	bad := row
	bad.PodUID, bad.SHA256 = other.PodUID, "not hex"
	otherSources := []record.SourceRange{{PodUID: other.PodUID, Container: "main", Instance: record.InstanceCurrent, To: 100, Source: record.CapturedByAPI}}
	if err := records.RecordRunLog(ctx, bad, otherSources, &db.PodArchive{At: at(time.Minute)}); !errors.Is(err, db.ErrInvalid) {
		t.Fatalf("RecordRunLog of an invalid row: %v, want ErrInvalid", err)
	}
	if got, err := records.Sources(ctx, other.RunKey); err != nil || len(got) != 0 {
		t.Errorf("Sources after a refused RecordRunLog = %+v, %v; want none", got, err)
	}
	if pod, err := records.Pod(ctx, other.PodUID); err != nil || pod.ArchiveState != record.ArchivePending {
		t.Errorf("pod after a refused RecordRunLog: %q (%v), want pending", pod.ArchiveState, err)
	}
}

// TestDBJobInOneTransaction (issue 28): RecordJob writes the row and the transitions as UpsertJob
// and RecordTransitions do, in one transaction (a refused part writes nothing), and JobForSeal
// reads the chain entry and every row as ChainEntry, Job, Transitions, Pods, LogObjects and Gaps
// do.
func TestDBJobInOneTransaction(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	run := runFixture(t, records, "job-tx", "node-a")
	row := newJob("job-tx-2").phase("Completed").build()
	ts := []record.Transition{{Phase: "Running", Time: at(time.Second), Source: record.SourceCondition},
		{Phase: "Completed", Time: at(time.Minute), Source: record.SourceObserved, ResourceVersion: "7"}}
	for i, want := range []int{2, 0} { // idempotent
		if n, err := records.RecordJob(ctx, &row, row.UID, ts); err != nil || n != want {
			t.Fatalf("RecordJob #%d = %d, %v; want %d new transitions", i+1, n, err, want)
		}
	}
	refused := newJob("job-tx-3").build()
	badTs := []record.Transition{{Phase: "Running", Time: at(time.Second), Source: "nowhere"}}
	if _, err := records.RecordJob(ctx, &refused, refused.UID, badTs); !errors.Is(err, db.ErrInvalid) {
		t.Fatalf("RecordJob with invalid transitions: %v, want ErrInvalid", err)
	}
	if _, err := records.Job(ctx, refused.UID); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("the job of a refused RecordJob: %v, want ErrNotFound (nothing written)", err)
	}

	uid := run.JobUID
	read, err := records.JobForSeal(ctx, uid)
	if err != nil {
		t.Fatalf("JobForSeal: %v", err)
	}
	var want record.JobRows
	if want.Job, err = records.Job(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if want.Transitions, err = records.Transitions(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if want.Pods, err = records.Pods(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if want.Logs, err = records.LogObjects(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if want.Gaps, err = records.Gaps(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if read.Chained {
		t.Errorf("JobForSeal: chained, want not (the job was never finalized)")
	}
	if diff := cmp.Diff(want, read.Rows); diff != "" {
		t.Errorf("JobForSeal's rows (-the single reads +JobForSeal):\n%s", diff)
	}
	if _, err := records.JobForSeal(ctx, "no-such-job"); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("JobForSeal of an unknown job: %v, want ErrNotFound", err)
	}
}

// TestDBStartRunsTogether (issue 28, design 0011): StartRuns answers for each run what StartRun
// would, in the runs' order, in one transaction: a refused claim claims none of the others.
func TestDBStartRunsTogether(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	fresh, resumed, recorded := runFixture(t, records, "many-fresh", "node-a"), runFixture(t, records, "many-resumed", "node-a"),
		runFixture(t, records, "many-recorded", "node-a")
	if _, err := records.StartRun(ctx, resumed, healthyWithin, record.InstanceCurrent); err != nil {
		t.Fatal(err)
	}
	seg := segment(resumed.RunKey, 0, "resumed")
	if err := records.PutSegment(ctx, seg); err != nil {
		t.Fatal(err)
	}
	row := record.LogObject{PodUID: recorded.PodUID, Container: "main", ContainerType: record.ContainerRegular, Instance: record.PreviousInstance(1),
		ObjectKey: "logs/recorded.log.gz", Bytes: 100, StoredBytes: 10, SHA256: strings.Repeat("cd", 32), State: record.LogStored}
	if err := records.RecordRunLog(ctx, row, nil, nil); err != nil {
		t.Fatal(err)
	}

	starts, err := records.StartRuns(ctx, []db.RunToStart{{RunClaim: fresh, Instance: record.InstanceCurrent},
		{RunClaim: resumed, Instance: record.InstanceCurrent}, {RunClaim: recorded, Instance: record.PreviousInstance(1)}}, healthyWithin)
	if err != nil || len(starts) != 3 {
		t.Fatalf("StartRuns = %d starts, %v; want 3", len(starts), err)
	}
	if s := starts[0]; !s.First || s.Recorded != nil || len(s.Segments) != 0 {
		t.Errorf("the fresh run's start = %+v, want first, nothing recorded", s)
	}
	if s := starts[1]; s.First || s.Recorded != nil || len(s.Segments) != 1 || s.Segments[0].ObjectKey != seg.ObjectKey {
		t.Errorf("the resumed run's start = %+v, want not first, its one segment", s)
	}
	if s := starts[2]; s.Recorded == nil || s.Recorded.ObjectKey != row.ObjectKey {
		t.Errorf("the recorded run's start found %+v, want its row under %s", s.Recorded, row.Instance)
	}

	unclaimed, refused := runFixture(t, records, "many-unclaimed", "node-a"), runFixture(t, records, "many-refused", "node-a")
	refused.Namespace = ""
	if _, err := records.StartRuns(ctx, []db.RunToStart{{RunClaim: unclaimed, Instance: record.InstanceCurrent},
		{RunClaim: refused, Instance: record.InstanceCurrent}}, healthyWithin); !errors.Is(err, db.ErrInvalid) {
		t.Fatalf("StartRuns with an invalid claim: %v, want ErrInvalid", err)
	}
	if _, err := records.Run(ctx, unclaimed.RunKey, healthyWithin); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("the run before the refused claim: %v, want ErrNotFound (not claimed)", err)
	}
}

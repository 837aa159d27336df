package archiver

import (
	"context"
	"time"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
)

// memRecords captures every run through the API: no node agent.

func (m *memRecords) ClaimRun(context.Context, db.RunClaim, time.Duration) (string, bool, error) {
	return record.CapturedByAPI, true, nil
}
func (m *memRecords) Run(_ context.Context, k db.RunKey, _ time.Duration) (db.LogRun, error) {
	return db.LogRun{RunClaim: db.RunClaim{RunKey: k}, Owner: record.CapturedByAPI, ClaimedOwner: record.CapturedByAPI}, nil
}
func (m *memRecords) EndRun(context.Context, db.RunKey) error                      { return nil }
func (m *memRecords) TakeOverRun(context.Context, db.RunKey, string) (bool, error) { return true, nil }
func (m *memRecords) PutSources(context.Context, []record.SourceRange) error       { return nil }

func (m *memRecords) StartRun(ctx context.Context, c db.RunClaim, healthy time.Duration, _ string) (db.RunStart, error) {
	owner, first, err := m.ClaimRun(ctx, c, healthy)
	return db.RunStart{Owner: owner, First: first}, err
}
func (m *memRecords) StartRuns(ctx context.Context, runs []db.RunToStart, healthy time.Duration) ([]db.RunStart, error) {
	return startEach(ctx, m.StartRun, runs, healthy)
}

// startEach is StartRuns by one start of each run.
func startEach(ctx context.Context, start func(context.Context, db.RunClaim, time.Duration, string) (db.RunStart, error),
	runs []db.RunToStart, healthy time.Duration) ([]db.RunStart, error) {
	out := make([]db.RunStart, len(runs))
	for i, r := range runs {
		var err error
		if out[i], err = start(ctx, r.RunClaim, healthy, r.Instance); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (m *memRecords) RecordRunLog(ctx context.Context, l record.LogObject, _ []record.SourceRange, pod *db.PodArchive) error {
	if err := m.PutLogObject(ctx, l); err != nil || pod == nil {
		return err
	}
	return m.MarkPodArchived(ctx, l.PodUID, pod.At, pod.Reason)
}
func (m *memRecords) JobForSeal(ctx context.Context, uid string) (db.SealRead, error) {
	var (
		read db.SealRead
		err  error
	)
	if read.Entry, read.Chained, err = m.ChainEntry(ctx, uid); err != nil {
		return read, err
	}
	if read.Rows.Job, err = m.Job(ctx, uid); err != nil {
		return read, err
	}
	if read.Rows.Transitions, err = m.Transitions(ctx, uid); err != nil {
		return read, err
	}
	if read.Rows.Pods, err = m.Pods(ctx, uid); err != nil {
		return read, err
	}
	if read.Rows.Logs, err = m.LogObjects(ctx, uid); err != nil {
		return read, err
	}
	read.Rows.Gaps, err = m.Gaps(ctx, uid)
	return read, err
}
func (m *memRecords) RecordJob(ctx context.Context, row *record.Job, jobUID string, ts []record.Transition) (int, error) {
	if row != nil {
		if err := m.UpsertJob(ctx, *row); err != nil {
			return 0, err
		}
	}
	return m.RecordTransitions(ctx, jobUID, ts)
}

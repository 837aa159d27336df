package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// The archiver's work on one container run, in two transactions (issue 28): what its capture
// needs as it starts (StartRun, or StartRuns for several runs of one job at once), and what
// recording its log writes (RecordRunLog), each the same rows and checks as the single calls it
// replaces.

// RunStart is what StartRun found of a run as its capture starts.
type RunStart struct {
	// Owner and First are ClaimRun's: the run's owner, and whether this call assigned it.
	Owner string
	First bool
	// Recorded is the run's log row under the instance asked for, nil if it has none yet: a
	// capture of a recorded run has nothing to do.
	Recorded *record.LogObject
	// Gaps are the gaps recorded so far of the run.
	Gaps []record.Gap
	// Segments are the run's recorded segments, in order: where its capture resumes.
	Segments []record.Segment
}

// StartRun claims the run (ClaimRun) and reads, in the same transaction, its log row under
// instance, its gaps and its segments. Idempotent: a run claimed before keeps its owner.
func (d *DB) StartRun(ctx context.Context, c RunClaim, healthyWithin time.Duration, instance string) (RunStart, error) {
	out, err := d.StartRuns(ctx, []RunToStart{{RunClaim: c, Instance: instance}}, healthyWithin)
	if err != nil {
		return RunStart{}, err
	}
	return out[0], nil
}

// RunToStart is one run StartRuns starts: its claim, and the instance its log row is looked up
// under.
type RunToStart struct {
	RunClaim
	Instance string
}

// StartRuns is StartRun for each run, in one transaction: the archiver starts the runs of one
// job's pods together (issue 28: a pod's capture start was a transaction of its own; design
// 0011). The answers are in the runs' order; on any error nothing is claimed.
func (d *DB) StartRuns(ctx context.Context, runs []RunToStart, healthyWithin time.Duration) (out []RunStart, err error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	err = d.inTx(ctx, func(tx querier) error {
		out = make([]RunStart, len(runs))
		for i, r := range runs {
			if out[i], err = startRun(ctx, tx, r, healthyWithin); err != nil {
				return fmt.Errorf("start run %s: %w", r.RunKey, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// startRun claims one run and reads its log row, gaps and segments, in tx: only those the claim's
// statement saw exist (claimAndLook), so a new run's start is that one statement.
func startRun(ctx context.Context, tx querier, r RunToStart, healthyWithin time.Duration) (out RunStart, err error) {
	if r.Instance == "" {
		return RunStart{}, fmt.Errorf("start run %s: %w: the instance of its log is required", r.RunKey, ErrInvalid)
	}
	var seen recordedOfRun
	if out.Owner, out.First, seen, err = claimAndLook(ctx, tx, r.RunClaim, healthyWithin, r.Instance); err != nil {
		return RunStart{}, err
	}
	if seen.log {
		logs, err := queryLogObjects(ctx, tx, `SELECT `+logObjectColumns+`
FROM log_objects lo WHERE lo.pod_uid = $1 AND lo.container = $2 AND lo.instance = $3`, r.PodUID, r.Container, r.Instance)
		if err != nil {
			return RunStart{}, fmt.Errorf("get the log of run %s: %w", r.RunKey, err)
		}
		if len(logs) > 0 {
			out.Recorded = &logs[0]
		}
	}
	if seen.gaps {
		if out.Gaps, err = runGaps(ctx, tx, r.PodUID, r.Container, r.Run); err != nil {
			return RunStart{}, err
		}
	}
	if seen.segments {
		if out.Segments, err = getSegments(ctx, tx, r.PodUID, r.Container, r.Run); err != nil {
			return RunStart{}, err
		}
	}
	return out, nil
}

// PodArchive is a pod's archive decided with the last of its logs (RecordRunLog): archived, or
// released with Reason.
type PodArchive struct {
	At     time.Time
	Reason string
}

// RecordRunLog records a run's log in one transaction: which capture stored which bytes of it
// (PutSources), then its row (PutLogObject), and, when pod is set, the pod archived or released
// (MarkPodArchived): the caller knows every other log of the pod recorded. Each write is the
// idempotent one of the call it replaces, with the same errors (ErrFinalized: the job is sealed);
// on any error nothing is written.
func (d *DB) RecordRunLog(ctx context.Context, l record.LogObject, sources []record.SourceRange, pod *PodArchive) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.inTx(ctx, func(tx querier) error {
		if err := putSources(ctx, tx, sources); err != nil {
			return err
		}
		if err := putLogObject(ctx, tx, l); err != nil {
			return err
		}
		if pod == nil {
			return nil
		}
		return markPodArchived(ctx, tx, l.PodUID, pod.At, pod.Reason)
	})
}

// inTx runs fn in a transaction, committed if fn succeeds, rolled back otherwise. fn's
// statements run prepared.
func (d *DB) inTx(ctx context.Context, fn func(querier) error) (err error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return translate(err)
	}
	if err = fn(d.prepared(tx)); err != nil {
		_ = tx.Rollback() // fn's error says why; a failed rollback ends the transaction too
		return d.check(err)
	}
	return translate(tx.Commit())
}

// SealRead is what a job's seal reads of its record before it finalizes it, read in one
// transaction (JobForSeal): its chain entry, if chained, and every row of its record.
type SealRead struct {
	Entry   record.ChainEntry
	Chained bool
	Rows    record.JobRows
}

// JobForSeal reads the job's chain entry and every row of its record (what ChainEntry, Job,
// Transitions, Pods, LogObjects and Gaps return) in one read-only transaction, from one snapshot.
// ErrNotFound if the job has no row.
func (d *DB) JobForSeal(ctx context.Context, uid string) (out SealRead, err error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return SealRead{}, fmt.Errorf("read job %s for its seal: %w", uid, translate(err))
	}
	defer tx.Rollback() //nolint:errcheck // read only: nothing to keep
	q := d.prepared(tx)
	out.Entry, err = scanChainEntry(q.QueryRowContext(ctx, `SELECT `+chainColumns+` FROM audit_chain WHERE job_uid = $1`, uid))
	switch {
	case err == nil:
		out.Chained = true
	case !errors.Is(err, sql.ErrNoRows):
		return SealRead{}, fmt.Errorf("read job %s for its seal: chain entry: %w", uid, d.check(translate(err)))
	}
	if out.Rows, err = jobRows(ctx, q, uid); err != nil {
		return SealRead{}, fmt.Errorf("read job %s for its seal: %w", uid, d.check(err))
	}
	return out, nil
}

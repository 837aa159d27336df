package db

import (
	"context"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/jobvault/jobvault/pkg/record"
)

// RecordTransitions records phase transitions of a job, each once: a transition already recorded
// under the same (phase, time) is skipped, so the full list of status.conditions can be passed on
// every reconcile. Returns how many were new; each new one is announced on NotifyChannel when the
// write commits. The job row must exist (ErrNotFound otherwise). All or nothing.
func (d *DB) RecordTransitions(ctx context.Context, jobUID string, ts []record.Transition) (inserted int, err error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return recordTransitions(ctx, d.db, jobUID, ts)
}

// recordTransitions is RecordTransitions on the pool or in a transaction.
func recordTransitions(ctx context.Context, q querier, jobUID string, ts []record.Transition) (inserted int, err error) {
	if len(ts) == 0 {
		return 0, nil
	}
	var (
		problems                                              []string
		phases, times, reasons, messages, rvs, observed, srcs pq.StringArray
	)
	for i, t := range ts {
		if t.Phase == "" {
			problems = append(problems, fmt.Sprintf("transition %d: Phase is empty", i))
		}
		if t.Time.IsZero() {
			problems = append(problems, fmt.Sprintf("transition %d: Time is zero", i))
		}
		if t.Source != record.SourceCondition && t.Source != record.SourceObserved {
			problems = append(problems, fmt.Sprintf("transition %d: Source %q is not one of condition, observed", i, t.Source))
		}
		obs := ""
		if !t.ObservedAt.IsZero() {
			obs = t.ObservedAt.UTC().Format(time.RFC3339Nano)
		}
		phases = append(phases, t.Phase)
		times = append(times, t.Time.UTC().Format(time.RFC3339Nano))
		reasons = append(reasons, t.Reason)
		messages = append(messages, t.Message)
		rvs = append(rvs, t.ResourceVersion)
		observed = append(observed, obs)
		srcs = append(srcs, string(t.Source))
	}
	if jobUID == "" {
		problems = append(problems, "job UID is empty")
	}
	if err := invalid("transitions", problems); err != nil {
		return 0, fmt.Errorf("record transitions of job %s: %w", jobUID, err)
	}
	// One statement: atomic, one round trip; inserted in time order so ids and notifications
	// follow the job's history.
	res, err := q.ExecContext(ctx, `
INSERT INTO job_transitions (job_uid, phase, transition_time, reason, message, resource_version, observed_at, source)
SELECT $1, t.phase, t.transition_time::timestamptz, t.reason, t.message, t.resource_version,
       COALESCE(NULLIF(t.observed_at, '')::timestamptz, now()), t.source
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
     AS t(phase, transition_time, reason, message, resource_version, observed_at, source)
ORDER BY t.transition_time::timestamptz, t.phase
ON CONFLICT (job_uid, phase, transition_time) DO NOTHING`,
		jobUID, phases, times, reasons, messages, rvs, observed, srcs)
	if err != nil {
		return 0, fmt.Errorf("record transitions of job %s: %w", jobUID, translate(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("record transitions of job %s: %w", jobUID, err)
	}
	return int(n), nil
}

// Transitions returns the recorded transitions of a job in time order (empty, not an error, for an
// unknown job).
func (d *DB) Transitions(ctx context.Context, jobUID string) ([]record.Transition, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return getTransitions(ctx, d.db, jobUID)
}

func getTransitions(ctx context.Context, q querier, jobUID string) ([]record.Transition, error) {
	rows, err := q.QueryContext(ctx, `
SELECT id, phase, transition_time, reason, message, resource_version, observed_at, source
FROM job_transitions WHERE job_uid = $1 ORDER BY transition_time, id`, jobUID)
	if err != nil {
		return nil, fmt.Errorf("get transitions of job %s: %w", jobUID, translate(err))
	}
	defer rows.Close()
	var ts []record.Transition
	for rows.Next() {
		var (
			t   record.Transition
			src string
		)
		if err := rows.Scan(&t.ID, &t.Phase, &t.Time, &t.Reason, &t.Message, &t.ResourceVersion, &t.ObservedAt, &src); err != nil {
			return nil, fmt.Errorf("get transitions of job %s: %w", jobUID, translate(err))
		}
		t.Time, t.ObservedAt, t.Source = t.Time.UTC(), t.ObservedAt.UTC(), record.TransitionSource(src)
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get transitions of job %s: %w", jobUID, translate(err))
	}
	return ts, nil
}

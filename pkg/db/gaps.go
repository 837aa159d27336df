package db

import (
	"context"
	"fmt"

	"github.com/jobvault/jobvault/pkg/record"
)

// PutGap records a missing part of a container run's log, once per (pod, container, run, After,
// Reason, Before): the same gap again changes nothing (its Detail is not compared), another gap
// starting at the same time is recorded beside it. The node agent's gaps go through AgentRecords,
// which fences them by the run's owner.
func (d *DB) PutGap(ctx context.Context, g record.Gap) error {
	return d.putGap(ctx, g, "")
}

// putGap records g; for the agent of node (not ""), only while it owns the run (see fence),
// ErrNotOwner otherwise.
func (d *DB) putGap(ctx context.Context, g record.Gap, node string) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if g.PodUID == "" || g.Container == "" || g.Run < 0 || g.Reason == "" {
		return fmt.Errorf("put gap of %s/%s/%d: %w gap: pod UID, container and reason are required", g.PodUID, g.Container, g.Run, ErrInvalid)
	}
	var before any
	if !g.Before.IsZero() {
		before = g.Before.UnixNano()
	}
	_, err := d.fencedInsert(ctx, node, `
INSERT INTO log_gaps (pod_uid, container, run, after_ns, before_ns, reason, detail)
SELECT $1, $2, $3, $4, $5, $6, $7 FROM owned
ON CONFLICT (pod_uid, container, run, after_ns, reason, (coalesce(before_ns, -1))) DO NOTHING
RETURNING 1`, g.PodUID, g.Container, g.Run, unixNano(g.After), before, string(g.Reason), g.Detail)
	if err != nil {
		return fmt.Errorf("put gap of %s/%s/%d: %w", g.PodUID, g.Container, g.Run, translate(err))
	}
	return nil
}

// runGaps returns the recorded gaps of one container run, in Gaps' order.
func runGaps(ctx context.Context, q querier, podUID, container string, run int32) ([]record.Gap, error) {
	return queryGaps(ctx, q, fmt.Sprintf("run %s/%s/%d", podUID, container, run), `
SELECT g.pod_uid, g.container, g.run, g.after_ns, g.before_ns, g.reason, g.detail
FROM log_gaps g
WHERE g.pod_uid = $1 AND g.container = $2 AND g.run = $3
ORDER BY g.after_ns, g.recorded_at, g.reason, coalesce(g.before_ns, -1)`, podUID, container, run)
}

// Gaps returns the recorded gaps of every pod of a job, by pod, container, run and time.
func (d *DB) Gaps(ctx context.Context, jobUID string) ([]record.Gap, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return getGaps(ctx, d.db, jobUID)
}

func getGaps(ctx context.Context, q querier, jobUID string) ([]record.Gap, error) {
	return queryGaps(ctx, q, "job "+jobUID, `
SELECT g.pod_uid, g.container, g.run, g.after_ns, g.before_ns, g.reason, g.detail
FROM log_gaps g JOIN pods p ON p.uid = g.pod_uid
WHERE p.job_uid = $1
ORDER BY p.created_at, g.pod_uid, g.container, g.run, g.after_ns, g.recorded_at, g.reason, coalesce(g.before_ns, -1)`, jobUID)
}

// queryGaps runs a query of gaps and scans its rows; of names them in errors.
func queryGaps(ctx context.Context, q querier, of, query string, args ...any) ([]record.Gap, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("get gaps of %s: %w", of, translate(err))
	}
	defer rows.Close()
	var out []record.Gap
	for rows.Next() {
		var (
			g      record.Gap
			after  int64
			before *int64
			reason string
		)
		if err := rows.Scan(&g.PodUID, &g.Container, &g.Run, &after, &before, &reason, &g.Detail); err != nil {
			return nil, fmt.Errorf("get gaps of %s: %w", of, translate(err))
		}
		g.After, g.Reason = fromUnixNano(after), record.GapReason(reason)
		if before != nil {
			g.Before = fromUnixNano(*before)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get gaps of %s: %w", of, translate(err))
	}
	return out, nil
}

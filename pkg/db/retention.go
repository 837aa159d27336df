package db

import (
	"context"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/jobvault/jobvault/pkg/record"
)

// PruneCandidates returns up to limit finalized, chained jobs of the cluster whose retain-until
// date is at or before now and that no legal hold holds: neither the job (jobs.legal_hold) nor its
// namespace, oldest retain-until date first. namespaceHolds maps each namespace that has a
// jobvault.io/legal-hold annotation to its value; the database decides which values hold
// (jobvault_legal_hold, migration 0016), as it does for jobs. A job recorded as pruned whose rows
// are still there (a prune interrupted after its record) is returned again, so the prune completes.
func (d *DB) PruneCandidates(ctx context.Context, cluster string, now time.Time, namespaceHolds map[string]string, limit int) ([]record.PruneCandidate, error) {
	namespaces, values := []string{}, []string{} // not NULL, for unnest
	for ns, v := range namespaceHolds {
		namespaces, values = append(namespaces, ns), append(values, v)
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT j.namespace, j.retain_until,
    c.cluster, c.seq, c.job_uid, c.manifest_key, c.manifest_sha256, c.prev_sha256, c.record_digest, c.manifest, c.at
FROM jobs j JOIN audit_chain c ON c.job_uid = j.uid
WHERE j.cluster = $1 AND j.archive_state <> 'pending' AND j.retain_until <= $2 AND NOT j.legal_hold
  AND NOT EXISTS (SELECT FROM unnest($3::text[], $4::text[]) AS h(namespace, value)
                  WHERE h.namespace = j.namespace AND jobvault_legal_hold(h.value))
ORDER BY j.retain_until, j.uid LIMIT $5`, cluster, now.UTC(), pq.StringArray(namespaces), pq.StringArray(values), limit)
	if err != nil {
		return nil, fmt.Errorf("list prune candidates: %w", translate(err))
	}
	defer rows.Close()
	var out []record.PruneCandidate
	for rows.Next() {
		var c record.PruneCandidate
		e := &c.Entry
		if err := rows.Scan(&c.Namespace, &c.RetainUntil, &e.Cluster, &e.Seq, &e.JobUID, &e.ManifestKey, &e.ManifestSHA256,
			&e.PrevSHA256, &e.RecordDigest, &e.Manifest, &e.At); err != nil {
			return nil, fmt.Errorf("list prune candidates: %w", translate(err))
		}
		c.RetainUntil, e.At = c.RetainUntil.UTC(), e.At.UTC()
		out = append(out, c)
	}
	return out, translate(rows.Err())
}

// RecordPrunes records that the pruner deletes these jobs, before it deletes anything; a record
// already there stays as it is. The table refuses a prune dated before its retain-until date.
func (d *DB) RecordPrunes(ctx context.Context, prunes []record.Prune) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record prunes: %w", translate(err))
	}
	defer func() { _ = tx.Rollback() }()
	for _, p := range prunes {
		if _, err := tx.ExecContext(ctx, `INSERT INTO audit_prunes (cluster, seq, job_uid, manifest_sha256, retain_until, policy, objects, pruned_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (job_uid) DO NOTHING`,
			p.Cluster, p.Seq, p.JobUID, p.ManifestSHA256, p.RetainUntil.UTC(), p.Policy, pq.StringArray(p.Objects), p.PrunedAt.UTC()); err != nil {
			return fmt.Errorf("record prune of job %s: %w", p.JobUID, translate(err))
		}
	}
	return translatef("record prunes", tx.Commit())
}

// DeletePrunedRows deletes the rows of the given jobs (job, transitions, pods, logs, gaps,
// segments) in one transaction, as the retention pruner (SET LOCAL jobvault.prune = 'on', which
// the append-only triggers of migration 0005 require). Only jobs recorded in audit_prunes and not
// held meanwhile are deleted; it returns how many job rows went.
func (d *DB) DeletePrunedRows(ctx context.Context, jobUIDs []string) (int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("delete pruned rows: %w", translate(err))
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL jobvault.prune = 'on'`); err != nil {
		return 0, fmt.Errorf("delete pruned rows: %w", translate(err))
	}
	// Pods first (their logs, gaps and segments cascade), then jobs (transitions cascade).
	res, err := tx.ExecContext(ctx, `
WITH pruned AS (
    SELECT j.uid FROM jobs j JOIN audit_prunes p ON p.job_uid = j.uid
    WHERE j.uid = ANY($1) AND NOT j.legal_hold
    FOR UPDATE OF j
), gone_pods AS (
    DELETE FROM pods WHERE job_uid IN (SELECT uid FROM pruned)
)
DELETE FROM jobs WHERE uid IN (SELECT uid FROM pruned)`, pq.StringArray(jobUIDs))
	if err != nil {
		return 0, fmt.Errorf("delete pruned rows: %w", translate(err))
	}
	n, _ := res.RowsAffected()
	return n, translatef("delete pruned rows", tx.Commit())
}

// Prunes returns the cluster's prune records with from ≤ seq ≤ to, by seq.
func (d *DB) Prunes(ctx context.Context, cluster string, from, to int64) (map[int64]record.Prune, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT cluster, seq, job_uid, manifest_sha256, retain_until, policy, objects, pruned_at
FROM audit_prunes WHERE cluster = $1 AND seq >= $2 AND seq <= $3`, cluster, from, to)
	if err != nil {
		return nil, fmt.Errorf("list prunes: %w", translate(err))
	}
	defer rows.Close()
	out := map[int64]record.Prune{}
	for rows.Next() {
		var (
			p       record.Prune
			objects pq.StringArray
		)
		if err := rows.Scan(&p.Cluster, &p.Seq, &p.JobUID, &p.ManifestSHA256, &p.RetainUntil, &p.Policy, &objects, &p.PrunedAt); err != nil {
			return nil, fmt.Errorf("list prunes: %w", translate(err))
		}
		p.Objects, p.RetainUntil, p.PrunedAt = objects, p.RetainUntil.UTC(), p.PrunedAt.UTC()
		out[p.Seq] = p
	}
	return out, translate(rows.Err())
}

// translatef wraps a non-nil error with what failed.
func translatef(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, translate(err))
	}
	return nil
}

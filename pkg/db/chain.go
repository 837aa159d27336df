package db

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

const chainColumns = `cluster, seq, job_uid, manifest_key, manifest_sha256, prev_sha256, record_digest, manifest, at`

func scanChainEntry(row interface{ Scan(...any) error }) (record.ChainEntry, error) {
	var e record.ChainEntry
	err := row.Scan(&e.Cluster, &e.Seq, &e.JobUID, &e.ManifestKey, &e.ManifestSHA256, &e.PrevSHA256, &e.RecordDigest, &e.Manifest, &e.At)
	e.At = e.At.UTC()
	return e, err
}

// FinalizeJob marks the job finalized (as MarkJobArchived does) and appends it to its cluster's
// audit chain, in one transaction: the entry takes the next sequence number from the cluster's
// head row, locked until commit, so numbers have no gaps whatever fails (a rolled-back
// transaction takes none) and finalizations of one cluster are serialized on that lock. seal makes
// the manifest once the number and previous hash are known; the entry keeps its bytes.
//
// Idempotent: a job already in the chain gets its entry back, unchanged, with Appended false.
// ErrNotFound if there is no row for the job.
func (d *DB) FinalizeJob(ctx context.Context, f record.Finalization, seal record.Seal) (record.Finalized, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if f.JobUID == "" || f.ManifestKey == "" || !sha256Hex.MatchString(f.RecordDigest) {
		return record.Finalized{}, fmt.Errorf("finalize job %s: %w finalization: job UID, manifest key and a sha256 record digest are required", f.JobUID, ErrInvalid)
	}
	out, err := d.appendChain(ctx, f, seal)
	err = d.check(err)
	if errors.Is(err, ErrConflict) {
		// The job is in the chain already (a repeated finalization, or a concurrent one that
		// committed first): the insert failed and rolled everything back, its number included.
		e, found, cerr := d.ChainEntry(ctx, f.JobUID)
		if cerr != nil {
			return record.Finalized{}, fmt.Errorf("finalize job %s: %w", f.JobUID, cerr)
		}
		if !found {
			// The number, not the job, was taken: the head row disagrees with the chain.
			return record.Finalized{}, fmt.Errorf("finalize job %s: %w", f.JobUID, err)
		}
		return record.Finalized{Entry: e}, nil
	}
	if err != nil {
		return record.Finalized{}, fmt.Errorf("finalize job %s: %w", f.JobUID, err)
	}
	return out, nil
}

func (d *DB) appendChain(ctx context.Context, f record.Finalization, seal record.Seal) (out record.Finalized, err error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return record.Finalized{}, translate(err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	q := d.prepared(tx)
	if f.Check != nil {
		if err = checkRows(ctx, q, f); err != nil {
			return record.Finalized{}, err
		}
	}
	var exists bool
	err = q.QueryRowContext(ctx, markJobArchivedSQL,
		f.JobUID, nullString(f.Location), nullTimeValue(f.ArchivedAt), f.ReleaseReason).Scan(&exists)
	if err != nil {
		return record.Finalized{}, translate(err)
	}
	if !exists {
		return record.Finalized{}, ErrNotFound
	}
	if !f.RetainUntil.IsZero() {
		// Once set, the date only moves later (migration 0007's trigger): a repeated finalization
		// cannot shorten it.
		if _, err = q.ExecContext(ctx, `UPDATE jobs SET retain_until = $2 WHERE uid = $1`, f.JobUID, f.RetainUntil.UTC()); err != nil {
			return record.Finalized{}, translate(err)
		}
	}
	// The locked section: from here to the commit, every finalization of the cluster waits.
	locked := time.Now()
	head, err := lockHead(ctx, q, f.Cluster)
	if err != nil {
		return record.Finalized{}, err
	}
	e := record.ChainEntry{Cluster: f.Cluster, Seq: head.Seq + 1, JobUID: f.JobUID, ManifestKey: f.ManifestKey, PrevSHA256: head.ManifestSHA256, RecordDigest: f.RecordDigest}
	if e.Manifest, err = seal(e.Seq, e.PrevSHA256); err != nil {
		return record.Finalized{}, fmt.Errorf("seal manifest: %w", err)
	}
	sum := sha256.Sum256(e.Manifest)
	e.ManifestSHA256 = hex.EncodeToString(sum[:])
	err = q.QueryRowContext(ctx, `
WITH head AS (
    UPDATE audit_chain_heads SET seq = $2, manifest_sha256 = $5, updated_at = now() WHERE cluster = $1
)
INSERT INTO audit_chain (cluster, seq, job_uid, manifest_key, manifest_sha256, prev_sha256, record_digest, manifest)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING at`, e.Cluster, e.Seq, e.JobUID, e.ManifestKey, e.ManifestSHA256, e.PrevSHA256, e.RecordDigest, e.Manifest).Scan(&e.At)
	if err != nil {
		return record.Finalized{}, translate(err)
	}
	if err := tx.Commit(); err != nil {
		return record.Finalized{}, translate(err)
	}
	e.At = e.At.UTC()
	return record.Finalized{Entry: e, Appended: true, LockHeld: time.Since(locked)}, nil
}

// lockHead locks the cluster's head row until the transaction ends, and returns it; the cluster's
// first finalization inserts it. Only then: an INSERT ... ON CONFLICT DO NOTHING that finds the row
// waits for the transaction that updated it to end (Postgres 15, measured: behind a transaction
// that updated the row and slept, it waited out the sleep; behind one that only locked it, it did
// not). Run at every finalization before its job's marking, as it was, it made that marking wait
// for the finalization ahead to commit, and so join the serialized section.
func lockHead(ctx context.Context, q querier, cluster string) (record.ChainHead, error) {
	const lock = `SELECT seq, manifest_sha256 FROM audit_chain_heads WHERE cluster = $1 FOR UPDATE`
	var head record.ChainHead
	err := q.QueryRowContext(ctx, lock, cluster).Scan(&head.Seq, &head.ManifestSHA256)
	if errors.Is(err, sql.ErrNoRows) {
		// Two first finalizations: the second's insert waits for the first's commit, and does
		// nothing; the lock then sees the row the first committed.
		if _, err = q.ExecContext(ctx, `INSERT INTO audit_chain_heads (cluster, seq, manifest_sha256) VALUES ($1, 0, '') ON CONFLICT DO NOTHING`, cluster); err == nil {
			err = q.QueryRowContext(ctx, lock, cluster).Scan(&head.Seq, &head.ManifestSHA256)
		}
	}
	if err != nil {
		return record.ChainHead{}, translate(err)
	}
	return head, nil
}

// checkRows locks the job's row and its pods' rows until the transaction ends, then reads the
// job's rows and gives them to f.Check. The locks keep what f.Check is given what the transaction
// commits: a transition (its foreign key takes a share lock on the job row), a change to a pod's
// row, or a log or gap of a pod (a share lock on the pod row) waits for the commit, and each read
// (at READ COMMITTED) sees everything committed before the locks were granted.
func checkRows(ctx context.Context, tx querier, f record.Finalization) error {
	var (
		found bool
		pods  int
	)
	// Counting the pods fetches, and so locks, every one of them.
	if err := tx.QueryRowContext(ctx, `
WITH job AS (SELECT 1 FROM jobs WHERE uid = $1 FOR UPDATE),
     pods AS (SELECT 1 FROM pods WHERE job_uid = $1 FOR UPDATE)
SELECT EXISTS (SELECT 1 FROM job), (SELECT count(*) FROM pods)`, f.JobUID).Scan(&found, &pods); err != nil {
		return translate(err)
	}
	if !found {
		return ErrNotFound
	}
	rows, err := jobRows(ctx, tx, f.JobUID)
	if err != nil {
		return err
	}
	return f.Check(rows)
}

// jobRows reads every row of a job's record with q.
func jobRows(ctx context.Context, q querier, uid string) (record.JobRows, error) {
	var (
		rows record.JobRows
		err  error
	)
	if rows.Job, err = getJob(ctx, q, uid); err != nil {
		return rows, err
	}
	if rows.Transitions, err = getTransitions(ctx, q, uid); err != nil {
		return rows, err
	}
	if rows.Pods, err = getPods(ctx, q, uid); err != nil {
		return rows, err
	}
	if rows.Logs, err = getLogObjects(ctx, q, uid); err != nil {
		return rows, err
	}
	rows.Gaps, err = getGaps(ctx, q, uid)
	return rows, err
}

// ChainEntry returns the chain entry of a job, and false if it has none.
func (d *DB) ChainEntry(ctx context.Context, jobUID string) (record.ChainEntry, bool, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	e, err := scanChainEntry(d.db.QueryRowContext(ctx, `SELECT `+chainColumns+` FROM audit_chain WHERE job_uid = $1`, jobUID))
	if errors.Is(err, sql.ErrNoRows) {
		return record.ChainEntry{}, false, nil
	}
	if err != nil {
		return record.ChainEntry{}, false, fmt.Errorf("get chain entry of job %s: %w", jobUID, translate(err))
	}
	return e, true, nil
}

// chainPage is the number of entries ChainEntries reads per query.
const chainPage = 500

// ChainEntries calls fn for each entry of the cluster's chain with from ≤ seq ≤ to, in sequence
// order, a page at a time.
func (d *DB) ChainEntries(ctx context.Context, cluster string, from, to int64, fn func(record.ChainEntry) error) error {
	after := from - 1
	for {
		page, err := d.chainPage(ctx, cluster, after, to)
		if err != nil {
			return fmt.Errorf("list chain of cluster %q: %w", cluster, err)
		}
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
			after = e.Seq
		}
		if len(page) < chainPage {
			return nil
		}
	}
}

func (d *DB) chainPage(ctx context.Context, cluster string, after, to int64) ([]record.ChainEntry, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT `+chainColumns+` FROM audit_chain
WHERE cluster = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4`, cluster, after, to, chainPage)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []record.ChainEntry
	for rows.Next() {
		e, err := scanChainEntry(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, e)
	}
	return out, translate(rows.Err())
}

// ChainHead returns the last entry of the cluster's chain (Seq 0 if it has none).
func (d *DB) ChainHead(ctx context.Context, cluster string) (record.ChainHead, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	h := record.ChainHead{Cluster: cluster}
	err := d.db.QueryRowContext(ctx, `SELECT seq, manifest_sha256 FROM audit_chain_heads WHERE cluster = $1`, cluster).Scan(&h.Seq, &h.ManifestSHA256)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return record.ChainHead{}, fmt.Errorf("get chain head of cluster %q: %w", cluster, translate(err))
	}
	return h, nil
}

// UnchainedJobs returns the UIDs of the cluster's jobs finalized (archived or released) at or after
// since that have no chain entry: with the chain in place, every finalization has one.
func (d *DB) UnchainedJobs(ctx context.Context, cluster string, since time.Time) ([]string, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT j.uid FROM jobs j
WHERE j.cluster = $1 AND j.archive_state <> 'pending' AND j.archived_at >= $2
  AND NOT EXISTS (SELECT 1 FROM audit_chain c WHERE c.job_uid = j.uid)
ORDER BY j.archived_at, j.uid`, cluster, since.UTC())
	if err != nil {
		return nil, fmt.Errorf("list unchained jobs: %w", translate(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var uid string
		if err := rows.Scan(&uid); err != nil {
			return nil, fmt.Errorf("list unchained jobs: %w", translate(err))
		}
		out = append(out, uid)
	}
	return out, translate(rows.Err())
}

// PutSignedDigest records a signed digest of a chain head; a repeated write changes nothing.
func (d *DB) PutSignedDigest(ctx context.Context, s record.SignedDigest) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	_, err := d.db.ExecContext(ctx, `INSERT INTO audit_digests (cluster, at, seq, head_sha256, prev_digest, digest_sha256, object_key, document)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
		s.Cluster, s.At.UTC(), s.Seq, s.HeadSHA256, s.PrevDigest, s.DigestSHA256, s.ObjectKey, s.Document)
	if err != nil {
		return fmt.Errorf("put signed digest of cluster %q at %s: %w", s.Cluster, s.At, translate(err))
	}
	return nil
}

// SignedDigests returns the cluster's signed digests, oldest first.
func (d *DB) SignedDigests(ctx context.Context, cluster string) ([]record.SignedDigest, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT cluster, at, seq, head_sha256, prev_digest, digest_sha256, object_key, document
FROM audit_digests WHERE cluster = $1 ORDER BY at`, cluster)
	if err != nil {
		return nil, fmt.Errorf("list signed digests: %w", translate(err))
	}
	defer rows.Close()
	var out []record.SignedDigest
	for rows.Next() {
		var s record.SignedDigest
		if err := rows.Scan(&s.Cluster, &s.At, &s.Seq, &s.HeadSHA256, &s.PrevDigest, &s.DigestSHA256, &s.ObjectKey, &s.Document); err != nil {
			return nil, fmt.Errorf("list signed digests: %w", translate(err))
		}
		s.At = s.At.UTC()
		out = append(out, s)
	}
	return out, translate(rows.Err())
}

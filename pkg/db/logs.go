package db

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"

	"github.com/jobvault/jobvault/pkg/record"
)

var (
	sha256Hex        = regexp.MustCompile(`^[0-9a-f]{64}$`)
	previousInstance = regexp.MustCompile(`^previous-[0-9]+$`)
)

// PutLogObject records the outcome of archiving one container log, keyed by (PodUID, Container,
// Instance). The pod row must exist (ErrNotFound otherwise), and its job not be finalized
// (ErrFinalized: its record is sealed).
//
// A stored row is final: a later unavailable write for it is ignored (and succeeds), the same
// stored write again changes nothing, and a stored write with other values fails with
// ErrAppendOnly (migration 0005's trigger) and changes nothing. An unavailable row is upgraded by
// a later stored write.
//
// StoredSHA256, the hash the store checked at a whole write, is recorded with the row that makes
// the log stored, never added later: a stored write of the same log that does not bring the same
// StoredSHA256 (a second pass found the object locked, or wrote it again) drops it, so that the
// seal reads the object back rather than trust either write (migration 0017). (Callers avoid re-uploads by checking PodLogObjects first; write the row
// only after the upload is durable. A log assembled again from the same segments after a crash
// has the same key, sizes and hash.)
func (d *DB) PutLogObject(ctx context.Context, l record.LogObject) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return putLogObject(ctx, d.db, l)
}

// putLogObject is PutLogObject on the pool or in a transaction.
func putLogObject(ctx context.Context, q querier, l record.LogObject) error {
	if err := validateLogObject(l); err != nil {
		return fmt.Errorf("put log object %s: %w", l, err)
	}
	var open bool
	err := q.QueryRowContext(ctx, `
WITH open AS (`+podJobOpen+`),
ins AS (
INSERT INTO log_objects (pod_uid, container, container_type, instance, object_key, bytes, stored_bytes, sha256, state, reason, stored_sha256)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM open WHERE ok
ON CONFLICT (pod_uid, container, instance) DO UPDATE SET
    container_type = EXCLUDED.container_type,
    object_key     = EXCLUDED.object_key,
    bytes          = EXCLUDED.bytes,
    stored_bytes   = EXCLUDED.stored_bytes,
    sha256         = EXCLUDED.sha256,
    state          = EXCLUDED.state,
    reason         = EXCLUDED.reason,
    stored_sha256  = CASE WHEN log_objects.state = 'stored' AND log_objects.stored_sha256 IS DISTINCT FROM EXCLUDED.stored_sha256
                          THEN NULL ELSE EXCLUDED.stored_sha256 END
WHERE log_objects.state <> 'stored' OR EXCLUDED.state = 'stored'
RETURNING 1)
SELECT ok FROM open`,
		l.PodUID, l.Container, string(l.ContainerType), l.Instance, nullString(l.ObjectKey),
		l.Bytes, l.StoredBytes, nullString(l.SHA256), string(l.State), nullString(l.Reason), nullString(l.StoredSHA256)).Scan(&open)
	if err == nil && !open {
		err = ErrFinalized
	}
	if err != nil {
		return fmt.Errorf("put log object %s: %w", l, translate(err))
	}
	return nil
}

func validateLogObject(l record.LogObject) error {
	problems := emptyFields("PodUID", l.PodUID, "Container", l.Container)
	switch l.ContainerType {
	case record.ContainerInit, record.ContainerRegular, record.ContainerEphemeral:
	default:
		problems = append(problems, fmt.Sprintf("ContainerType %q is not one of init, regular, ephemeral", l.ContainerType))
	}
	if l.Instance != record.InstanceCurrent && !previousInstance.MatchString(l.Instance) {
		problems = append(problems, fmt.Sprintf("Instance %q is neither %q nor previous-<restartCount>", l.Instance, record.InstanceCurrent))
	}
	if l.Bytes < 0 || l.StoredBytes < 0 {
		problems = append(problems, "Bytes and StoredBytes must not be negative")
	}
	if l.SHA256 != "" && !sha256Hex.MatchString(l.SHA256) {
		problems = append(problems, fmt.Sprintf("SHA256 %q is not 64 lower-case hex digits", l.SHA256))
	}
	if l.StoredSHA256 != "" && !sha256Hex.MatchString(l.StoredSHA256) {
		problems = append(problems, fmt.Sprintf("StoredSHA256 %q is not 64 lower-case hex digits", l.StoredSHA256))
	}
	if l.StoredSHA256 != "" && l.State != record.LogStored {
		problems = append(problems, "StoredSHA256 is set for a log not stored")
	}
	switch l.State {
	case record.LogStored:
		if l.ObjectKey == "" {
			problems = append(problems, "ObjectKey is empty for a stored log")
		}
		if l.SHA256 == "" {
			problems = append(problems, "SHA256 is empty for a stored log")
		}
	case record.LogUnavailable:
		if l.Reason == "" {
			problems = append(problems, "Reason is empty for an unavailable log")
		}
	default:
		problems = append(problems, fmt.Sprintf("State %q is not one of stored, unavailable", l.State))
	}
	return invalid("log object", problems)
}

const logObjectColumns = `lo.pod_uid, lo.container, lo.container_type, lo.instance, lo.object_key, lo.bytes,
    lo.stored_bytes, lo.sha256, lo.state, lo.reason, lo.created_at, lo.updated_at, lo.stored_sha256`

// logObjectOrder lists init, regular, then ephemeral containers, each by name, then its runs in
// order: previous-1, previous-2, …, current.
const logObjectOrder = `CASE lo.container_type WHEN 'init' THEN 0 WHEN 'regular' THEN 1 ELSE 2 END,
    lo.container, lo.instance = 'current', NULLIF(substring(lo.instance FROM '[0-9]+$'), '')::bigint`

// LogObjects returns the log objects of every recorded pod of a job, by pod creation time.
func (d *DB) LogObjects(ctx context.Context, jobUID string) ([]record.LogObject, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return getLogObjects(ctx, d.db, jobUID)
}

func getLogObjects(ctx context.Context, q querier, jobUID string) ([]record.LogObject, error) {
	ls, err := queryLogObjects(ctx, q, `SELECT `+logObjectColumns+`
FROM log_objects lo JOIN pods p ON p.uid = lo.pod_uid
WHERE p.job_uid = $1
ORDER BY p.created_at, p.uid, `+logObjectOrder, jobUID)
	if err != nil {
		return nil, fmt.Errorf("get log objects of job %s: %w", jobUID, err)
	}
	return ls, nil
}

// PodLogObjects returns the log objects of one pod.
func (d *DB) PodLogObjects(ctx context.Context, podUID string) ([]record.LogObject, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	ls, err := queryLogObjects(ctx, d.db, `SELECT `+logObjectColumns+`
FROM log_objects lo WHERE lo.pod_uid = $1
ORDER BY `+logObjectOrder, podUID)
	if err != nil {
		return nil, fmt.Errorf("get log objects of pod %s: %w", podUID, err)
	}
	return ls, nil
}

func queryLogObjects(ctx context.Context, q querier, query string, args ...any) ([]record.LogObject, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var ls []record.LogObject
	for rows.Next() {
		var (
			l                record.LogObject
			ctype, state     string
			key, sha, reason sql.NullString
			storedSHA        sql.NullString
		)
		if err := rows.Scan(&l.PodUID, &l.Container, &ctype, &l.Instance, &key, &l.Bytes, &l.StoredBytes,
			&sha, &state, &reason, &l.CreatedAt, &l.UpdatedAt, &storedSHA); err != nil {
			return nil, translate(err)
		}
		l.ContainerType, l.State = record.ContainerType(ctype), record.LogState(state)
		l.ObjectKey, l.SHA256, l.Reason, l.StoredSHA256 = key.String, sha.String, reason.String, storedSHA.String
		l.CreatedAt, l.UpdatedAt = l.CreatedAt.UTC(), l.UpdatedAt.UTC()
		ls = append(ls, l)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	return ls, nil
}

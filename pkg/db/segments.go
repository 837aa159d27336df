package db

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// PutSegment records a captured segment, once: the same segment recorded again (a flush retried
// after its commit's reply was lost) succeeds and changes nothing; another segment under the same
// (pod, container, run, seq) fails with ErrSegmentConflict and changes nothing. The pod row must
// exist, and its job not be finalized (ErrFinalized). The segment is recorded as s.Source's (CapturedByAPI when empty); the node agent's
// writes go through AgentRecords, which fences them by the run's owner.
func (d *DB) PutSegment(ctx context.Context, s record.Segment) error {
	return d.putSegment(ctx, s, "")
}

// putSegment records s; for the agent of node (not ""), only while it owns the run (see fence),
// ErrNotOwner otherwise.
func (d *DB) putSegment(ctx context.Context, s record.Segment, node string) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if s.PodUID == "" || s.Container == "" || s.ObjectKey == "" || s.Run < 0 || s.Seq < 0 || len(s.HashState) == 0 {
		return fmt.Errorf("put segment %s/%s/%d/%d: %w segment: pod UID, container, key and hash state are required, run and seq not negative",
			s.PodUID, s.Container, s.Run, s.Seq, ErrInvalid)
	}
	inserted, err := d.fencedInsert(ctx, node, `
INSERT INTO log_segments (pod_uid, container, run, seq, object_key, stored_bytes, bytes, total_bytes,
                          last_time_ns, last_time_lines, hash_state, source, streams, source_position)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14 FROM owned
ON CONFLICT (pod_uid, container, run, seq) DO NOTHING
RETURNING 1`, s.PodUID, s.Container, s.Run, s.Seq, s.ObjectKey, s.StoredBytes, s.Bytes, s.TotalBytes,
		unixNano(s.LastTime), s.LastTimeLines, s.HashState, cmp.Or(s.Source, record.CapturedByAPI), s.Streams, s.SourcePosition)
	if err == nil && !inserted {
		// Rare (a retried flush): a second round trip compares the row already there.
		var same bool
		if same, err = d.sameSegment(ctx, s); err == nil && !same {
			err = ErrSegmentConflict
		}
	}
	if err != nil {
		return fmt.Errorf("put segment %s/%s/%d/%d: %w", s.PodUID, s.Container, s.Run, s.Seq, translate(err))
	}
	return nil
}

// sameSegment reports whether s is the segment recorded under its number.
func (d *DB) sameSegment(ctx context.Context, s record.Segment) (bool, error) {
	var same bool
	err := d.db.QueryRowContext(ctx, `
SELECT (object_key, stored_bytes, bytes, total_bytes, last_time_ns, last_time_lines, hash_state, source, streams, source_position)
       IS NOT DISTINCT FROM ($5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
FROM log_segments WHERE pod_uid = $1 AND container = $2 AND run = $3 AND seq = $4`,
		s.PodUID, s.Container, s.Run, s.Seq, s.ObjectKey, s.StoredBytes, s.Bytes, s.TotalBytes,
		unixNano(s.LastTime), s.LastTimeLines, s.HashState, cmp.Or(s.Source, record.CapturedByAPI), s.Streams, s.SourcePosition).Scan(&same)
	return same, err
}

// Segments returns the recorded segments of a container run, in order.
func (d *DB) Segments(ctx context.Context, podUID, container string, run int32) ([]record.Segment, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return getSegments(ctx, d.db, podUID, container, run)
}

// getSegments is Segments on the pool or in a transaction.
func getSegments(ctx context.Context, q querier, podUID, container string, run int32) ([]record.Segment, error) {
	rows, err := q.QueryContext(ctx, `
SELECT seq, object_key, stored_bytes, bytes, total_bytes, last_time_ns, last_time_lines, hash_state, source, streams, source_position
FROM log_segments WHERE pod_uid = $1 AND container = $2 AND run = $3 ORDER BY seq`, podUID, container, run)
	if err != nil {
		return nil, fmt.Errorf("get segments of %s/%s/%d: %w", podUID, container, run, translate(err))
	}
	defer rows.Close()
	var out []record.Segment
	for rows.Next() {
		s := record.Segment{PodUID: podUID, Container: container, Run: run}
		var last int64
		if err := rows.Scan(&s.Seq, &s.ObjectKey, &s.StoredBytes, &s.Bytes, &s.TotalBytes, &last, &s.LastTimeLines, &s.HashState,
			&s.Source, &s.Streams, &s.SourcePosition); err != nil {
			return nil, fmt.Errorf("get segments of %s/%s/%d: %w", podUID, container, run, translate(err))
		}
		s.LastTime = fromUnixNano(last)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get segments of %s/%s/%d: %w", podUID, container, run, translate(err))
	}
	return out, nil
}

// DeleteSegments forgets the segments of a container run, once its log object is recorded.
func (d *DB) DeleteSegments(ctx context.Context, podUID, container string, run int32) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if _, err := d.db.ExecContext(ctx, `DELETE FROM log_segments WHERE pod_uid = $1 AND container = $2 AND run = $3`,
		podUID, container, run); err != nil {
		return fmt.Errorf("delete segments of %s/%s/%d: %w", podUID, container, run, translate(err))
	}
	return nil
}

// unixNano is t in nanoseconds since the epoch, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

package db

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"
)

// Page sizes of ListJobs.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

const upsertJobSQL = `
INSERT INTO jobs (uid, cluster, namespace, name, queue, submitter, submitter_groups, admitted_at,
                  created_at, finished_at, phase, retry_count, labels, annotations, spec, status,
                  archive_state, archive_location, archived_at, release_reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
ON CONFLICT (uid) DO UPDATE SET
    cluster          = COALESCE(NULLIF(EXCLUDED.cluster, ''), jobs.cluster),
    namespace        = EXCLUDED.namespace,
    name             = EXCLUDED.name,
    queue            = COALESCE(NULLIF(EXCLUDED.queue, ''), jobs.queue),
    -- First recorded value wins: the annotations they come from can be edited after admission.
    submitter        = COALESCE(jobs.submitter, EXCLUDED.submitter),
    submitter_groups = COALESCE(jobs.submitter_groups, EXCLUDED.submitter_groups),
    admitted_at      = COALESCE(jobs.admitted_at, EXCLUDED.admitted_at),
    -- A terminal phase is final; a non-terminal one arriving later comes from a stale cache, and so
    -- does the status that goes with it.
    phase = CASE
        WHEN EXCLUDED.phase = '' THEN jobs.phase
        WHEN jobvault_job_phase_is_terminal(jobs.phase) AND NOT jobvault_job_phase_is_terminal(EXCLUDED.phase) THEN jobs.phase
        ELSE EXCLUDED.phase END,
    status = CASE
        WHEN jobvault_job_phase_is_terminal(jobs.phase) AND NOT jobvault_job_phase_is_terminal(EXCLUDED.phase) THEN jobs.status
        ELSE COALESCE(EXCLUDED.status, jobs.status) END,
    finished_at = CASE
        WHEN jobvault_job_phase_is_terminal(jobs.phase) AND NOT jobvault_job_phase_is_terminal(EXCLUDED.phase) THEN jobs.finished_at
        ELSE COALESCE(EXCLUDED.finished_at, jobs.finished_at) END,
    retry_count      = GREATEST(jobs.retry_count, EXCLUDED.retry_count),
    labels           = EXCLUDED.labels,
    annotations      = EXCLUDED.annotations,
    spec             = COALESCE(EXCLUDED.spec, jobs.spec),
    -- The archive fields move once, from pending to archived or released.
    archive_state    = CASE WHEN jobs.archive_state = 'pending' THEN EXCLUDED.archive_state    ELSE jobs.archive_state END,
    archive_location = CASE WHEN jobs.archive_state = 'pending' THEN COALESCE(EXCLUDED.archive_location, jobs.archive_location) ELSE jobs.archive_location END,
    archived_at      = CASE WHEN jobs.archive_state = 'pending' THEN EXCLUDED.archived_at      ELSE jobs.archived_at END,
    release_reason   = CASE WHEN jobs.archive_state = 'pending' THEN EXCLUDED.release_reason   ELSE jobs.release_reason END`

// UpsertJob records a job, creating or updating the row keyed by j.UID. Idempotent: the same call
// twice leaves the row unchanged (updated_at included). See Job for which fields an update keeps.
func (d *DB) UpsertJob(ctx context.Context, j Job) error {
	if err := j.validate(); err != nil {
		return fmt.Errorf("upsert job %s: %w", j.UID, err)
	}
	labels, err := jsonMap(j.Labels)
	if err != nil {
		return fmt.Errorf("upsert job %s: labels: %w", j.UID, err)
	}
	annotations, err := jsonMap(j.Annotations)
	if err != nil {
		return fmt.Errorf("upsert job %s: annotations: %w", j.UID, err)
	}
	_, err = d.db.ExecContext(ctx, upsertJobSQL,
		j.UID, j.Cluster, j.Namespace, j.Name, j.Queue,
		nullString(j.Submitter), pq.StringArray(j.SubmitterGroups), nullTime(j.AdmittedAt),
		j.CreatedAt.UTC(), nullTime(j.FinishedAt), j.Phase, j.RetryCount,
		labels, annotations, rawJSON(j.Spec), rawJSON(j.Status),
		string(cmpOr(j.ArchiveState, ArchivePending)), nullString(j.ArchiveLocation), nullTime(j.ArchivedAt),
		nullString(j.ReleaseReason))
	if err != nil {
		return fmt.Errorf("upsert job %s: %w", j.UID, translate(err))
	}
	return nil
}

func (j Job) validate() error {
	var problems []string
	if j.UID == "" {
		problems = append(problems, "UID is empty")
	}
	if j.Namespace == "" {
		problems = append(problems, "Namespace is empty")
	}
	if j.Name == "" {
		problems = append(problems, "Name is empty")
	}
	if j.CreatedAt.IsZero() {
		problems = append(problems, "CreatedAt is zero")
	}
	if j.RetryCount < 0 {
		problems = append(problems, fmt.Sprintf("RetryCount %d is negative", j.RetryCount))
	}
	if len(j.Spec) > 0 && !json.Valid(j.Spec) {
		problems = append(problems, "Spec is not valid JSON")
	}
	if len(j.Status) > 0 && !json.Valid(j.Status) {
		problems = append(problems, "Status is not valid JSON")
	}
	problems = append(problems, archiveProblems(j.ArchiveState, j.ArchivedAt, j.ReleaseReason)...)
	return invalid("job", problems)
}

func archiveProblems(state ArchiveState, at *time.Time, reason string) []string {
	var problems []string
	switch {
	case state == "" || state == ArchivePending:
	case !state.valid():
		problems = append(problems, fmt.Sprintf("ArchiveState %q is not one of pending, archived, released", state))
	case at == nil:
		problems = append(problems, fmt.Sprintf("ArchivedAt is nil with ArchiveState %s", state))
	}
	if state == ArchiveReleased && reason == "" {
		problems = append(problems, "ReleaseReason is empty with ArchiveState released")
	}
	return problems
}

// MarkJobArchived records that a job's archive is complete (releaseReason empty: state archived) or
// that it was released without one (state released, with the reason), at time at (now if zero),
// with its archive location. Idempotent: once a job is archived or released, later calls change
// nothing and succeed. ErrNotFound if there is no row for jobUID.
func (d *DB) MarkJobArchived(ctx context.Context, jobUID, location string, at time.Time, releaseReason string) error {
	var exists bool
	err := d.db.QueryRowContext(ctx, `
WITH marked AS (
    UPDATE jobs SET
        archive_state    = CASE WHEN $4 = '' THEN 'archived' ELSE 'released' END,
        archive_location = COALESCE($2, archive_location),
        archived_at      = COALESCE($3, now()),
        release_reason   = NULLIF($4, '')
    WHERE uid = $1 AND archive_state = 'pending'
)
SELECT EXISTS (SELECT 1 FROM jobs WHERE uid = $1)`,
		jobUID, nullString(location), nullTimeValue(at), releaseReason).Scan(&exists)
	if err != nil {
		return fmt.Errorf("mark job %s archived: %w", jobUID, translate(err))
	}
	if !exists {
		return fmt.Errorf("mark job %s archived: %w", jobUID, ErrNotFound)
	}
	return nil
}

const jobColumns = `uid, cluster, namespace, name, queue, submitter, submitter_groups, admitted_at,
    created_at, finished_at, phase, retry_count, labels, annotations, spec, status,
    archive_state, archive_location, archived_at, release_reason, recorded_at, updated_at`

func scanJob(row interface{ Scan(...any) error }) (Job, error) {
	var (
		j                                 Job
		submitter, location, reason       sql.NullString
		groups                            pq.StringArray
		admitted, finished, archived      sql.NullTime
		labels, annotations, spec, status []byte
		archiveState                      string
	)
	err := row.Scan(&j.UID, &j.Cluster, &j.Namespace, &j.Name, &j.Queue, &submitter, &groups, &admitted,
		&j.CreatedAt, &finished, &j.Phase, &j.RetryCount, &labels, &annotations, &spec, &status,
		&archiveState, &location, &archived, &reason, &j.RecordedAt, &j.UpdatedAt)
	if err != nil {
		return Job{}, err
	}
	j.Submitter, j.ArchiveLocation, j.ReleaseReason = submitter.String, location.String, reason.String
	if groups != nil {
		j.SubmitterGroups = []string(groups)
	}
	j.AdmittedAt, j.FinishedAt, j.ArchivedAt = timePtr(admitted), timePtr(finished), timePtr(archived)
	j.CreatedAt, j.RecordedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.RecordedAt.UTC(), j.UpdatedAt.UTC()
	j.ArchiveState = ArchiveState(archiveState)
	if j.Labels, err = decodeMap(labels); err != nil {
		return Job{}, fmt.Errorf("decode labels: %w", err)
	}
	if j.Annotations, err = decodeMap(annotations); err != nil {
		return Job{}, fmt.Errorf("decode annotations: %w", err)
	}
	if spec != nil {
		j.Spec = json.RawMessage(spec)
	}
	if status != nil {
		j.Status = json.RawMessage(status)
	}
	return j, nil
}

// Job returns the job recorded under uid, or an error matching ErrNotFound.
func (d *DB) Job(ctx context.Context, uid string) (Job, error) {
	j, err := scanJob(d.db.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE uid = $1`, uid))
	if err != nil {
		return Job{}, fmt.Errorf("get job %s: %w", uid, translate(err))
	}
	return j, nil
}

// JobFilter selects jobs for ListJobs. Zero fields do not filter.
type JobFilter struct {
	Cluster   string
	Namespace string
	Submitter string
	Phase     string
	// ArchiveState selects jobs in that archive state.
	ArchiveState ArchiveState
	// CreatedFrom and CreatedBefore bound created_at to [CreatedFrom, CreatedBefore).
	CreatedFrom   time.Time
	CreatedBefore time.Time
}

// Cursor is a position in the (created_at, uid) order of ListJobs: the key of the last job of a
// page. The zero Cursor is the start.
type Cursor struct {
	CreatedAt time.Time
	UID       string
}

// IsZero reports whether c is the start (as an "after" argument) or the end (as a returned next
// cursor: there are no more pages).
func (c Cursor) IsZero() bool {
	return c.UID == "" && c.CreatedAt.IsZero()
}

// String encodes c as an opaque, URL-safe token for APIs; ParseCursor decodes it. The zero Cursor
// encodes as "".
func (c Cursor) String() string {
	if c.IsZero() {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(c.CreatedAt.UTC().Format(time.RFC3339Nano) + " " + c.UID))
}

// ParseCursor decodes a token made by Cursor.String; "" is the zero Cursor.
func ParseCursor(token string) (Cursor, error) {
	if token == "" {
		return Cursor{}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return Cursor{}, fmt.Errorf("%w cursor: %w", ErrInvalid, err)
	}
	ts, uid, ok := strings.Cut(string(raw), " ")
	if !ok || uid == "" {
		return Cursor{}, fmt.Errorf("%w cursor: malformed", ErrInvalid)
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Cursor{}, fmt.Errorf("%w cursor: %w", ErrInvalid, err)
	}
	return Cursor{CreatedAt: t, UID: uid}, nil
}

// ListJobs returns up to limit jobs matching f, oldest first (ordered by created_at, then uid),
// starting after the cursor, and the cursor of the next page (zero when this was the last page).
// Keyset pagination: every page is one index range scan, however deep, and new jobs never shift
// the pages. limit is DefaultPageSize if ≤ 0 and at most MaxPageSize.
func (d *DB) ListJobs(ctx context.Context, f JobFilter, after Cursor, limit int) ([]Job, Cursor, error) {
	switch {
	case limit <= 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	var (
		where []string
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(args))))
	}
	if f.Cluster != "" {
		add("cluster = ?", f.Cluster)
	}
	if f.Namespace != "" {
		add("namespace = ?", f.Namespace)
	}
	if f.Submitter != "" {
		add("submitter = ?", f.Submitter)
	}
	if f.Phase != "" {
		add("phase = ?", f.Phase)
	}
	if f.ArchiveState != "" {
		add("archive_state = ?", string(f.ArchiveState))
	}
	if !f.CreatedFrom.IsZero() {
		add("created_at >= ?", f.CreatedFrom.UTC())
	}
	if !f.CreatedBefore.IsZero() {
		add("created_at < ?", f.CreatedBefore.UTC())
	}
	if !after.IsZero() {
		args = append(args, after.CreatedAt.UTC(), after.UID)
		where = append(where, fmt.Sprintf("(created_at, uid) > ($%d, $%d)", len(args)-1, len(args)))
	}
	query := `SELECT ` + jobColumns + ` FROM jobs`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	// One more row than asked tells whether there is a next page without counting.
	args = append(args, limit+1)
	query += fmt.Sprintf(` ORDER BY created_at, uid LIMIT $%d`, len(args))

	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, Cursor{}, fmt.Errorf("list jobs: %w", translate(err))
	}
	defer rows.Close()
	var jobs []Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, Cursor{}, fmt.Errorf("list jobs: %w", translate(err))
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, Cursor{}, fmt.Errorf("list jobs: %w", translate(err))
	}
	if len(jobs) <= limit {
		return jobs, Cursor{}, nil
	}
	jobs = jobs[:limit]
	last := jobs[limit-1]
	return jobs, Cursor{CreatedAt: last.CreatedAt, UID: last.UID}, nil
}

// JobsBySubmitter is ListJobs filtered by submitter.
func (d *DB) JobsBySubmitter(ctx context.Context, submitter string, after Cursor, limit int) ([]Job, Cursor, error) {
	if submitter == "" {
		return nil, Cursor{}, fmt.Errorf("list jobs by submitter: %w: empty submitter", ErrInvalid)
	}
	return d.ListJobs(ctx, JobFilter{Submitter: submitter}, after, limit)
}

// RecordTransitions records phase transitions of a job, each once: a transition already recorded
// under the same (phase, time) is skipped, so the full list of status.conditions can be passed on
// every reconcile. Returns how many were new; each new one is announced on NotifyChannel when the
// write commits. The job row must exist (ErrNotFound otherwise). All or nothing.
func (d *DB) RecordTransitions(ctx context.Context, jobUID string, ts []Transition) (inserted int, err error) {
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
		if t.Source != SourceCondition && t.Source != SourceObserved {
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
	res, err := d.db.ExecContext(ctx, `
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
func (d *DB) Transitions(ctx context.Context, jobUID string) ([]Transition, error) {
	rows, err := d.db.QueryContext(ctx, `
SELECT id, phase, transition_time, reason, message, resource_version, observed_at, source
FROM job_transitions WHERE job_uid = $1 ORDER BY transition_time, id`, jobUID)
	if err != nil {
		return nil, fmt.Errorf("get transitions of job %s: %w", jobUID, translate(err))
	}
	defer rows.Close()
	var ts []Transition
	for rows.Next() {
		var (
			t   Transition
			src string
		)
		if err := rows.Scan(&t.ID, &t.Phase, &t.Time, &t.Reason, &t.Message, &t.ResourceVersion, &t.ObservedAt, &src); err != nil {
			return nil, fmt.Errorf("get transitions of job %s: %w", jobUID, translate(err))
		}
		t.Time, t.ObservedAt, t.Source = t.Time.UTC(), t.ObservedAt.UTC(), TransitionSource(src)
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get transitions of job %s: %w", jobUID, translate(err))
	}
	return ts, nil
}

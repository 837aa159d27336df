package db

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/jobvault/jobvault/pkg/record"
)

// Page sizes of ListJobs.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

var upsertJobSQL = `
INSERT INTO jobs (uid, cluster, namespace, name, queue, submitter, submitter_groups, admitted_at,
                  created_at, finished_at, phase, retry_count, labels, annotations, spec, status,
                  archive_state, archive_location, archived_at, release_reason, annotations_raw, spec_raw, status_raw)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)
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
    -- Each raw column goes with its jsonb column (migration 0012).
    status_raw = CASE
        WHEN jobvault_job_phase_is_terminal(jobs.phase) AND NOT jobvault_job_phase_is_terminal(EXCLUDED.phase) THEN jobs.status_raw
        WHEN EXCLUDED.status IS NULL THEN jobs.status_raw
        ELSE EXCLUDED.status_raw END,
    finished_at = CASE
        WHEN jobvault_job_phase_is_terminal(jobs.phase) AND NOT jobvault_job_phase_is_terminal(EXCLUDED.phase) THEN jobs.finished_at
        ELSE COALESCE(EXCLUDED.finished_at, jobs.finished_at) END,
    retry_count      = GREATEST(jobs.retry_count, EXCLUDED.retry_count),
    labels           = EXCLUDED.labels,
    annotations      = EXCLUDED.annotations,
    annotations_raw  = EXCLUDED.annotations_raw,
    spec             = COALESCE(EXCLUDED.spec, jobs.spec),
    spec_raw         = CASE WHEN EXCLUDED.spec IS NULL THEN jobs.spec_raw ELSE EXCLUDED.spec_raw END,
` + archiveFieldsSQL("jobs",
	"archive_state", "EXCLUDED.archive_state",
	"archive_location", "COALESCE(EXCLUDED.archive_location, jobs.archive_location)",
	"archived_at", "EXCLUDED.archived_at",
	"release_reason", "EXCLUDED.release_reason")

// archiveFieldsSQL are the last SET items of an upsert into table (jobs or pods): its archive
// fields, given as column, new value pairs, move once, from pending to archived or released, and
// then keep their recorded values.
func archiveFieldsSQL(table string, pairs ...string) string {
	var items []string
	for i := 0; i+1 < len(pairs); i += 2 {
		items = append(items, fmt.Sprintf("    %s = CASE WHEN %s.archive_state = 'pending' THEN %s ELSE %s.%s END",
			pairs[i], table, pairs[i+1], table, pairs[i]))
	}
	return "    -- The archive fields move once, from pending to archived or released.\n" + strings.Join(items, ",\n")
}

// UpsertJob records a job, creating or updating the row keyed by j.UID. Idempotent: the same call
// twice leaves the row unchanged (updated_at included). See Job for which fields an update keeps.
func (d *DB) UpsertJob(ctx context.Context, j record.Job) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	// Unprepared: on the pool, a prepared statement would be prepared again, outside any
	// transaction, on each connection it runs on.
	return upsertJob(ctx, d.db, j)
}

// RecordJob records a job's row (as UpsertJob, unless row is nil) and its transitions (as
// RecordTransitions) in one transaction, and returns how many transitions were new. On any error
// nothing is written: a caller that must tell which part the database refused (ErrInvalid) writes
// them apart.
func (d *DB) RecordJob(ctx context.Context, row *record.Job, jobUID string, ts []record.Transition) (inserted int, err error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	err = d.inTx(ctx, func(tx querier) error {
		if row != nil {
			if err := upsertJob(ctx, tx, *row); err != nil {
				return err
			}
		}
		inserted, err = recordTransitions(ctx, tx, jobUID, ts)
		return err
	})
	return inserted, err
}

// upsertJob is UpsertJob on the pool or in a transaction.
func upsertJob(ctx context.Context, q querier, j record.Job) error {
	if err := validateJob(j); err != nil {
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
	annotationsJSONB, annotationsRaw := jsonbSafe(annotations)
	spec, specRaw := jsonbSafe(rawJSON(j.Spec))
	status, statusRaw := jsonbSafe(rawJSON(j.Status))
	_, err = q.ExecContext(ctx, upsertJobSQL,
		j.UID, j.Cluster, j.Namespace, j.Name, j.Queue,
		nullString(j.Submitter), pq.StringArray(j.SubmitterGroups), nullTime(j.AdmittedAt),
		j.CreatedAt.UTC(), nullTime(j.FinishedAt), j.Phase, j.RetryCount,
		labels, annotationsJSONB, spec, status,
		string(cmp.Or(j.ArchiveState, record.ArchivePending)), nullString(j.ArchiveLocation), nullTime(j.ArchivedAt),
		nullString(j.ReleaseReason), annotationsRaw, specRaw, statusRaw)
	if err != nil {
		return fmt.Errorf("upsert job %s: %w", j.UID, translate(err))
	}
	return nil
}

func validateJob(j record.Job) error {
	problems := emptyFields("UID", j.UID, "Namespace", j.Namespace, "Name", j.Name)
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

func archiveProblems(state record.ArchiveState, at *time.Time, reason string) []string {
	var problems []string
	switch {
	case state == "" || state == record.ArchivePending:
	case !state.Valid():
		problems = append(problems, fmt.Sprintf("ArchiveState %q is not one of pending, archived, released", state))
	case at == nil:
		problems = append(problems, fmt.Sprintf("ArchivedAt is nil with ArchiveState %s", state))
	}
	if state == record.ArchiveReleased && reason == "" {
		problems = append(problems, "ReleaseReason is empty with ArchiveState released")
	}
	return problems
}

// markJobArchivedSQL moves a pending job ($1) to archived ($4 empty) or released (reason $4), with
// its location ($2) and time ($3), and says whether the job exists. It records the job's pod and
// log counts as audit_outcomes gives them, which from then on reads them from the row (migration
// 0009). MarkJobArchived and FinalizeJob run it.
const markJobArchivedSQL = `
WITH marked AS (
    UPDATE jobs j SET
        archive_state    = CASE WHEN $4 = '' THEN 'archived' ELSE 'released' END,
        archive_location = COALESCE($2, archive_location),
        archived_at      = COALESCE($3, now()),
        release_reason   = NULLIF($4, ''),
        (final_pods, final_pods_deleted_before_terminal, final_logs_stored, final_logs_unavailable) =
            (SELECT o.pods, o.pods_deleted_before_terminal, o.logs_stored, o.logs_unavailable FROM audit_outcomes o WHERE o.uid = j.uid)
    WHERE uid = $1 AND archive_state = 'pending'
)
SELECT EXISTS (SELECT 1 FROM jobs WHERE uid = $1)`

// MarkJobArchived records that a job's archive is complete (releaseReason empty: state archived) or
// that it was released without one (state released, with the reason), at time at (now if zero),
// with its archive location. Idempotent: once a job is archived or released, later calls change
// nothing and succeed. ErrNotFound if there is no row for jobUID.
func (d *DB) MarkJobArchived(ctx context.Context, jobUID, location string, at time.Time, releaseReason string) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	var exists bool
	err := d.db.QueryRowContext(ctx, markJobArchivedSQL,
		jobUID, nullString(location), nullTimeValue(at), releaseReason).Scan(&exists)
	if err != nil {
		return fmt.Errorf("mark job %s archived: %w", jobUID, translate(err))
	}
	if !exists {
		return fmt.Errorf("mark job %s archived: %w", jobUID, ErrNotFound)
	}
	return nil
}

// jobSummaryColumns are the columns of a job's summary, what ListJobs reads: all of jobColumns
// but the annotations, spec and status (and their raw forms), about 1 KB of a row's 1.3 that a
// list (the archive API's, a lookup by name) never shows. Postgres need not render their jsonb as
// text, nor the driver carry and copy it.
const jobSummaryColumns = `uid, cluster, namespace, name, queue, submitter, submitter_groups, admitted_at,
    created_at, finished_at, phase, retry_count, labels,
    archive_state, archive_location, archived_at, release_reason, recorded_at, updated_at`

// jobColumns are a job's whole row: the summary, then the JSON documents.
const jobColumns = jobSummaryColumns + `, annotations, spec, status, annotations_raw, spec_raw, status_raw`

// scanJob scans a row of jobColumns.
func scanJob(row interface{ Scan(...any) error }) (record.Job, error) { return scanJobRow(row, true) }

// scanJobRow scans a row of jobColumns (whole) or of jobSummaryColumns.
func scanJobRow(row interface{ Scan(...any) error }, whole bool) (record.Job, error) {
	var (
		j                                  record.Job
		submitter, location, reason        sql.NullString
		groups                             pq.StringArray
		admitted, finished, archived       sql.NullTime
		labels, annotations, spec, status  []byte
		archiveState                       string
		rawAnnotations, rawSpec, rawStatus sql.NullString
	)
	dest := []any{&j.UID, &j.Cluster, &j.Namespace, &j.Name, &j.Queue, &submitter, &groups, &admitted,
		&j.CreatedAt, &finished, &j.Phase, &j.RetryCount, &labels,
		&archiveState, &location, &archived, &reason, &j.RecordedAt, &j.UpdatedAt}
	if whole {
		dest = append(dest, &annotations, &spec, &status, &rawAnnotations, &rawSpec, &rawStatus)
	}
	if err := row.Scan(dest...); err != nil {
		return record.Job{}, err
	}
	j.Submitter, j.ArchiveLocation, j.ReleaseReason = submitter.String, location.String, reason.String
	if groups != nil {
		j.SubmitterGroups = []string(groups)
	}
	j.AdmittedAt, j.FinishedAt, j.ArchivedAt = timePtr(admitted), timePtr(finished), timePtr(archived)
	j.CreatedAt, j.RecordedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.RecordedAt.UTC(), j.UpdatedAt.UTC()
	j.ArchiveState = record.ArchiveState(archiveState)
	var err error
	if j.Labels, err = decodeMap(labels); err != nil {
		return record.Job{}, fmt.Errorf("decode labels: %w", err)
	}
	if !whole {
		return j, nil
	}
	// The exact JSON, where jsonb could not hold it (migration 0012).
	annotations, spec, status = rawOr(rawAnnotations, annotations), rawOr(rawSpec, spec), rawOr(rawStatus, status)
	if j.Annotations, err = decodeMap(annotations); err != nil {
		return record.Job{}, fmt.Errorf("decode annotations: %w", err)
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
func (d *DB) Job(ctx context.Context, uid string) (record.Job, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return getJob(ctx, d.db, uid)
}

func getJob(ctx context.Context, q querier, uid string) (record.Job, error) {
	j, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE uid = $1`, uid))
	if err != nil {
		return record.Job{}, fmt.Errorf("get job %s: %w", uid, translate(err))
	}
	return j, nil
}

// JobFilter selects jobs for ListJobs. Zero fields do not filter.
type JobFilter struct {
	Cluster   string
	Namespace string
	// Name selects the jobs of that name (several over time); it needs Namespace to use an index.
	Name      string
	Submitter string
	Phase     string
	// ArchiveState selects jobs in that archive state.
	ArchiveState record.ArchiveState
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

// ListJobs returns up to limit jobs matching f, oldest first (ordered by created_at, then uid),
// starting after the cursor, and the cursor of the next page (zero when this was the last page).
// Keyset pagination: every page is one index range scan, however deep, and new jobs never shift
// the pages. limit is DefaultPageSize if ≤ 0 and at most MaxPageSize.
//
// The jobs are summaries: every field but Annotations, Spec and Status, which stay nil (Job
// returns the whole record).
func (d *DB) ListJobs(ctx context.Context, f JobFilter, after Cursor, limit int) ([]record.Job, Cursor, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
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
	if f.Name != "" {
		add("name = ?", f.Name)
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
	query := `SELECT ` + jobSummaryColumns + ` FROM jobs`
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
	var jobs []record.Job
	for rows.Next() {
		j, err := scanJobRow(rows, false)
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

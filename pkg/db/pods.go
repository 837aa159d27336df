package db

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/jobvault/jobvault/pkg/record"
)

var (
	insertPodSQL = `
INSERT INTO pods (uid, job_uid, namespace, name, task, node, phase, created_at, started_at, finished_at,
                  deleted_before_terminal, archive_state, archived_at, release_reason)`
	upsertPodSQL = insertPodSQL + `
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)` + onConflictPodSQL
	upsertPodsSQL = insertPodSQL + `
SELECT uid, job_uid, namespace, name, task, node, phase, created_at, started_at, finished_at,
       deleted_before_terminal, archive_state, archived_at, release_reason
FROM jsonb_to_recordset($1::jsonb) AS r(uid text, job_uid text, namespace text, name text, task text, node text,
     phase text, created_at timestamptz, started_at timestamptz, finished_at timestamptz,
     deleted_before_terminal boolean, archive_state text, archived_at timestamptz, release_reason text)` + onConflictPodSQL
)

var onConflictPodSQL = `
ON CONFLICT (uid) DO UPDATE SET
    -- Set, not kept: a different value is refused (the pods_job_fixed trigger), not ignored.
    job_uid     = EXCLUDED.job_uid,
    namespace   = EXCLUDED.namespace,
    name        = EXCLUDED.name,
    task        = COALESCE(NULLIF(EXCLUDED.task, ''), pods.task),
    node        = COALESCE(NULLIF(EXCLUDED.node, ''), pods.node),
    -- Succeeded and Failed are final; a non-terminal phase arriving later comes from a stale cache.
    phase = CASE
        WHEN EXCLUDED.phase = '' THEN pods.phase
        WHEN jobvault_pod_phase_is_terminal(pods.phase) AND NOT jobvault_pod_phase_is_terminal(EXCLUDED.phase) THEN pods.phase
        ELSE EXCLUDED.phase END,
    started_at  = COALESCE(pods.started_at, EXCLUDED.started_at),
    finished_at = COALESCE(EXCLUDED.finished_at, pods.finished_at),
    deleted_before_terminal = pods.deleted_before_terminal OR EXCLUDED.deleted_before_terminal,
` + archiveFieldsSQL("pods",
	"archive_state", "EXCLUDED.archive_state",
	"archived_at", "EXCLUDED.archived_at",
	"release_reason", "EXCLUDED.release_reason")

// UpsertPod records a pod, creating or updating the row keyed by p.UID. The job row need not exist:
// pods has no foreign key to jobs, because a pod can be archived (and deleted by Volcano) before the
// job reconciler writes its job. Idempotent; see Pod for which fields an update keeps. A row never
// moves to another job or namespace, and its job, once recorded, is of its namespace: ErrConflict
// otherwise (migration 0010), and nothing is written.
func (d *DB) UpsertPod(ctx context.Context, p record.Pod) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if err := validatePod(p); err != nil {
		return fmt.Errorf("upsert pod %s: %w", p.UID, err)
	}
	_, err := d.db.ExecContext(ctx, upsertPodSQL,
		p.UID, p.JobUID, p.Namespace, p.Name, p.Task, p.Node, p.Phase, p.CreatedAt.UTC(),
		nullTime(p.StartedAt), nullTime(p.FinishedAt), p.DeletedBeforeTerminal,
		string(cmp.Or(p.ArchiveState, record.ArchivePending)), nullTime(p.ArchivedAt), nullString(p.ReleaseReason))
	if err != nil {
		return fmt.Errorf("upsert pod %s: %w", p.UID, translate(err))
	}
	return nil
}

// podJSON is a row of UpsertPods' parameter, as jsonb_to_recordset reads it.
type podJSON struct {
	UID                   string     `json:"uid"`
	JobUID                string     `json:"job_uid"`
	Namespace             string     `json:"namespace"`
	Name                  string     `json:"name"`
	Task                  string     `json:"task"`
	Node                  string     `json:"node"`
	Phase                 string     `json:"phase"`
	CreatedAt             time.Time  `json:"created_at"`
	StartedAt             *time.Time `json:"started_at"`
	FinishedAt            *time.Time `json:"finished_at"`
	DeletedBeforeTerminal bool       `json:"deleted_before_terminal"`
	ArchiveState          string     `json:"archive_state"`
	ArchivedAt            *time.Time `json:"archived_at"`
	ReleaseReason         *string    `json:"release_reason"`
}

// UpsertPods records many pods in one statement, each as UpsertPod records it: the archiver writes
// the rows of its cached pods this way when it starts, instead of one round trip each. Every row
// is checked first: one invalid row, or one UID twice, and nothing is written.
func (d *DB) UpsertPods(ctx context.Context, pods []record.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, seen := make([]podJSON, len(pods)), make(map[string]bool, len(pods))
	for i, p := range pods {
		if err := validatePod(p); err != nil {
			return fmt.Errorf("upsert %d pods: pod %s: %w", len(pods), p.UID, err)
		}
		if seen[p.UID] {
			return fmt.Errorf("upsert %d pods: pod %s: %w", len(pods), p.UID, invalid("pod", []string{"UID given twice"}))
		}
		seen[p.UID] = true
		rows[i] = podJSON{UID: p.UID, JobUID: p.JobUID, Namespace: p.Namespace, Name: p.Name, Task: p.Task, Node: p.Node,
			Phase: p.Phase, CreatedAt: p.CreatedAt.UTC(), StartedAt: p.StartedAt, FinishedAt: p.FinishedAt,
			DeletedBeforeTerminal: p.DeletedBeforeTerminal, ArchiveState: string(cmp.Or(p.ArchiveState, record.ArchivePending)),
			ArchivedAt: p.ArchivedAt}
		if p.ReleaseReason != "" {
			rows[i].ReleaseReason = &p.ReleaseReason
		}
	}
	param, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("upsert %d pods: %w", len(pods), err)
	}
	if _, err := d.db.ExecContext(ctx, upsertPodsSQL, string(param)); err != nil {
		return fmt.Errorf("upsert %d pods: %w", len(pods), translate(err))
	}
	return nil
}

func validatePod(p record.Pod) error {
	problems := emptyFields("UID", p.UID, "JobUID", p.JobUID, "Namespace", p.Namespace, "Name", p.Name)
	if p.CreatedAt.IsZero() {
		problems = append(problems, "CreatedAt is zero")
	}
	problems = append(problems, archiveProblems(p.ArchiveState, p.ArchivedAt, p.ReleaseReason)...)
	return invalid("pod", problems)
}

// MarkPodArchived records that the logs of all a pod's containers are durable (releaseReason empty:
// state archived) or that the pod was released without them (state released, with the reason), at
// time at (now if zero). Idempotent: once archived or released, later calls change nothing and
// succeed. ErrNotFound if there is no row for podUID.
func (d *DB) MarkPodArchived(ctx context.Context, podUID string, at time.Time, releaseReason string) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return markPodArchived(ctx, d.db, podUID, at, releaseReason)
}

// markPodArchived is MarkPodArchived on the pool or in a transaction.
func markPodArchived(ctx context.Context, q querier, podUID string, at time.Time, releaseReason string) error {
	var exists bool
	err := q.QueryRowContext(ctx, `
WITH marked AS (
    UPDATE pods SET
        archive_state  = CASE WHEN $3 = '' THEN 'archived' ELSE 'released' END,
        archived_at    = COALESCE($2, now()),
        release_reason = NULLIF($3, '')
    WHERE uid = $1 AND archive_state = 'pending'
)
SELECT EXISTS (SELECT 1 FROM pods WHERE uid = $1)`,
		podUID, nullTimeValue(at), releaseReason).Scan(&exists)
	if err != nil {
		return fmt.Errorf("mark pod %s archived: %w", podUID, translate(err))
	}
	if !exists {
		return fmt.Errorf("mark pod %s archived: %w", podUID, ErrNotFound)
	}
	return nil
}

const podColumns = `uid, job_uid, namespace, name, task, node, phase, created_at, started_at, finished_at,
    deleted_before_terminal, archive_state, archived_at, release_reason, recorded_at, updated_at`

func scanPod(row interface{ Scan(...any) error }) (record.Pod, error) {
	var (
		p                           record.Pod
		started, finished, archived sql.NullTime
		reason                      sql.NullString
		state                       string
	)
	err := row.Scan(&p.UID, &p.JobUID, &p.Namespace, &p.Name, &p.Task, &p.Node, &p.Phase, &p.CreatedAt,
		&started, &finished, &p.DeletedBeforeTerminal, &state, &archived, &reason, &p.RecordedAt, &p.UpdatedAt)
	if err != nil {
		return record.Pod{}, err
	}
	p.StartedAt, p.FinishedAt, p.ArchivedAt = timePtr(started), timePtr(finished), timePtr(archived)
	p.CreatedAt, p.RecordedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.RecordedAt.UTC(), p.UpdatedAt.UTC()
	p.ArchiveState, p.ReleaseReason = record.ArchiveState(state), reason.String
	return p, nil
}

// Pod returns the pod recorded under uid, or an error matching ErrNotFound.
func (d *DB) Pod(ctx context.Context, uid string) (record.Pod, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	p, err := scanPod(d.db.QueryRowContext(ctx, `SELECT `+podColumns+` FROM pods WHERE uid = $1`, uid))
	if err != nil {
		return record.Pod{}, fmt.Errorf("get pod %s: %w", uid, translate(err))
	}
	return p, nil
}

// PodsByUID returns the recorded pods among uids, in no particular order; a UID never recorded is
// left out. The archiver reads the rows of every cached pod this way when it starts.
func (d *DB) PodsByUID(ctx context.Context, uids []string) ([]record.Pod, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	pods, err := queryPods(ctx, d.db, `SELECT `+podColumns+` FROM pods WHERE uid = ANY($1)`, pq.StringArray(uids))
	if err != nil {
		return nil, fmt.Errorf("get %d pods: %w", len(uids), err)
	}
	return pods, nil
}

// Pods returns the recorded pods of a job, oldest first (empty for an unknown job). The archiver
// finalizes a job only when every one of them is archived or released.
func (d *DB) Pods(ctx context.Context, jobUID string) ([]record.Pod, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return getPods(ctx, d.db, jobUID)
}

func getPods(ctx context.Context, q querier, jobUID string) ([]record.Pod, error) {
	pods, err := queryPods(ctx, q, `SELECT `+podColumns+` FROM pods WHERE job_uid = $1 ORDER BY created_at, uid`, jobUID)
	if err != nil {
		return nil, fmt.Errorf("get pods of job %s: %w", jobUID, err)
	}
	return pods, nil
}

// queryPods runs a query of podColumns and scans its rows.
func queryPods(ctx context.Context, q querier, query string, arg any) ([]record.Pod, error) {
	rows, err := q.QueryContext(ctx, query, arg)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var pods []record.Pod
	for rows.Next() {
		p, err := scanPod(rows)
		if err != nil {
			return nil, translate(err)
		}
		pods = append(pods, p)
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	return pods, nil
}

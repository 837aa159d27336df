-- Audit queries at scale (1M jobs, 10M transitions, 20M log rows; `make bench-db` measures them
-- before and after this migration, see the README's Performance section).
--
-- Every view keeps its columns, in order, with their types (CREATE OR REPLACE VIEW refuses
-- anything else); some gain a column at the end.

-- audit_outcomes: the start and terminal times were aggregates over all of a job's transitions
-- (a scan of its whole history, heap included). As two subqueries on the (job_uid, phase,
-- transition_time) unique index, each is one index-only probe. Same values.
CREATE OR REPLACE VIEW audit_outcomes AS
SELECT j.uid,
       j.cluster,
       j.namespace,
       j.name,
       j.queue,
       j.submitter,
       j.phase                                        AS final_phase,
       jobvault_job_phase_is_terminal(j.phase)        AS terminal,
       j.created_at,
       t.started_at,
       COALESCE(j.finished_at, t.terminal_at)         AS finished_at,
       t.started_at - j.created_at                    AS queued_for,
       COALESCE(j.finished_at, t.terminal_at) - t.started_at AS ran_for,
       COALESCE(j.finished_at, t.terminal_at) - j.created_at AS total_duration,
       j.retry_count,
       j.archive_state,
       j.archive_location,
       j.archived_at,
       j.release_reason,
       p.pods,
       p.pods_deleted_before_terminal,
       l.logs_stored,
       l.logs_unavailable
FROM jobs j
LEFT JOIN LATERAL (
    SELECT (SELECT min(jt.transition_time) FROM job_transitions jt
            WHERE jt.job_uid = j.uid AND jt.phase = 'Running')                              AS started_at,
           (SELECT max(jt.transition_time) FROM job_transitions jt
            WHERE jt.job_uid = j.uid AND jobvault_job_phase_is_terminal(jt.phase))            AS terminal_at
) t ON true
LEFT JOIN LATERAL (
    SELECT count(*)                                        AS pods,
           count(*) FILTER (WHERE po.deleted_before_terminal) AS pods_deleted_before_terminal
    FROM pods po
    WHERE po.job_uid = j.uid
) p ON true
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE lo.state = 'stored')      AS logs_stored,
           count(*) FILTER (WHERE lo.state = 'unavailable') AS logs_unavailable
    FROM pods po
    JOIN log_objects lo ON lo.pod_uid = po.uid
    WHERE po.job_uid = j.uid
) l ON true;

-- The pods of a job, with what audit_outcomes counts, from the index alone.
CREATE INDEX pods_job_cover_idx ON pods (job_uid, created_at) INCLUDE (uid, deleted_before_terminal);
DROP INDEX pods_job_idx;

-- audit_retries: its filter read the aggregate of each job's whole history (WHERE retry_count > 0
-- OR running_transitions > 1), so every query, however narrow, computed it for every job it
-- looked at. The second Running transition is now one index probe, and the history is built only
-- for the jobs that pass. Same rows. created_at is new, at the end: range filters and
-- keyset order (created_at, uid) like the other views.
CREATE OR REPLACE VIEW audit_retries AS
SELECT j.uid,
       j.cluster,
       j.namespace,
       j.name,
       j.submitter,
       j.phase,
       j.retry_count,
       t.running_transitions,
       t.restarting_transitions,
       t.transitions,
       j.created_at
FROM jobs j
JOIN LATERAL (
    SELECT count(*) FILTER (WHERE jt.phase = 'Running')    AS running_transitions,
           count(*) FILTER (WHERE jt.phase = 'Restarting') AS restarting_transitions,
           COALESCE(jsonb_agg(jsonb_build_object('phase', jt.phase, 'time', jt.transition_time, 'reason', jt.reason)
                              ORDER BY jt.transition_time, jt.id), '[]') AS transitions
    FROM job_transitions jt
    WHERE jt.job_uid = j.uid
) t ON true
WHERE j.retry_count > 0
   OR EXISTS (SELECT 1 FROM job_transitions r WHERE r.job_uid = j.uid AND r.phase = 'Running' OFFSET 1);

COMMENT ON VIEW audit_retries IS
    'Jobs that were retried: retry_count > 0 or more than one Running transition. Lists the counts and the ordered phase history (phase, time, reason) as JSON, and the job''s creation time.';

-- The log views gain their job's creation time: an export of a time range selects logs by it.
CREATE OR REPLACE VIEW audit_log_objects AS
SELECT po.job_uid,
       j.namespace  AS job_namespace,
       j.name       AS job_name,
       po.uid       AS pod_uid,
       po.namespace AS pod_namespace,
       po.name      AS pod_name,
       po.task,
       po.node,
       lo.container,
       lo.container_type,
       lo.instance,
       lo.object_key,
       lo.bytes,
       lo.stored_bytes,
       lo.sha256,
       lo.state,
       lo.reason,
       lo.created_at,
       lo.updated_at,
       j.created_at AS job_created_at
FROM log_objects lo
JOIN pods po ON po.uid = lo.pod_uid
LEFT JOIN jobs j ON j.uid = po.job_uid;

COMMENT ON VIEW audit_log_objects IS
    'Every container log of every pod with its job, pod, task, node and container, object key, uncompressed and stored sizes, SHA-256 (hex of the uncompressed bytes) and state (stored, or unavailable with the reason). job_namespace, job_name and job_created_at are NULL until the job row exists.';

CREATE OR REPLACE VIEW audit_log_gaps AS
SELECT po.job_uid,
       j.namespace AS job_namespace,
       j.name      AS job_name,
       po.uid      AS pod_uid,
       po.name     AS pod_name,
       g.container,
       g.run,
       CASE WHEN g.after_ns = 0 THEN NULL ELSE to_timestamp(g.after_ns / 1e9) END AS missing_after,
       to_timestamp(g.before_ns / 1e9) AS missing_before,
       g.reason,
       g.detail,
       g.recorded_at,
       j.created_at AS job_created_at
FROM log_gaps g
JOIN pods po ON po.uid = g.pod_uid
LEFT JOIN jobs j ON j.uid = po.job_uid;

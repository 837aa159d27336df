-- Reverts 0009_outcome_counts.up.sql: audit_outcomes counts every job again (as 0006 made it),
-- the freeze trigger as 0004 made it, the counts' columns go, and the database's jit setting is
-- reset (if the migrating user may).
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I RESET jit', current_database());
EXCEPTION
    WHEN insufficient_privilege THEN
        RAISE WARNING 'jobvault: database % keeps jit = off: the migrating user % does not own it', current_database(), current_user;
END
$$;

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

COMMENT ON VIEW audit_outcomes IS
    'How each job ended: final (latest) phase and whether it is terminal, start (first Running transition) and finish times, queued/ran/total durations, retries, archive state, location and release reason, pod count, pods deleted before they finished, and stored/unavailable log counts.';

DROP FUNCTION jobvault_count_finalized();

CREATE OR REPLACE FUNCTION jobvault_freeze_finalized() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.archive_state <> 'pending' THEN
        NEW.uid              := OLD.uid;
        NEW.cluster          := OLD.cluster;
        NEW.namespace        := OLD.namespace;
        NEW.name             := OLD.name;
        NEW.queue            := OLD.queue;
        NEW.submitter        := OLD.submitter;
        NEW.submitter_groups := OLD.submitter_groups;
        NEW.admitted_at      := OLD.admitted_at;
        NEW.created_at       := OLD.created_at;
        NEW.finished_at      := OLD.finished_at;
        NEW.phase            := OLD.phase;
        NEW.retry_count      := OLD.retry_count;
        NEW.spec             := OLD.spec;
        NEW.status           := OLD.status;
        NEW.archive_state    := OLD.archive_state;
        NEW.archive_location := OLD.archive_location;
        NEW.archived_at      := OLD.archived_at;
        NEW.release_reason   := OLD.release_reason;
    END IF;
    RETURN NEW;
END
$$;

ALTER TABLE jobs
    DROP CONSTRAINT jobs_final_counts,
    DROP COLUMN final_pods,
    DROP COLUMN final_pods_deleted_before_terminal,
    DROP COLUMN final_logs_stored,
    DROP COLUMN final_logs_unavailable;

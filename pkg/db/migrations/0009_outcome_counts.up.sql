-- jobvault schema, version 9: a finalized job's pod and log counts, recorded once.
--
-- audit_outcomes counted each job's pods and, through them, its logs at every query: about 11
-- index lookups a job, so a page of 1,000 outcomes read some 70,000 buffers and ran over 100 ms at
-- 1M jobs (the README's Performance section). What a finalized job's record holds no longer
-- changes (0004's freeze triggers; its chain entry digests it), so its counts are taken once, by
-- the statement that finalizes it (db's markJobArchivedSQL), from this very view. audit_outcomes
-- reads them for finalized jobs and still counts pending ones: same columns, same values.

ALTER TABLE jobs
    ADD COLUMN final_pods                         bigint,
    ADD COLUMN final_pods_deleted_before_terminal bigint,
    ADD COLUMN final_logs_stored                  bigint,
    ADD COLUMN final_logs_unavailable             bigint,
    ADD CONSTRAINT jobs_final_counts CHECK (
        num_nulls(final_pods, final_pods_deleted_before_terminal, final_logs_stored, final_logs_unavailable) IN (0, 4)
        AND (archive_state <> 'pending' OR final_pods IS NULL));

COMMENT ON COLUMN jobs.final_pods IS
    'The job''s pods when it was finalized, as audit_outcomes counted them; with final_pods_deleted_before_terminal, final_logs_stored and final_logs_unavailable. NULL while pending (audit_outcomes counts live).';

-- audit_outcomes: a finalized job's counts come from its row. The count subqueries are skipped
-- (a one-time filter on the outer row) when the row has them.
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
       COALESCE(j.final_pods, p.pods)                 AS pods,
       COALESCE(j.final_pods_deleted_before_terminal, p.pods_deleted_before_terminal) AS pods_deleted_before_terminal,
       COALESCE(j.final_logs_stored, l.logs_stored)   AS logs_stored,
       COALESCE(j.final_logs_unavailable, l.logs_unavailable) AS logs_unavailable
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
    WHERE po.job_uid = j.uid AND j.final_pods IS NULL
) p ON true
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE lo.state = 'stored')      AS logs_stored,
           count(*) FILTER (WHERE lo.state = 'unavailable') AS logs_unavailable
    FROM pods po
    JOIN log_objects lo ON lo.pod_uid = po.uid
    WHERE po.job_uid = j.uid AND j.final_pods IS NULL
) l ON true;

COMMENT ON VIEW audit_outcomes IS
    'How each job ended: final (latest) phase and whether it is terminal, start (first Running transition) and finish times, queued/ran/total durations, retries, archive state, location and release reason, pod count, pods deleted before they finished, and stored/unavailable log counts (a finalized job''s as they were when it was finalized).';

-- jobvault_freeze_finalized as 0004 made it, and the counts: set once, then final.
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
        IF OLD.final_pods IS NOT NULL THEN
            NEW.final_pods                         := OLD.final_pods;
            NEW.final_pods_deleted_before_terminal := OLD.final_pods_deleted_before_terminal;
            NEW.final_logs_stored                  := OLD.final_logs_stored;
            NEW.final_logs_unavailable             := OLD.final_logs_unavailable;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- jobvault_count_finalized records the counts of the finalized jobs that lack them (finalized
-- before this migration, or loaded by hand) and returns how many it counted.
CREATE FUNCTION jobvault_count_finalized() RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    UPDATE jobs j
       SET (final_pods, final_pods_deleted_before_terminal, final_logs_stored, final_logs_unavailable) =
           (SELECT o.pods, o.pods_deleted_before_terminal, o.logs_stored, o.logs_unavailable
              FROM audit_outcomes o WHERE o.uid = j.uid)
     WHERE j.archive_state <> 'pending' AND j.final_pods IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

COMMENT ON FUNCTION jobvault_count_finalized() IS
    'Records audit_outcomes'' pod and log counts on the rows of finalized jobs that lack them; returns how many. Run by migration 0009.';

SELECT jobvault_count_finalized();

-- Postgres' JIT compiles any plan estimated above jit_above_cost, and the audit views' nested loops
-- are (their per-job estimates are pessimistic): it tripled the p95 of a 1,000-row outcomes page at
-- 1M jobs (the README's Performance section). The archiver's own statements are too small to gain
-- from it. Off for this database's new sessions, if the migrating user may (owner or superuser).
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
EXCEPTION
    WHEN insufficient_privilege THEN
        RAISE WARNING 'jobvault: jit left on: the migrating user % does not own database %', current_user, current_database()
            USING HINT = 'The audit views run faster without JIT: have the owner run ALTER DATABASE ' || quote_ident(current_database()) || ' SET jit = off.';
END
$$;

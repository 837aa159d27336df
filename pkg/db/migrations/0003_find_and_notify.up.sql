-- Finding a job by name (archiver logs --namespace --job) is one index range scan.
CREATE INDEX jobs_namespace_name_idx ON jobs (namespace, name, created_at, uid);

-- Notifications are best-effort, and must never block recording: a listener that stops reading
-- lets Postgres' NOTIFY queue (8 GB) fill, and then every transaction that notifies fails at
-- commit. Past half the queue, transitions are recorded without a notification (listeners
-- resynchronise from job_transitions, as after any disconnect).
CREATE OR REPLACE FUNCTION jobvault_notify_transition() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    job_namespace text;
    job_name      text;
BEGIN
    IF pg_notification_queue_usage() >= 0.5 THEN
        RETURN NULL;
    END IF;
    SELECT j.namespace, j.name INTO job_namespace, job_name FROM jobs j WHERE j.uid = NEW.job_uid;
    PERFORM pg_notify('jobvault_transitions', json_build_object(
        'uid',       NEW.job_uid,
        'namespace', job_namespace,
        'name',      job_name,
        'phase',     NEW.phase,
        'time',      to_char(NEW.transition_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    )::text);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION jobvault_notify_transition() IS
    'Sends {uid, namespace, name, phase, time (RFC 3339, UTC)} on channel jobvault_transitions for each new job_transitions row, unless the NOTIFY queue is half full (a stuck listener): notifications are best-effort and never block recording.';

-- Reverts 0003_find_and_notify.up.sql.
DROP INDEX IF EXISTS jobs_namespace_name_idx;

CREATE OR REPLACE FUNCTION jobvault_notify_transition() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    job_namespace text;
    job_name      text;
BEGIN
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
    'Sends {uid, namespace, name, phase, time (RFC 3339, UTC)} on channel jobvault_transitions for each new job_transitions row.';

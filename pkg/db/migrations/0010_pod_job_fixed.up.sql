-- jobvault schema, version 10: a pod row stays with its job, and its job is of its namespace.
--
-- A pod names its job by an owner reference the pod's author wrote. The archiver checks it against
-- the API (a VcJob of the pod's namespace with that name and UID) before it records the pod; the
-- database holds the result to the same rule, whoever writes: a pod row is refused (SQLSTATE
-- 23P01, exclusion_violation, which pkg/db reports as ErrConflict) when
--   - an update would move it to another job or another namespace (the upsert used to rewrite
--     job_uid on every call), or
--   - its job's row exists and is of another namespace.
-- A pod recorded before its job's row (pods has no foreign key to jobs) is checked by the
-- archiver only; the trigger checks it again at its next upsert.

CREATE FUNCTION jobvault_pod_job_fixed() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    job_namespace text;
BEGIN
    IF TG_OP = 'UPDATE' AND (NEW.job_uid <> OLD.job_uid OR NEW.namespace <> OLD.namespace) THEN
        RAISE EXCEPTION 'jobvault: pod % is recorded under job % of namespace %: it may not move to job % of namespace %',
            OLD.uid, OLD.job_uid, OLD.namespace, NEW.job_uid, NEW.namespace
            USING ERRCODE = 'exclusion_violation';
    END IF;
    SELECT namespace INTO job_namespace FROM jobs WHERE uid = NEW.job_uid;
    IF FOUND AND job_namespace <> NEW.namespace THEN
        RAISE EXCEPTION 'jobvault: pod % of namespace % may not be recorded under job % of namespace %',
            NEW.uid, NEW.namespace, NEW.job_uid, job_namespace
            USING ERRCODE = 'exclusion_violation';
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION jobvault_pod_job_fixed() IS
    'BEFORE INSERT/UPDATE trigger on pods: a pod row never moves to another job or namespace, and its job (if recorded) is of its namespace (SQLSTATE 23P01 otherwise).';

CREATE TRIGGER pods_job_fixed BEFORE INSERT OR UPDATE OF job_uid, namespace ON pods
    FOR EACH ROW EXECUTE FUNCTION jobvault_pod_job_fixed();

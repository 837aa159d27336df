-- Reverts 0011_gap_key.up.sql: gaps keyed by their start again. Where several gaps of a run share
-- a start, the first recorded is kept and the others are deleted (in a transaction allowed to, as
-- the pruner's is): the old key cannot hold them. Rows of a finalized job are sealed (its chain
-- entry digests them): deleting one would make `audit verify` report the job altered, so while a
-- finalized job has such gaps the step refuses, and changes nothing.
DO $$
DECLARE
    n    bigint;
    jobs text;
BEGIN
    SELECT count(*), string_agg(DISTINCT j.uid, ', ') INTO n, jobs
    FROM log_gaps g
    JOIN log_gaps k ON g.pod_uid = k.pod_uid AND g.container = k.container AND g.run = k.run AND g.after_ns = k.after_ns
        AND (k.recorded_at, k.reason, coalesce(k.before_ns, -1)) < (g.recorded_at, g.reason, coalesce(g.before_ns, -1))
    JOIN pods p ON p.uid = g.pod_uid
    JOIN jobs j ON j.uid = p.job_uid
    WHERE j.archive_state <> 'pending';
    IF n > 0 THEN
        RAISE EXCEPTION 'cannot revert 0011_gap_key: % gap row(s) of finalized jobs (%) share a start with another gap of their run; the old key cannot hold them, and deleting sealed rows would make audit verify report those jobs altered. Stay at version 11 or later, or prune those jobs first', n, jobs
            USING ERRCODE = 'restrict_violation';
    END IF;
END
$$;
SET LOCAL jobvault.prune = 'on';
DELETE FROM log_gaps g
USING log_gaps k
WHERE g.pod_uid = k.pod_uid AND g.container = k.container AND g.run = k.run AND g.after_ns = k.after_ns
  AND (k.recorded_at, k.reason, coalesce(k.before_ns, -1)) < (g.recorded_at, g.reason, coalesce(g.before_ns, -1));
DROP INDEX log_gaps_key;
ALTER TABLE log_gaps ADD PRIMARY KEY (pod_uid, container, run, after_ns);

-- Reverts 0011_gap_key.up.sql: gaps keyed by their start again. Where several gaps of a run share
-- a start, the first recorded is kept and the others are deleted (in a transaction allowed to, as
-- the pruner's is): the old key cannot hold them.
SET LOCAL jobvault.prune = 'on';
DELETE FROM log_gaps g
USING log_gaps k
WHERE g.pod_uid = k.pod_uid AND g.container = k.container AND g.run = k.run AND g.after_ns = k.after_ns
  AND (k.recorded_at, k.reason, coalesce(k.before_ns, -1)) < (g.recorded_at, g.reason, coalesce(g.before_ns, -1));
DROP INDEX log_gaps_key;
ALTER TABLE log_gaps ADD PRIMARY KEY (pod_uid, container, run, after_ns);

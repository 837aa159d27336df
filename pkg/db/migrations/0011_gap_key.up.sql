-- A run's gaps were keyed by their start alone (pod, container, run, after_ns), written with ON
-- CONFLICT DO NOTHING: a second gap starting where the first did (the rest of a run unreadable
-- after a rotation was recorded at the same position) was dropped. A gap is now keyed by its start,
-- its reason and its end (an open end counts as one value): the same gap written again is still
-- recorded once, another one at the same start is recorded beside it. The detail is not part of
-- the key: it may say the same thing in other words on a retry (an error's text).
ALTER TABLE log_gaps DROP CONSTRAINT log_gaps_pkey;
CREATE UNIQUE INDEX log_gaps_key ON log_gaps (pod_uid, container, run, after_ns, reason, (coalesce(before_ns, -1)));

COMMENT ON INDEX log_gaps_key IS
    'One row per gap: its run, start, reason and end (-1: open). ON CONFLICT target of the archiver''s PutGap.';

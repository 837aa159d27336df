-- Live capture: a container run's log is written as segments while the container runs, then
-- assembled into its log object; what could not be captured is a gap.

CREATE TABLE log_segments (
    pod_uid          text        NOT NULL REFERENCES pods (uid) ON DELETE CASCADE,
    container        text        NOT NULL CHECK (container <> ''),
    run              integer     NOT NULL CHECK (run >= 0),
    seq              integer     NOT NULL CHECK (seq >= 0),
    object_key       text        NOT NULL CHECK (object_key <> ''),
    stored_bytes     bigint      NOT NULL CHECK (stored_bytes >= 0),
    bytes            bigint      NOT NULL CHECK (bytes >= 0),
    total_bytes      bigint      NOT NULL CHECK (total_bytes >= bytes),
    -- Log timestamps have nanoseconds, timestamptz microseconds: keep them exact.
    last_time_ns     bigint      NOT NULL,
    last_time_lines  integer     NOT NULL CHECK (last_time_lines >= 0),
    hash_state       bytea       NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pod_uid, container, run, seq)
);

COMMENT ON TABLE log_segments IS
    'Segments of container logs being captured live; deleted once assembled into their log object.';

CREATE TABLE log_gaps (
    pod_uid      text        NOT NULL REFERENCES pods (uid) ON DELETE CASCADE,
    container    text        NOT NULL CHECK (container <> ''),
    run          integer     NOT NULL CHECK (run >= 0),
    -- The output between the last line captured before the gap (0: none) and the first after it
    -- (NULL: none), in nanoseconds since the epoch, is missing.
    after_ns     bigint      NOT NULL,
    before_ns    bigint,
    reason       text        NOT NULL CHECK (reason <> ''),
    detail       text        NOT NULL DEFAULT '',
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pod_uid, container, run, after_ns)
);

CREATE VIEW audit_log_gaps AS
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
       g.recorded_at
FROM log_gaps g
JOIN pods po ON po.uid = g.pod_uid
LEFT JOIN jobs j ON j.uid = po.job_uid;

COMMENT ON VIEW audit_log_gaps IS
    'Parts of container logs that could not be archived: the container run (restart count), the time range missing (NULL: unknown on that side) and why. A job with a gap is released, never archived.';

-- jobvault schema, version 1.
--
-- Every migration file runs as one multi-statement simple query, which Postgres executes in one
-- implicit transaction: a failed or interrupted migration leaves nothing half-applied. Keep it that
-- way: no explicit BEGIN/COMMIT and nothing that cannot run in a transaction block (CREATE INDEX
-- CONCURRENTLY, ALTER TYPE ... ADD VALUE on old servers).
--
-- Identity is always the Kubernetes UID (text, as the API server spells it). Namespace and name are
-- recorded for people; they are reused after deletion, UIDs never are.

-- jobvault_job_phase_is_terminal mirrors tracking.IsTerminal: a VcJob in one of these phases never
-- leaves it. Aborted is not terminal (Volcano can resume it). A test keeps the two in step.
CREATE FUNCTION jobvault_job_phase_is_terminal(phase text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT phase IN ('Completed', 'Failed', 'Terminated') $$;

COMMENT ON FUNCTION jobvault_job_phase_is_terminal(text) IS
    'True for the VcJob phases a job never leaves (Completed, Failed, Terminated); mirrors tracking.IsTerminal.';

-- jobvault_pod_phase_is_terminal: a pod in Succeeded or Failed never runs again.
CREATE FUNCTION jobvault_pod_phase_is_terminal(phase text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT phase IN ('Succeeded', 'Failed') $$;

-- jobvault_touch sets updated_at when, and only when, an UPDATE changes a row, and skips an UPDATE
-- that changes nothing: an idempotent upsert repeated after a crash or a resync writes no new row
-- version and leaves updated_at alone.
CREATE FUNCTION jobvault_touch() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW IS NOT DISTINCT FROM OLD THEN
        RETURN NULL;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION jobvault_touch() IS
    'BEFORE UPDATE trigger: skips no-op updates and stamps updated_at on real ones.';

COMMENT ON FUNCTION jobvault_pod_phase_is_terminal(text) IS
    'True for the pod phases a pod never leaves (Succeeded, Failed).';

CREATE TABLE jobs (
    uid              text        PRIMARY KEY,
    cluster          text        NOT NULL DEFAULT '',
    namespace        text        NOT NULL,
    name             text        NOT NULL,
    queue            text        NOT NULL DEFAULT '',
    -- NULL when unknown (the job was admitted while the webhook was down). The first recorded value
    -- is kept: the annotation it comes from is editable by anyone who may update the job.
    submitter        text,
    submitter_groups text[],
    admitted_at      timestamptz,
    created_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    phase            text        NOT NULL DEFAULT '',
    retry_count      integer     NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    labels           jsonb       NOT NULL DEFAULT '{}',
    annotations      jsonb       NOT NULL DEFAULT '{}',
    spec             jsonb,
    status           jsonb,
    archive_state    text        NOT NULL DEFAULT 'pending'
                                 CHECK (archive_state IN ('pending', 'archived', 'released')),
    archive_location text,
    archived_at      timestamptz,
    release_reason   text,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (archive_state = 'pending' OR archived_at IS NOT NULL),
    CHECK (archive_state <> 'released' OR release_reason IS NOT NULL)
);

COMMENT ON TABLE jobs IS
    'One row per tracked Volcano Job (VcJob), keyed by its UID; upserted by the archiver on every change.';
COMMENT ON COLUMN jobs.submitter IS
    'Username of the request that created the job, from the admission webhook; NULL if unknown. First recorded value wins.';
COMMENT ON COLUMN jobs.submitter_groups IS 'Groups of the submitter at admission; NULL if unknown.';
COMMENT ON COLUMN jobs.admitted_at IS 'Time the webhook admitted the job; NULL if unknown.';
COMMENT ON COLUMN jobs.created_at IS 'metadata.creationTimestamp of the VcJob.';
COMMENT ON COLUMN jobs.finished_at IS 'Time the job reached a terminal phase; NULL while it runs.';
COMMENT ON COLUMN jobs.phase IS 'Latest recorded status.state.phase; never moves from a terminal phase back to a non-terminal one.';
COMMENT ON COLUMN jobs.retry_count IS 'status.retryCount of the VcJob.';
COMMENT ON COLUMN jobs.archive_state IS
    'pending: not yet finalized; archived: job object and all pod logs durable; released: finalized without a complete archive (deadline or escape hatch), see release_reason. Never moves back to pending.';
COMMENT ON COLUMN jobs.archive_location IS 'URL of the job''s archive prefix in object storage.';
COMMENT ON COLUMN jobs.release_reason IS 'Why the job was released without a complete archive; NULL when archived normally.';

-- Audit and listing indexes. Each ends in (created_at, uid), the keyset of ListJobs, so a filtered
-- page is one index range scan.
CREATE TRIGGER jobs_touch BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION jobvault_touch();

CREATE INDEX jobs_created_idx           ON jobs (created_at, uid);
CREATE INDEX jobs_namespace_created_idx ON jobs (namespace, created_at, uid);
CREATE INDEX jobs_submitter_created_idx ON jobs (submitter, created_at, uid);
CREATE INDEX jobs_phase_created_idx     ON jobs (phase, created_at, uid);
CREATE INDEX jobs_pending_idx           ON jobs (created_at) WHERE archive_state = 'pending';

CREATE TABLE job_transitions (
    id               bigserial   PRIMARY KEY,
    job_uid          text        NOT NULL REFERENCES jobs (uid) ON DELETE CASCADE,
    phase            text        NOT NULL CHECK (phase <> ''),
    transition_time  timestamptz NOT NULL,
    reason           text        NOT NULL DEFAULT '',
    message          text        NOT NULL DEFAULT '',
    resource_version text        NOT NULL DEFAULT '',
    observed_at      timestamptz NOT NULL DEFAULT now(),
    source           text        NOT NULL CHECK (source IN ('condition', 'observed')),
    UNIQUE (job_uid, phase, transition_time)
);

COMMENT ON TABLE job_transitions IS
    'Every phase transition of a job, recorded once per (job_uid, phase, transition_time), whether read back from status.conditions (source condition) or seen live (source observed).';
COMMENT ON COLUMN job_transitions.observed_at IS 'When the archiver recorded the transition (later than transition_time if it was down).';
COMMENT ON COLUMN job_transitions.resource_version IS 'resourceVersion of the VcJob the transition was read from.';

CREATE INDEX job_transitions_job_time_idx ON job_transitions (job_uid, transition_time);

-- Portals LISTEN on jobvault_transitions to push state changes without polling. An AFTER INSERT row
-- trigger fires exactly once per new row and never for a row skipped by ON CONFLICT DO NOTHING;
-- notifications are delivered at commit, so listeners never see a rolled-back transition.
CREATE FUNCTION jobvault_notify_transition() RETURNS trigger
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

CREATE TRIGGER job_transitions_notify
    AFTER INSERT ON job_transitions
    FOR EACH ROW EXECUTE FUNCTION jobvault_notify_transition();

-- pods.job_uid deliberately has no foreign key to jobs: the pod reconciler may archive a pod (and
-- Volcano may delete it) before the job reconciler has written the job row.
CREATE TABLE pods (
    uid                     text        PRIMARY KEY,
    job_uid                 text        NOT NULL,
    namespace               text        NOT NULL,
    name                    text        NOT NULL,
    task                    text        NOT NULL DEFAULT '',
    node                    text        NOT NULL DEFAULT '',
    phase                   text        NOT NULL DEFAULT '',
    created_at              timestamptz NOT NULL,
    started_at              timestamptz,
    finished_at             timestamptz,
    deleted_before_terminal boolean     NOT NULL DEFAULT false,
    archive_state           text        NOT NULL DEFAULT 'pending'
                                        CHECK (archive_state IN ('pending', 'archived', 'released')),
    archived_at             timestamptz,
    release_reason          text,
    recorded_at             timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    CHECK (archive_state = 'pending' OR archived_at IS NOT NULL),
    CHECK (archive_state <> 'released' OR release_reason IS NOT NULL)
);

COMMENT ON TABLE pods IS
    'One row per pod of a tracked job, keyed by pod UID (Volcano recreates pods under the same name with a new UID). job_uid has no foreign key: a pod may be recorded before its job.';
COMMENT ON COLUMN pods.deleted_before_terminal IS
    'The pod was being deleted before it reached Succeeded or Failed (restart policy, job abort, cascade); sticky once true.';
COMMENT ON COLUMN pods.archive_state IS
    'pending, archived (all container logs durable) or released (finalized without them, see release_reason). Never moves back to pending.';

CREATE TRIGGER pods_touch BEFORE UPDATE ON pods FOR EACH ROW EXECUTE FUNCTION jobvault_touch();

CREATE INDEX pods_job_idx ON pods (job_uid, created_at);

CREATE TABLE log_objects (
    pod_uid        text        NOT NULL REFERENCES pods (uid) ON DELETE CASCADE,
    container      text        NOT NULL CHECK (container <> ''),
    container_type text        NOT NULL CHECK (container_type IN ('init', 'regular', 'ephemeral')),
    instance       text        NOT NULL CHECK (instance = 'current' OR instance ~ '^previous-[0-9]+$'),
    object_key     text,
    bytes          bigint      NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    stored_bytes   bigint      NOT NULL DEFAULT 0 CHECK (stored_bytes >= 0),
    sha256         text        CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    state          text        NOT NULL CHECK (state IN ('stored', 'unavailable')),
    reason         text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pod_uid, container, instance),
    CHECK (state <> 'stored' OR (object_key IS NOT NULL AND sha256 IS NOT NULL)),
    CHECK (state <> 'unavailable' OR reason IS NOT NULL)
);

CREATE TRIGGER log_objects_touch BEFORE UPDATE ON log_objects FOR EACH ROW EXECUTE FUNCTION jobvault_touch();

COMMENT ON TABLE log_objects IS
    'One row per archived (or unobtainable) container log: unique per pod, container and instance.';
COMMENT ON COLUMN log_objects.instance IS
    'current: the log of the container''s last run, fetched once the pod is terminal or being deleted. previous-N: the log of the run that ended when restartCount reached N (the run numbered N-1 from 0), fetched with previous=true.';
COMMENT ON COLUMN log_objects.bytes IS 'Uncompressed size of the log in bytes.';
COMMENT ON COLUMN log_objects.stored_bytes IS 'Size of the stored (gzip) object in bytes.';
COMMENT ON COLUMN log_objects.sha256 IS 'Lower-case hex SHA-256 of the uncompressed log.';
COMMENT ON COLUMN log_objects.state IS
    'stored: the object is durable at object_key (final, never downgraded); unavailable: the log could not be fetched before the deadline, see reason.';

-- Audit views. They read only committed state and are safe to expose read-only to auditors.

CREATE VIEW audit_submissions AS
SELECT j.uid,
       j.cluster,
       j.namespace,
       j.name,
       j.queue,
       j.submitter,
       j.submitter_groups,
       j.admitted_at,
       j.created_at,
       j.phase,
       j.labels,
       j.annotations
FROM jobs j;

COMMENT ON VIEW audit_submissions IS
    'Who submitted which job and when: one row per job with its submitter (NULL if unknown), groups, admission and creation times, queue and current phase. Filter on namespace, submitter and created_at ranges (indexed).';

CREATE VIEW audit_outcomes AS
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
    SELECT min(jt.transition_time) FILTER (WHERE jt.phase = 'Running')                          AS started_at,
           max(jt.transition_time) FILTER (WHERE jobvault_job_phase_is_terminal(jt.phase))      AS terminal_at
    FROM job_transitions jt
    WHERE jt.job_uid = j.uid
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

CREATE VIEW audit_retries AS
SELECT j.uid,
       j.cluster,
       j.namespace,
       j.name,
       j.submitter,
       j.phase,
       j.retry_count,
       t.running_transitions,
       t.restarting_transitions,
       t.transitions
FROM jobs j
JOIN LATERAL (
    SELECT count(*) FILTER (WHERE jt.phase = 'Running')    AS running_transitions,
           count(*) FILTER (WHERE jt.phase = 'Restarting') AS restarting_transitions,
           COALESCE(jsonb_agg(jsonb_build_object('phase', jt.phase, 'time', jt.transition_time, 'reason', jt.reason)
                              ORDER BY jt.transition_time, jt.id), '[]') AS transitions
    FROM job_transitions jt
    WHERE jt.job_uid = j.uid
) t ON true
WHERE j.retry_count > 0 OR t.running_transitions > 1;

COMMENT ON VIEW audit_retries IS
    'Jobs that were retried: retry_count > 0 or more than one Running transition. Lists the counts and the ordered phase history (phase, time, reason) as JSON.';

CREATE VIEW audit_log_objects AS
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
       lo.updated_at
FROM log_objects lo
JOIN pods po ON po.uid = lo.pod_uid
LEFT JOIN jobs j ON j.uid = po.job_uid;

COMMENT ON VIEW audit_log_objects IS
    'Every container log of every pod with its job, pod, task, node and container, object key, uncompressed and stored sizes, SHA-256 (hex of the uncompressed bytes) and state (stored, or unavailable with the reason). job_namespace/job_name are NULL until the job row exists.';

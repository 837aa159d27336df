-- Capture at the source (issue 25): a node agent reads the container log files themselves, held
-- open until their bytes are stored, beside the API capture through pods/log. Each container run
-- has one owner at a time, recorded here: the archiver assigns it once, when it first captures the
-- run (the agent if the pod's node has a healthy agent, else the API), and takes a run over from an
-- agent that went silent or gave it up. Ownership never moves back to the agent. The agent's
-- segment and gap writes are fenced by the owner, in the same statement: no byte is stored by both.

-- One row per node agent: its heartbeat (the database's clock) and the bytes it holds of files
-- that were deleted or rotated away (kept on the node's disk by its open descriptors).
CREATE TABLE capture_agents (
    node          text        PRIMARY KEY CHECK (node <> ''),
    heartbeat_at  timestamptz NOT NULL,
    held_bytes    bigint      NOT NULL DEFAULT 0 CHECK (held_bytes >= 0),
    first_seen_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE capture_agents IS
    'Node agents (archiver agent): heartbeat_at is the database''s clock at the agent''s last heartbeat; an agent is healthy while it is recent. held_bytes: bytes of deleted or rotated files the agent holds open.';

-- One row per container run captured since this migration: who captures it, and the hand-over.
-- The job and pod names are copied from the archiver's claim, so that the agent builds the run's
-- object keys without reading the pods or jobs tables (a pod may be recorded before its job).
CREATE TABLE log_runs (
    pod_uid          text        NOT NULL REFERENCES pods (uid) ON DELETE CASCADE,
    container        text        NOT NULL CHECK (container <> ''),
    run              integer     NOT NULL CHECK (run >= 0),
    node             text        NOT NULL DEFAULT '',
    namespace        text        NOT NULL CHECK (namespace <> ''),
    pod_name         text        NOT NULL CHECK (pod_name <> ''),
    job_name         text        NOT NULL CHECK (job_name <> ''),
    job_uid          text        NOT NULL CHECK (job_uid <> ''),
    owner            text        NOT NULL CHECK (owner IN ('agent', 'api')),
    claimed_owner    text        NOT NULL CHECK (claimed_owner IN ('agent', 'api')),
    over             boolean     NOT NULL DEFAULT false,
    complete         boolean     NOT NULL DEFAULT false,
    claimed_at       timestamptz NOT NULL DEFAULT now(),
    handed_over_at   timestamptz,
    hand_over_reason text,
    completed_at     timestamptz,
    PRIMARY KEY (pod_uid, container, run),
    CHECK (NOT complete OR (owner = 'agent' AND over AND completed_at IS NOT NULL)),
    CHECK ((owner = claimed_owner) = (handed_over_at IS NULL)),
    CHECK ((handed_over_at IS NULL) = (hand_over_reason IS NULL))
);

-- The agent's poll: its node's runs that it owns and has not completed.
CREATE INDEX log_runs_agent ON log_runs (node) WHERE owner = 'agent' AND NOT complete;

COMMENT ON TABLE log_runs IS
    'Who captures each container run: owner agent (the node agent, from the files) or api (the archiver, through pods/log). claimed_owner is the owner first assigned; a hand-over (agent to api, never back) has its time and reason. over: the archiver saw the run end; complete: the agent stored all of it.';

-- A run's row only moves forward: the owner from agent to api, over and complete from false to
-- true; what names the run never changes. This binds the agent's role, which may update the
-- owner (to give a run up) and completion of its runs.
CREATE FUNCTION jobvault_log_run_forward() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.pod_uid, NEW.container, NEW.run, NEW.node, NEW.namespace, NEW.pod_name, NEW.job_name, NEW.job_uid,
        NEW.claimed_owner, NEW.claimed_at)
       IS DISTINCT FROM
       (OLD.pod_uid, OLD.container, OLD.run, OLD.node, OLD.namespace, OLD.pod_name, OLD.job_name, OLD.job_uid,
        OLD.claimed_owner, OLD.claimed_at)
       OR (OLD.owner = 'api' AND NEW.owner = 'agent')
       OR (OLD.over AND NOT NEW.over)
       OR (OLD.complete AND NOT NEW.complete)
       OR (OLD.handed_over_at IS NOT NULL AND (NEW.handed_over_at, NEW.hand_over_reason) IS DISTINCT FROM (OLD.handed_over_at, OLD.hand_over_reason))
       OR (OLD.completed_at IS NOT NULL AND NEW.completed_at IS DISTINCT FROM OLD.completed_at) THEN
        RAISE EXCEPTION 'jobvault: log_runs rows only move forward (owner agent to api, over and complete to true): update refused'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER log_runs_forward BEFORE UPDATE ON log_runs
    FOR EACH ROW EXECUTE FUNCTION jobvault_log_run_forward();

-- Segments say which capture stored them, and the stream (stdout, stderr) of their bytes when
-- the agent read them from the files; source_position is where in its source a segment ends
-- (the agent: the file and offset), opaque to the archiver.
ALTER TABLE log_segments
    ADD COLUMN source          text  NOT NULL DEFAULT 'api' CHECK (source IN ('agent', 'api')),
    ADD COLUMN streams         bytea,
    ADD COLUMN source_position bytea;

COMMENT ON COLUMN log_segments.source IS 'Which capture stored the segment: agent (the node agent, from the files) or api (pods/log).';
COMMENT ON COLUMN log_segments.streams IS 'The stream of each byte of the segment, run-length encoded (see pkg/capture); NULL: unknown (captured through pods/log).';
COMMENT ON COLUMN log_segments.source_position IS 'Where in its source the segment ends (the agent: file identity and offset); opaque to the archiver. NULL: not recorded.';

-- Which capture stored which bytes of each archived log, kept once the segments are assembled and
-- deleted: byte ranges [from_bytes, to_bytes) of the uncompressed log. Append-only.
CREATE TABLE log_sources (
    pod_uid     text        NOT NULL REFERENCES pods (uid) ON DELETE CASCADE,
    container   text        NOT NULL CHECK (container <> ''),
    run         integer     NOT NULL CHECK (run >= 0),
    instance    text        NOT NULL CHECK (instance <> ''),
    from_bytes  bigint      NOT NULL CHECK (from_bytes >= 0),
    to_bytes    bigint      NOT NULL CHECK (to_bytes > from_bytes),
    source      text        NOT NULL CHECK (source IN ('agent', 'api')),
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pod_uid, container, run, from_bytes)
);

COMMENT ON TABLE log_sources IS
    'Which capture stored each byte range [from_bytes, to_bytes) of a container run''s archived log: agent (from the node''s files) or api (through pods/log). Append-only.';

CREATE TRIGGER log_sources_append_only BEFORE UPDATE OR DELETE ON log_sources
    FOR EACH ROW EXECUTE FUNCTION jobvault_append_only();
CREATE TRIGGER log_sources_append_only_truncate BEFORE TRUNCATE ON log_sources
    FOR EACH STATEMENT EXECUTE FUNCTION jobvault_append_only();

CREATE VIEW audit_log_sources AS
SELECT po.job_uid,
       j.namespace  AS job_namespace,
       j.name       AS job_name,
       po.uid       AS pod_uid,
       po.name      AS pod_name,
       po.node,
       s.container,
       s.run,
       s.instance,
       s.from_bytes,
       s.to_bytes,
       s.source,
       r.claimed_owner,
       r.owner,
       r.handed_over_at,
       r.hand_over_reason,
       s.recorded_at,
       j.created_at AS job_created_at
FROM log_sources s
JOIN pods po ON po.uid = s.pod_uid
LEFT JOIN log_runs r ON r.pod_uid = s.pod_uid AND r.container = s.container AND r.run = s.run
LEFT JOIN jobs j ON j.uid = po.job_uid;

COMMENT ON VIEW audit_log_sources IS
    'Which capture stored each byte range of each archived container log: source agent (the node agent, from the files) or api (pods/log), with the run''s first and final owner and the hand-over''s time and reason, if any.';

-- jobvault_agent: the node agent's role. It reads the runs (its node's) and their segments, writes
-- segments and gaps (fenced by the owner), its heartbeat, and its runs' completion or release.
-- It reads no pod, job or log record and deletes nothing. One role serves every node's agent.
-- As for the roles of 0005, the migration creates it when the migrating user may (CREATEROLE);
-- otherwise a DBA runs
--     CREATE ROLE jobvault_agent NOLOGIN;
-- then, as the owner of the jobvault tables: SELECT jobvault_grant_roles();
CREATE OR REPLACE FUNCTION jobvault_grant_roles() RETURNS void
    LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_writer') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobvault_writer', current_schema());
        GRANT SELECT, INSERT, UPDATE ON jobs, pods, log_objects TO jobvault_writer;
        GRANT SELECT, INSERT ON job_transitions, log_gaps TO jobvault_writer;
        GRANT SELECT, INSERT, DELETE ON log_segments TO jobvault_writer;
        GRANT USAGE ON SEQUENCE job_transitions_id_seq TO jobvault_writer;
        GRANT SELECT ON schema_migrations TO jobvault_writer;
        GRANT SELECT ON audit_submissions, audit_outcomes, audit_retries, audit_log_objects, audit_log_gaps TO jobvault_writer;
        -- The audit chain (0004): entries and signed digests are appended, the head moves.
        GRANT SELECT, INSERT ON audit_chain, audit_digests TO jobvault_writer;
        GRANT SELECT, INSERT, UPDATE ON audit_chain_heads TO jobvault_writer;
        -- Capture at the source (0013): the archiver claims, ends and takes over runs, reads the
        -- agents' heartbeats and records which capture stored what.
        GRANT SELECT, INSERT, UPDATE ON log_runs TO jobvault_writer;
        GRANT SELECT ON capture_agents TO jobvault_writer;
        GRANT SELECT, INSERT ON log_sources TO jobvault_writer;
        GRANT SELECT ON audit_log_sources TO jobvault_writer;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_auditor') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobvault_auditor', current_schema());
        GRANT SELECT ON audit_submissions, audit_outcomes, audit_retries, audit_log_objects, audit_log_gaps TO jobvault_auditor;
        -- The audit chain and its signed digests are evidence an auditor reads as they are.
        GRANT SELECT ON audit_chain, audit_chain_heads, audit_digests TO jobvault_auditor;
        -- The retention pruner's records (0007).
        GRANT SELECT ON audit_prunes TO jobvault_auditor;
        -- Which capture stored what (0013).
        GRANT SELECT ON audit_log_sources TO jobvault_auditor;
    END IF;
    -- The retention pruner (0008), granted with jobvault_writer: it records each prune, then
    -- deletes the jobs and pods (their transitions, logs, gaps and segments cascade, as the
    -- tables' owner). Only in a transaction that runs SET LOCAL jobvault.prune = 'on' (0005).
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_pruner') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobvault_pruner', current_schema());
        GRANT DELETE ON jobs, pods TO jobvault_pruner;
        GRANT SELECT, INSERT ON audit_prunes TO jobvault_pruner;
    END IF;
    -- The node agent (0013). Row locks (FOR SHARE, the fence of its writes) need an UPDATE
    -- privilege on the row's table, which its column grants give.
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_agent') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobvault_agent', current_schema());
        GRANT SELECT, INSERT ON capture_agents TO jobvault_agent;
        GRANT UPDATE (heartbeat_at, held_bytes) ON capture_agents TO jobvault_agent;
        GRANT SELECT ON log_runs TO jobvault_agent;
        GRANT UPDATE (owner, complete, completed_at, handed_over_at, hand_over_reason) ON log_runs TO jobvault_agent;
        GRANT SELECT, INSERT ON log_segments, log_gaps TO jobvault_agent;
    END IF;
END
$$;

COMMENT ON FUNCTION jobvault_grant_roles() IS
    'Grants this database''s privileges to jobvault_writer (the archiver''s writes), jobvault_pruner (the retention pruner''s deletions, with the writer), jobvault_agent (the node agent''s fenced writes) and jobvault_auditor (SELECT on the audit views and records), those that exist. Run by the migration; run it again, as the tables'' owner, after creating the roles by hand.';

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_agent') THEN
        BEGIN
            CREATE ROLE jobvault_agent NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- created meanwhile by the migration of another database
            WHEN insufficient_privilege THEN
                RAISE WARNING 'jobvault: role jobvault_agent not created: the migrating user % lacks CREATEROLE', current_user
                    USING HINT = 'The roles are optional. To use them, have a DBA create it (CREATE ROLE jobvault_agent NOLOGIN), then run SELECT jobvault_grant_roles() as the owner of the jobvault tables.';
        END;
    END IF;
    PERFORM jobvault_grant_roles();
END
$$;

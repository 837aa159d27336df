-- The archive API (issue 27, `archiver api`) reads with a role of its own, jobvault_reader:
-- SELECT on the tables it serves (a job's row, its transitions, pods, log objects and gaps) and
-- nothing else; it writes nothing, and reads no segment, run, agent or chain row. As for the roles
-- of 0005, the migration creates it when the migrating user may (CREATEROLE); otherwise a DBA runs
--     CREATE ROLE jobvault_reader NOLOGIN;
-- then, as the owner of the jobvault tables: SELECT jobvault_grant_roles();
-- A login of the API server is a member: CREATE ROLE jobvault_api LOGIN IN ROLE jobvault_reader.

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
    -- The archive API (0014, archiver api): reads what it serves, nothing else. No segments,
    -- runs, chain or agents: a job's record, its transitions, pods, stored logs and gaps.
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_reader') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobvault_reader', current_schema());
        GRANT SELECT ON jobs, job_transitions, pods, log_objects, log_gaps TO jobvault_reader;
    END IF;
END
$$;

COMMENT ON FUNCTION jobvault_grant_roles() IS
    'Grants this database''s privileges to jobvault_writer (the archiver''s writes), jobvault_pruner (the retention pruner''s deletions, with the writer), jobvault_agent (the node agent''s fenced writes), jobvault_reader (the archive API''s reads) and jobvault_auditor (SELECT on the audit views and records), those that exist. Run by the migration; run it again, as the tables'' owner, after creating the roles by hand.';

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_reader') THEN
        BEGIN
            CREATE ROLE jobvault_reader NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- created meanwhile by the migration of another database
            WHEN insufficient_privilege THEN
                RAISE WARNING 'jobvault: role jobvault_reader not created: the migrating user % lacks CREATEROLE', current_user
                    USING HINT = 'The roles are optional. To use them, have a DBA create it (CREATE ROLE jobvault_reader NOLOGIN), then run SELECT jobvault_grant_roles() as the owner of the jobvault tables.';
        END;
    END IF;
    PERFORM jobvault_grant_roles();
END
$$;

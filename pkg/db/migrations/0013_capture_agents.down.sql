-- Reverts 0013_capture_agents.up.sql. The role jobvault_agent belongs to the whole Postgres
-- cluster and may serve other jobvault databases: only this database's privileges are revoked;
-- drop it by hand once unused.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_agent') THEN
        REVOKE ALL ON capture_agents, log_runs, log_segments, log_gaps FROM jobvault_agent;
        EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM jobvault_agent', current_schema());
    END IF;
END
$$;

DROP VIEW audit_log_sources;
DROP TABLE log_sources;
ALTER TABLE log_segments
    DROP COLUMN source,
    DROP COLUMN streams,
    DROP COLUMN source_position;
DROP TABLE log_runs;
DROP FUNCTION jobvault_log_run_forward();
DROP TABLE capture_agents;

-- jobvault_grant_roles as 0008 defined it.
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
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_auditor') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobvault_auditor', current_schema());
        GRANT SELECT ON audit_submissions, audit_outcomes, audit_retries, audit_log_objects, audit_log_gaps TO jobvault_auditor;
        -- The audit chain and its signed digests are evidence an auditor reads as they are.
        GRANT SELECT ON audit_chain, audit_chain_heads, audit_digests TO jobvault_auditor;
        -- The retention pruner's records (0007).
        GRANT SELECT ON audit_prunes TO jobvault_auditor;
    END IF;
    -- The retention pruner (0008), granted with jobvault_writer: it records each prune, then
    -- deletes the jobs and pods (their transitions, logs, gaps and segments cascade, as the
    -- tables' owner). Only in a transaction that runs SET LOCAL jobvault.prune = 'on' (0005).
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_pruner') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobvault_pruner', current_schema());
        GRANT DELETE ON jobs, pods TO jobvault_pruner;
        GRANT SELECT, INSERT ON audit_prunes TO jobvault_pruner;
    END IF;
END
$$;

COMMENT ON FUNCTION jobvault_grant_roles() IS
    'Grants this database''s privileges to jobvault_writer (the archiver''s writes), jobvault_pruner (the retention pruner''s deletions, with the writer) and jobvault_auditor (SELECT on the audit views and records), those that exist. Run by the migration; run it again, as the tables'' owner, after creating the roles by hand.';


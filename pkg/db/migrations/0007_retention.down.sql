-- Reverts 0007_retention.up.sql.
-- jobvault_grant_roles as 0005 defined it (without audit_prunes).
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
    END IF;
END
$$;

DROP TABLE IF EXISTS audit_prunes;
DROP INDEX IF EXISTS jobs_retain_until;
DROP TRIGGER IF EXISTS jobs_retention_rules ON jobs;
DROP FUNCTION IF EXISTS jobvault_retention_rules();

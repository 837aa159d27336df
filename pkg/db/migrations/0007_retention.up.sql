-- jobvault schema, version 7: retention and legal holds (columns from 0004), and the record of
-- what the retention pruner deleted.
--
-- A finalized job's retain_until is set when it is finalized (FinalizeJob) and may then only move
-- later: an edit that would shorten or clear it keeps the old date. (0004's freeze trigger leaves
-- retain_until and legal_hold out on purpose: they are policy, not the record of what ran.)
--
-- legal_hold follows the job's jobvault.io/legal-hold annotation at each upsert (any value but
-- "" and "false" holds), so that the one place it is decided is the database.
CREATE FUNCTION jobvault_retention_rules() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.legal_hold := coalesce(NEW.annotations ->> 'jobvault.io/legal-hold', '') NOT IN ('', 'false');
    IF TG_OP = 'UPDATE' AND OLD.retain_until IS NOT NULL
       AND (NEW.retain_until IS NULL OR NEW.retain_until < OLD.retain_until) THEN
        NEW.retain_until := OLD.retain_until;
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION jobvault_retention_rules() IS
    'BEFORE INSERT/UPDATE on jobs: legal_hold follows the jobvault.io/legal-hold annotation; retain_until, once set, only moves later.';

CREATE TRIGGER jobs_retention_rules BEFORE INSERT OR UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION jobvault_retention_rules();

UPDATE jobs SET legal_hold = true
WHERE coalesce(annotations ->> 'jobvault.io/legal-hold', '') NOT IN ('', 'false');

CREATE INDEX jobs_retain_until ON jobs (retain_until) WHERE retain_until IS NOT NULL;

-- audit_prunes: one row per job the pruner deleted, written BEFORE it deletes anything, so that
-- no chain entry ever points at deleted rows or objects without saying why. The chain entry itself
-- stays (audit_chain is append-only): its seq, manifest sha256, previous hash and manifest bytes
-- keep the chain verifiable; verify reports such a job as pruned.
CREATE TABLE audit_prunes (
    cluster         text        NOT NULL,
    seq             bigint      NOT NULL,
    job_uid         text        NOT NULL PRIMARY KEY,
    manifest_sha256 text        NOT NULL CHECK (manifest_sha256 ~ '^[0-9a-f]{64}$'),
    -- The job's retain-until date when it was pruned (held jobs are never pruned).
    retain_until    timestamptz NOT NULL,
    -- The policy applied, e.g. "retention 720h0m0s (--retention)".
    policy          text        NOT NULL,
    -- The keys of the objects deleted (the manifest's objects and the manifest).
    objects         text[]      NOT NULL,
    -- When the pruner decided (its clock), and when the row was written (the database's).
    pruned_at       timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    -- No foreign key to audit_chain: it would change how a TRUNCATE of the chain is refused;
    -- verify checks each record against its entry.
    CHECK (pruned_at >= retain_until)
);

COMMENT ON TABLE audit_prunes IS
    'What the retention pruner deleted: one row per pruned job (its chain entry, retain-until date, policy, objects), written before the deletion. Append-only.';

CREATE TRIGGER audit_prunes_append_only BEFORE UPDATE OR DELETE ON audit_prunes
    FOR EACH ROW EXECUTE FUNCTION jobvault_refuse_change();
CREATE TRIGGER audit_prunes_no_truncate BEFORE TRUNCATE ON audit_prunes
    FOR EACH STATEMENT EXECUTE FUNCTION jobvault_refuse_change();

-- The auditor reads the prune records: jobvault_grant_roles (0005) now grants them too. The
-- writer role stays unable to delete anything recorded: an archiver running as it does not prune
-- (each pass fails with permission denied, logged). To prune under roles, grant a login of the
-- archiver DELETE on jobs, pods, log_objects, job_transitions and log_gaps, and SELECT, INSERT on
-- audit_prunes (see README, Retention).
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
END
$$;

SELECT jobvault_grant_roles();

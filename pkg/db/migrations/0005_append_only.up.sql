-- jobvault schema, version 5: append-only records, and optional database roles.
--
-- (Version 4 is the audit chain. golang-migrate applies the versions present in order and allows
-- gaps, so this file does not depend on 4's content.)
--
-- What auditors rely on must not change once written: a job's phase transitions, the rows of
-- stored logs (key, sizes, sha256) and the gaps of logs. Triggers refuse UPDATE and DELETE of
-- them, for every role, with SQLSTATE 23001 (restrict_violation) and a message naming the table
-- (pkg/db reports it as ErrAppendOnly). Only the retention pruner deletes them.
--
-- The pruner's contract: it deletes in a transaction that first runs
--     SET LOCAL jobvault.prune = 'on';
-- and deletes only what its retention allows (past its retain-until date, not under legal hold).
-- SET LOCAL ends with the transaction, so no other statement inherits it. A cascade counts as a
-- delete: deleting a job or pod row outside such a transaction fails if it has transitions, stored
-- logs or gaps.
--
-- The triggers bind every role, the tables' owner included, but the owner (and a superuser) can
-- still drop or disable them: give the archiver the jobvault_writer role below, which cannot.

-- jobvault_pruning reports whether the current transaction is the retention pruner's.
CREATE FUNCTION jobvault_pruning() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(current_setting('jobvault.prune', true), '') = 'on' $$;

COMMENT ON FUNCTION jobvault_pruning() IS
    'True in a transaction that ran SET LOCAL jobvault.prune = ''on'': the retention pruner''s, which alone may delete append-only rows.';

-- jobvault_append_only refuses every UPDATE, and every DELETE or TRUNCATE outside the pruner's
-- transaction. Inserts, including upserts that find the row and do nothing, pass.
CREATE FUNCTION jobvault_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'TRUNCATE') AND jobvault_pruning() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'jobvault: % rows are append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation',
              HINT = 'Recorded history never changes; only the retention pruner deletes it, in a transaction that ran SET LOCAL jobvault.prune = ''on''.';
END
$$;

COMMENT ON FUNCTION jobvault_append_only() IS
    'BEFORE UPDATE/DELETE/TRUNCATE trigger: refuses changes to append-only rows (SQLSTATE 23001); deletion only in the pruner''s transaction (jobvault_pruning).';

-- jobvault_stored_log_final makes a log_objects row final once stored: it may not change or go
-- (outside the pruner's transaction). An unavailable row may still become stored. An upsert that
-- finds a stored row with the same values passes: jobvault_touch then skips it as a no-op
-- (updated_at is left out of the comparison, so the triggers' order does not matter).
CREATE FUNCTION jobvault_stored_log_final() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        IF jobvault_pruning() THEN
            RETURN NULL;
        END IF;
    ELSIF OLD.state <> 'stored' THEN
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
        IF jobvault_pruning() THEN
            RETURN OLD;
        END IF;
    ELSIF (to_jsonb(NEW) - 'updated_at') IS NOT DISTINCT FROM (to_jsonb(OLD) - 'updated_at') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'jobvault: stored log_objects rows are final: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              HINT = 'A stored log''s key, sizes and sha256 never change; only the retention pruner deletes the row, in a transaction that ran SET LOCAL jobvault.prune = ''on''.';
END
$$;

COMMENT ON FUNCTION jobvault_stored_log_final() IS
    'BEFORE UPDATE/DELETE/TRUNCATE trigger on log_objects: a stored row never changes; deletion only in the pruner''s transaction (SQLSTATE 23001 otherwise).';

CREATE TRIGGER job_transitions_append_only BEFORE UPDATE OR DELETE ON job_transitions
    FOR EACH ROW EXECUTE FUNCTION jobvault_append_only();
CREATE TRIGGER job_transitions_append_only_truncate BEFORE TRUNCATE ON job_transitions
    FOR EACH STATEMENT EXECUTE FUNCTION jobvault_append_only();
CREATE TRIGGER log_gaps_append_only BEFORE UPDATE OR DELETE ON log_gaps
    FOR EACH ROW EXECUTE FUNCTION jobvault_append_only();
CREATE TRIGGER log_gaps_append_only_truncate BEFORE TRUNCATE ON log_gaps
    FOR EACH STATEMENT EXECUTE FUNCTION jobvault_append_only();
CREATE TRIGGER log_objects_stored_final BEFORE UPDATE OR DELETE ON log_objects
    FOR EACH ROW EXECUTE FUNCTION jobvault_stored_log_final();
CREATE TRIGGER log_objects_stored_final_truncate BEFORE TRUNCATE ON log_objects
    FOR EACH STATEMENT EXECUTE FUNCTION jobvault_stored_log_final();

-- Roles, optional: jobvault_writer holds what the archiver needs and nothing more (it cannot
-- update or delete append-only rows, nor drop or disable the triggers: it owns nothing);
-- jobvault_auditor may only read the audit views. Both are NOLOGIN group roles: grant them to
-- login roles (GRANT jobvault_writer TO archiver). Roles belong to the whole Postgres cluster, so
-- several jobvault databases share them; each database grants its own privileges.
--
-- jobvault_grant_roles grants this database's privileges to those of the two roles that exist.
-- The migration creates the roles when the migrating user may (CREATEROLE) and calls it; when it
-- may not, the migration still succeeds, with a warning, and a DBA runs:
--     CREATE ROLE jobvault_writer NOLOGIN;
--     CREATE ROLE jobvault_auditor NOLOGIN;
-- then, as the owner of the jobvault tables: SELECT jobvault_grant_roles();
CREATE FUNCTION jobvault_grant_roles() RETURNS void
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

COMMENT ON FUNCTION jobvault_grant_roles() IS
    'Grants this database''s privileges to jobvault_writer (the archiver''s writes) and jobvault_auditor (SELECT on the audit views), those that exist. Run by the migration; run it again, as the tables'' owner, after creating the roles by hand.';

DO $$
DECLARE
    role text;
BEGIN
    FOREACH role IN ARRAY ARRAY['jobvault_writer', 'jobvault_auditor'] LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = role);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role);
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- created meanwhile by the migration of another database
            WHEN insufficient_privilege THEN
                RAISE WARNING 'jobvault: role % not created: the migrating user % lacks CREATEROLE', role, current_user
                    USING HINT = 'The roles are optional. To use them, have a DBA create them (CREATE ROLE ' || role || ' NOLOGIN), then run SELECT jobvault_grant_roles() as the owner of the jobvault tables.';
        END;
    END LOOP;
    PERFORM jobvault_grant_roles();
END
$$;

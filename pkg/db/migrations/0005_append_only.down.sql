-- Undoes version 5. The roles belong to the whole Postgres cluster and may serve other jobvault
-- databases: only this database's privileges are revoked; drop the roles by hand once unused.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_writer') THEN
        REVOKE ALL ON jobs, pods, log_objects, job_transitions, log_gaps, log_segments, schema_migrations,
            audit_submissions, audit_outcomes, audit_retries, audit_log_objects, audit_log_gaps,
            audit_chain, audit_chain_heads, audit_digests FROM jobvault_writer;
        REVOKE ALL ON SEQUENCE job_transitions_id_seq FROM jobvault_writer;
        EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM jobvault_writer', current_schema());
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'jobvault_auditor') THEN
        REVOKE ALL ON audit_submissions, audit_outcomes, audit_retries, audit_log_objects, audit_log_gaps,
            audit_chain, audit_chain_heads, audit_digests FROM jobvault_auditor;
        EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM jobvault_auditor', current_schema());
    END IF;
END
$$;

DROP FUNCTION jobvault_grant_roles();

DROP TRIGGER log_objects_stored_final_truncate ON log_objects;
DROP TRIGGER log_objects_stored_final ON log_objects;
DROP TRIGGER log_gaps_append_only_truncate ON log_gaps;
DROP TRIGGER log_gaps_append_only ON log_gaps;
DROP TRIGGER job_transitions_append_only_truncate ON job_transitions;
DROP TRIGGER job_transitions_append_only ON job_transitions;

DROP FUNCTION jobvault_stored_log_final();
DROP FUNCTION jobvault_append_only();
DROP FUNCTION jobvault_pruning();

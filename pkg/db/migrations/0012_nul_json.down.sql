-- Reverts 0012_nul_json.up.sql: the raw JSON columns go (a job with U+0000 keeps only its jsonb
-- columns, with U+FFFD in its place), and jobvault_freeze_finalized is as 0009 made it.
CREATE OR REPLACE FUNCTION jobvault_freeze_finalized() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.archive_state <> 'pending' THEN
        NEW.uid              := OLD.uid;
        NEW.cluster          := OLD.cluster;
        NEW.namespace        := OLD.namespace;
        NEW.name             := OLD.name;
        NEW.queue            := OLD.queue;
        NEW.submitter        := OLD.submitter;
        NEW.submitter_groups := OLD.submitter_groups;
        NEW.admitted_at      := OLD.admitted_at;
        NEW.created_at       := OLD.created_at;
        NEW.finished_at      := OLD.finished_at;
        NEW.phase            := OLD.phase;
        NEW.retry_count      := OLD.retry_count;
        NEW.spec             := OLD.spec;
        NEW.status           := OLD.status;
        NEW.archive_state    := OLD.archive_state;
        NEW.archive_location := OLD.archive_location;
        NEW.archived_at      := OLD.archived_at;
        NEW.release_reason   := OLD.release_reason;
        IF OLD.final_pods IS NOT NULL THEN
            NEW.final_pods                         := OLD.final_pods;
            NEW.final_pods_deleted_before_terminal := OLD.final_pods_deleted_before_terminal;
            NEW.final_logs_stored                  := OLD.final_logs_stored;
            NEW.final_logs_unavailable             := OLD.final_logs_unavailable;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

ALTER TABLE jobs
    DROP COLUMN annotations_raw,
    DROP COLUMN spec_raw,
    DROP COLUMN status_raw;

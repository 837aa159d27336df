-- Postgres' jsonb refuses the JSON escape \u0000 (U+0000), which a tenant may put in any string of
-- a VcJob (an annotation's value, a container's argument) and Volcano may copy into its status: the
-- job's row could not be written at all, and its finalizer was held for ever. Such a value is kept
-- exactly, as the JSON text the archiver was given, in a text column beside its jsonb column (text
-- holds the six characters of the escape; only jsonb decodes it); the jsonb column then holds the
-- same JSON with U+FFFD (the replacement character) in place of each U+0000, for queries. NULL
-- when the value has no U+0000: the jsonb column is then the record. Readers take the raw column
-- when it is set (db.Job does).
ALTER TABLE jobs
    ADD COLUMN annotations_raw text,
    ADD COLUMN spec_raw        text,
    ADD COLUMN status_raw      text;

COMMENT ON COLUMN jobs.annotations_raw IS 'annotations exactly as JSON text when a value holds U+0000 (jsonb cannot), else NULL; annotations then has U+FFFD in its place.';
COMMENT ON COLUMN jobs.spec_raw IS 'spec exactly as JSON text when it holds U+0000 (jsonb cannot), else NULL; spec then has U+FFFD in its place.';
COMMENT ON COLUMN jobs.status_raw IS 'status exactly as JSON text when it holds U+0000 (jsonb cannot), else NULL; status then has U+FFFD in its place.';

-- jobvault_freeze_finalized as 0009 made it, with the raw spec and status final too.
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
        NEW.spec_raw         := OLD.spec_raw;
        NEW.status_raw       := OLD.status_raw;
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

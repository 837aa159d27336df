-- jobvault schema, version 17: a stored log's row may say what the store accepted for it, so that
-- the seal need not read the object back (docs/design/0009).
--
-- stored_sha256 is the sha256 of the stored (gzip) object as the store checked it at the write
-- (S3's x-amz-checksum-sha256, GCS's CRC32C with the archiver's own sha256 of the bytes sent, the
-- fs backend's sha256 before its rename): the archiver writes it with the row only after the
-- store acknowledged that write. NULL when no such write stands behind the row (a log composed
-- from segments, a write that found the object locked by an earlier pass, rows older than this
-- version): the seal then reads the object back, as it always did.

ALTER TABLE log_objects
    ADD COLUMN stored_sha256 text CHECK (stored_sha256 ~ '^[0-9a-f]{64}$'),
    ADD CONSTRAINT log_objects_stored_sha256_stored CHECK (stored_sha256 IS NULL OR state = 'stored');

COMMENT ON COLUMN log_objects.stored_sha256 IS
    'Lower-case hex SHA-256 of the stored (gzip) object, as the store checked it when the object was written whole; NULL when the object is to be read back at the seal (composed from segments, found locked, or recorded before version 17). Not part of the record digest.';

-- A stored row stays final (0005), with one exception: its stored_sha256 may be dropped (set to
-- NULL), never set or changed. Two writes of the same log that disagree about it (a second pass
-- that found the object locked, or wrote it again) leave the row without a hash the store
-- vouched for, and the seal reads the object back. A change that only lowers what is trusted
-- cannot hide anything; every other change of a stored row is refused as before.
CREATE OR REPLACE FUNCTION jobvault_stored_log_final() RETURNS trigger
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
    ELSIF (to_jsonb(NEW) - 'updated_at' - 'stored_sha256') IS NOT DISTINCT FROM (to_jsonb(OLD) - 'updated_at' - 'stored_sha256')
          AND (NEW.stored_sha256 IS NULL OR NEW.stored_sha256 IS NOT DISTINCT FROM OLD.stored_sha256) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'jobvault: stored log_objects rows are final: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              HINT = 'A stored log''s key, sizes and sha256 never change (its stored_sha256 may only be dropped); only the retention pruner deletes the row, in a transaction that ran SET LOCAL jobvault.prune = ''on''.';
END
$$;

COMMENT ON FUNCTION jobvault_stored_log_final() IS
    'BEFORE UPDATE/DELETE/TRUNCATE trigger on log_objects: a stored row never changes, except that its stored_sha256 may be set to NULL; deletion only in the pruner''s transaction (SQLSTATE 23001 otherwise).';

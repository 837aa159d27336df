-- Undoes version 17: log_objects without stored_sha256, and jobvault_stored_log_final as 0005
-- defined it (the seal reads every stored log back again).

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

-- Dropping the column rewrites no row and fires no trigger.
ALTER TABLE log_objects DROP COLUMN stored_sha256;

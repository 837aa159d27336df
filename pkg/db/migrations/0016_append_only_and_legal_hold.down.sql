-- Undoes version 16: jobvault_retention_rules as 0007 defined it, without jobvault_legal_hold;
-- jobvault_refuse_change again for the triggers that let no one delete, and jobvault_append_only
-- as 0005 defined it for those the pruner may delete ('prunable').

CREATE OR REPLACE FUNCTION jobvault_retention_rules() RETURNS trigger
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

DROP FUNCTION jobvault_legal_hold(text);

CREATE FUNCTION jobvault_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% on % refused: the audit chain is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

COMMENT ON FUNCTION jobvault_refuse_change() IS
    'BEFORE UPDATE/DELETE/TRUNCATE trigger: refuses any change to an append-only audit table.';

DO $$
DECLARE
    t record;
BEGIN
    FOR t IN
        SELECT tg.tgname, tg.tgrelid::regclass AS rel, pg_get_triggerdef(tg.oid) AS def, tg.tgnargs
        FROM pg_trigger tg JOIN pg_proc p ON p.oid = tg.tgfoid
        WHERE NOT tg.tgisinternal AND p.pronamespace = current_schema()::regnamespace
          AND p.proname = 'jobvault_append_only'
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
        EXECUTE regexp_replace(t.def, 'EXECUTE FUNCTION .*$',
            CASE WHEN t.tgnargs > 0 THEN 'EXECUTE FUNCTION jobvault_append_only()'
                 ELSE 'EXECUTE FUNCTION jobvault_refuse_change()' END);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION jobvault_append_only() RETURNS trigger
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

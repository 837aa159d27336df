-- jobvault schema, version 16: one trigger function keeps rows append-only, and one function
-- decides what a legal hold annotation means.
--
-- Versions 4 and 5 had two: jobvault_refuse_change (the audit chain's tables: audit_chain,
-- audit_digests and, from 7, audit_prunes) refused every change; jobvault_append_only (recorded
-- history: job_transitions, log_gaps and, from 13, log_sources) also let the retention pruner's
-- transaction delete. Now jobvault_append_only does both, told by its trigger's argument:
-- 'prunable' lets the pruner's transaction (jobvault_pruning) delete; without it, nothing changes
-- the rows, not even the pruner. The stricter rule is the default, so a table given the trigger
-- without thinking about the pruner keeps its rows.
--
-- Every trigger of either function is moved, found in the catalog, so that tables other
-- migrations gave them move too: those of jobvault_refuse_change keep their rows from everyone,
-- those of jobvault_append_only stay prunable.

CREATE OR REPLACE FUNCTION jobvault_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    prunable boolean := TG_NARGS > 0 AND TG_ARGV[0] = 'prunable';
BEGIN
    IF prunable AND TG_OP IN ('DELETE', 'TRUNCATE') AND jobvault_pruning() THEN
        RETURN OLD;
    END IF;
    IF prunable THEN
        RAISE EXCEPTION 'jobvault: % rows are append-only: % refused', TG_TABLE_NAME, TG_OP
            USING ERRCODE = 'restrict_violation',
                  HINT = 'Recorded history never changes; only the retention pruner deletes it, in a transaction that ran SET LOCAL jobvault.prune = ''on''.';
    END IF;
    RAISE EXCEPTION 'jobvault: % rows are append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation',
              HINT = 'The audit chain''s evidence never changes, not even by the retention pruner.';
END
$$;

COMMENT ON FUNCTION jobvault_append_only() IS
    'BEFORE UPDATE/DELETE (per row) and TRUNCATE (per statement) trigger: refuses changes to append-only rows (SQLSTATE 23001). With the argument ''prunable'', the retention pruner''s transaction (jobvault_pruning) may delete them.';

DO $$
DECLARE
    t record;
BEGIN
    FOR t IN
        SELECT tg.tgname, tg.tgrelid::regclass AS rel, pg_get_triggerdef(tg.oid) AS def, p.proname
        FROM pg_trigger tg JOIN pg_proc p ON p.oid = tg.tgfoid
        WHERE NOT tg.tgisinternal AND p.pronamespace = current_schema()::regnamespace
          AND p.proname IN ('jobvault_refuse_change', 'jobvault_append_only')
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', t.tgname, t.rel);
        EXECUTE regexp_replace(t.def, 'EXECUTE FUNCTION .*$',
            CASE t.proname WHEN 'jobvault_append_only' THEN 'EXECUTE FUNCTION jobvault_append_only(''prunable'')'
                           ELSE 'EXECUTE FUNCTION jobvault_append_only()' END);
    END LOOP;
END
$$;

DROP FUNCTION jobvault_refuse_change();

-- jobvault_legal_hold decides what a jobvault.io/legal-hold annotation value means, for a job's
-- (jobvault_retention_rules, 0007) and a namespace's (the pruner's candidates, which pkg/db
-- selects with the namespaces' values) alike: any value but "" and "false" holds. The database
-- must enforce the hold (the pruner's deletion checks it), so it is the one place that decides.
CREATE FUNCTION jobvault_legal_hold(value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT coalesce(value, '') NOT IN ('', 'false') $$;

COMMENT ON FUNCTION jobvault_legal_hold(text) IS
    'Whether a jobvault.io/legal-hold annotation value places a legal hold: any value but '''' and ''false''. The one place the rule is decided, for jobs and namespaces.';

CREATE OR REPLACE FUNCTION jobvault_retention_rules() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.legal_hold := jobvault_legal_hold(NEW.annotations ->> 'jobvault.io/legal-hold');
    IF TG_OP = 'UPDATE' AND OLD.retain_until IS NOT NULL
       AND (NEW.retain_until IS NULL OR NEW.retain_until < OLD.retain_until) THEN
        NEW.retain_until := OLD.retain_until;
    END IF;
    RETURN NEW;
END
$$;

-- Reverts 0007_retention.up.sql.
DROP TABLE IF EXISTS audit_prunes;
DROP INDEX IF EXISTS jobs_retain_until;
DROP TRIGGER IF EXISTS jobs_retention_rules ON jobs;
DROP FUNCTION IF EXISTS jobvault_retention_rules();

-- Reverts 0004_audit_chain.up.sql, dropping the chain and its signed digests.
DROP TABLE IF EXISTS audit_digests;
DROP TABLE IF EXISTS audit_chain;
DROP TABLE IF EXISTS audit_chain_heads;
DROP TRIGGER IF EXISTS jobs_freeze_finalized ON jobs;
DROP TRIGGER IF EXISTS pods_freeze_finalized ON pods;
DROP FUNCTION IF EXISTS jobvault_freeze_finalized_pod();
DROP FUNCTION IF EXISTS jobvault_freeze_finalized();
DROP FUNCTION IF EXISTS jobvault_refuse_change();
ALTER TABLE jobs DROP COLUMN IF EXISTS legal_hold, DROP COLUMN IF EXISTS retain_until;

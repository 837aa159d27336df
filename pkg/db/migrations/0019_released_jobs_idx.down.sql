-- Reverts 0019_released_jobs_idx.up.sql.
DROP INDEX IF EXISTS jobs_namespace_released_created_idx;
DROP INDEX IF EXISTS jobs_released_created_idx;

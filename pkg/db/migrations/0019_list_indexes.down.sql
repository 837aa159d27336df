-- Reverts 0019_list_indexes.up.sql.
DROP INDEX IF EXISTS jobs_namespace_submitter_created_idx;
DROP INDEX IF EXISTS jobs_namespace_phase_created_idx;
DROP INDEX IF EXISTS jobs_namespace_released_created_idx;
DROP INDEX IF EXISTS jobs_released_created_idx;

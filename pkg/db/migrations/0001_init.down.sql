-- Reverts 0001_init.up.sql. Drops every jobvault object; the data is lost.
DROP VIEW IF EXISTS audit_log_objects;
DROP VIEW IF EXISTS audit_retries;
DROP VIEW IF EXISTS audit_outcomes;
DROP VIEW IF EXISTS audit_submissions;
DROP TABLE IF EXISTS log_objects;
DROP TABLE IF EXISTS pods;
DROP TRIGGER IF EXISTS job_transitions_notify ON job_transitions;
DROP TABLE IF EXISTS job_transitions;
DROP FUNCTION IF EXISTS jobvault_notify_transition();
DROP TABLE IF EXISTS jobs;
DROP FUNCTION IF EXISTS jobvault_touch();
DROP FUNCTION IF EXISTS jobvault_pod_phase_is_terminal(text);
DROP FUNCTION IF EXISTS jobvault_job_phase_is_terminal(text);

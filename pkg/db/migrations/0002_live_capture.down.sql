-- Reverts 0002_live_capture.up.sql.
DROP VIEW IF EXISTS audit_log_gaps;
DROP TABLE IF EXISTS log_gaps;
DROP TABLE IF EXISTS log_segments;

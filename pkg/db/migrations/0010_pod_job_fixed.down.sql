-- Reverts 0010_pod_job_fixed.up.sql.
DROP TRIGGER pods_job_fixed ON pods;
DROP FUNCTION jobvault_pod_job_fixed();

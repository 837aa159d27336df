-- jobvault schema, version 19: every field selector of the archive API's list reads about one
-- page of rows per page.
--
-- The archive API lists jobs with field selectors, in keyset pages ordered by (created_at, uid)
-- (ListJobs). A selector without an index of its own in that order walks another index and throws
-- rows away (make bench-api-list over 1M jobs, docs/performance.md):
--   - released jobs are rare (about 1% at audit scale, test/dbgen): status.archiveState=released
--     walked jobs_created_idx (or jobs_namespace_created_idx) and read 50,000 rows for a page of
--     500, 770 ms cold, 130 to 745 ms at p50 through the API. Two partial indexes hold the
--     released jobs alone, across namespaces and within one; they grow only as jobs are released.
--   - within a namespace, status.phase and spec.submitter walked the namespace's index (or the
--     phase's, the submitter's, across namespaces) and kept one row in 5 to 10 here, and one in
--     thousands for a rare phase or a submitter of many namespaces. Two indexes lead with the
--     namespace.

CREATE INDEX jobs_released_created_idx ON jobs (created_at, uid) WHERE archive_state = 'released';
CREATE INDEX jobs_namespace_released_created_idx ON jobs (namespace, created_at, uid) WHERE archive_state = 'released';
CREATE INDEX jobs_namespace_phase_created_idx ON jobs (namespace, phase, created_at, uid);
CREATE INDEX jobs_namespace_submitter_created_idx ON jobs (namespace, submitter, created_at, uid);

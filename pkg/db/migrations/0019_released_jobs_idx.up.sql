-- jobvault schema, version 19: released jobs are listed by an index of their own.
--
-- The archive API lists jobs with field selectors, in keyset pages ordered by (created_at, uid)
-- (ListJobs). Released jobs are rare (about 1% at audit scale, test/dbgen), so a list of
-- status.archiveState=released walked jobs_created_idx (or jobs_namespace_created_idx) and threw
-- away about 99 rows for every one it kept: 50,000 rows read for a page of 500, 770 ms cold and
-- 130 to 375 ms at p50 through the API over 1M jobs (make bench-api-list, docs/performance.md).
-- These partial indexes hold the released jobs alone, in the list's order, across namespaces and
-- within one: a page reads its 500 rows. They grow only when a job is released.

CREATE INDEX jobs_released_created_idx ON jobs (created_at, uid) WHERE archive_state = 'released';
CREATE INDEX jobs_namespace_released_created_idx ON jobs (namespace, created_at, uid) WHERE archive_state = 'released';

// Package dbgen loads a jobvault database with synthetic history at audit scale: jobs,
// their phase transitions, their pods and their pods' log objects, with skewed namespaces and
// submitters, mostly Completed jobs, some Failed, Terminated or Aborted, some retried
// (Restarting, Pending, Running repeats), spread over a year. `make bench-db` loads 1M jobs, 10M
// transitions and 20M log rows; `make test` loads a few thousand through the same code.
//
// Rows are generated inside Postgres (generate_series over a chunk of job numbers), so nothing
// crosses the wire but the statements. Every value derives from the job number and Config.Seed
// through hashint8extended: the same Config loads the same rows, byte for byte, wherever it runs.
// On empty tables the indexes and constraints are dropped during the load and rebuilt after it
// (each index built once, sorted, instead of 40M random inserts), then the tables are vacuumed and
// analysed, as autovacuum would have left a long-lived database.
package dbgen

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobvault/jobvault/pkg/db"
)

// Config sizes a load. Transitions and LogRows are targets: the generator draws retries and pods
// per job so that their means meet them (within a few percent; Stats has the exact counts).
type Config struct {
	Jobs        int
	Transitions int
	LogRows     int
	// Namespaces and Submitters are drawn with a power law: namespace i has about (i+1)^(1/3) − i^(1/3)
	// of the jobs, so the first holds a sixth of them; submitters likewise with exponent 1/2.5.
	Namespaces int
	Submitters int
	// End is the creation time of the newest job; the oldest is Span earlier.
	End  time.Time
	Span time.Duration
	// Seed varies every drawn value.
	Seed int
	// ChunkJobs is how many jobs one statement batch generates (with their rows), one transaction each.
	ChunkJobs int
	// Workers is how many connections load, index and vacuum in parallel.
	Workers int
}

// Defaults of the full scale (issue 13 item 5).
const (
	DefaultJobs        = 1_000_000
	DefaultTransitions = 10_000_000
	DefaultLogRows     = 20_000_000
)

// DefaultEnd is the default creation time of the newest job: fixed, so loads are reproducible.
var DefaultEnd = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// ConfigFromEnv is the full-scale Config, overridden by JOBVAULT_BENCH_DB_JOBS, _TRANSITIONS and
// _LOGS (transitions and logs default to 10 and 20 per job when only the jobs are given).
func ConfigFromEnv() (Config, error) {
	c := Config{Jobs: DefaultJobs}
	var errs []error
	get := func(name string, into *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Errorf("%s=%q: want a positive integer", name, v))
				return
			}
			*into = n
		}
	}
	get("JOBVAULT_BENCH_DB_JOBS", &c.Jobs)
	c.Transitions, c.LogRows = 10*c.Jobs, 20*c.Jobs
	get("JOBVAULT_BENCH_DB_TRANSITIONS", &c.Transitions)
	get("JOBVAULT_BENCH_DB_LOGS", &c.LogRows)
	return c.withDefaults(), errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	c.Jobs = cmp.Or(c.Jobs, DefaultJobs)
	c.Transitions = cmp.Or(c.Transitions, 10*c.Jobs)
	c.LogRows = cmp.Or(c.LogRows, 20*c.Jobs)
	c.Namespaces = cmp.Or(c.Namespaces, 200)
	c.Submitters = cmp.Or(c.Submitters, 5000)
	if c.End.IsZero() {
		c.End = DefaultEnd
	}
	c.Span = cmp.Or(c.Span, 365*24*time.Hour)
	c.ChunkJobs = cmp.Or(c.ChunkJobs, 10_000)
	c.Workers = cmp.Or(c.Workers, 3)
	return c
}

// Shape constants of the distributions (see the SQL below).
const (
	retriedShare      = 0.3  // of jobs that were retried at least once
	meanBasePath      = 3.9  // mean transitions of a job without retries (Pending, Running, ..., final)
	rowsPerRetry      = 3    // Restarting, Pending, Running
	containersPerPod  = 1.7  // main, plus a sidecar in 40% of jobs and an init container in 30%
	previousShare     = 0.05 // of pods whose main container restarted once (a previous-1 log)
	maxRetries        = 60
	maxPodsPerJob     = 2000
	unknownSubmitters = 0.05 // admitted while the webhook was down
)

// params derives the means the SQL draws from: mean retries of a retried job and mean pods of a
// job beyond the failed ones its retries leave.
func (c Config) params() (meanRetries, meanPods float64) {
	meanRetries = math.Max(1, (float64(c.Transitions)/float64(c.Jobs)-meanBasePath)/(rowsPerRetry*retriedShare))
	logsPerPod := containersPerPod * (1 + previousShare)
	meanPods = math.Max(1, float64(c.LogRows)/float64(c.Jobs)/logsPerPod-retriedShare*meanRetries)
	return meanRetries, meanPods
}

// Stats counts what a load left in the tables.
type Stats struct {
	Jobs, Transitions, Pods, LogRows int64
	// Bytes is the size of the four tables with their indexes and TOAST.
	Bytes int64
	// Load is the time spent inserting; Index the time rebuilding indexes and constraints; Count
	// the time recording finalized jobs' counts (schema 9 on); Vacuum the time of VACUUM ANALYZE.
	Load, Index, Count, Vacuum time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("%d jobs, %d transitions, %d pods, %d log rows; %.2f GiB with indexes; load %s, indexes %s, counts %s, vacuum %s",
		s.Jobs, s.Transitions, s.Pods, s.LogRows, float64(s.Bytes)/(1<<30),
		s.Load.Round(time.Second), s.Index.Round(time.Second), s.Count.Round(time.Second), s.Vacuum.Round(time.Second))
}

// tables are the tables the generator fills, parents first.
var tables = []string{"jobs", "job_transitions", "pods", "log_objects"}

// sessionSetup prepares each connection of a load. Bulk load: no triggers (NOTIFY per transition,
// touch) and no foreign-key checks, which are rebuilt and validated once at the end instead.
var sessionSetup = []string{
	`SET session_replication_role = replica`,
	`SET maintenance_work_mem = '512MB'`,
	`SET synchronous_commit = off`,
	`CREATE TEMP TABLE gen_jobs (n bigint PRIMARY KEY, uid text, namespace text, name text, created_at timestamptz,
		phase text, retries int, pods int, sidecar bool, init bool, started_at timestamptz, finished_at timestamptz)`,
	`CREATE TEMP TABLE gen_pods (job_n bigint, i int, uid text, job_uid text, namespace text, name text,
		failed bool, sidecar bool, init bool, restarted bool, finished_at timestamptz, prefix text)`,
}

// Load generates c's rows into the migrated, empty database db, printing progress to progress.
// It refuses a database whose jobs table is not empty: it never mixes synthetic rows with real ones.
// c.Workers connections load chunks, rebuild indexes and vacuum in parallel: on a shared machine
// each gets its share of the CPU.
func Load(ctx context.Context, db *sql.DB, c Config, progress io.Writer) (Stats, error) {
	c = c.withDefaults()
	var st Stats
	conns := make([]*sql.Conn, c.Workers)
	for i := range conns {
		conn, err := db.Conn(ctx)
		if err != nil {
			return st, err
		}
		// The sessions are set for bulk loading (no triggers, no foreign-key checks) and hold temp
		// tables: closed, never returned to the pool.
		defer conn.Close()
		defer conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck // always that error
		for _, q := range sessionSetup {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return st, fmt.Errorf("set up load: %w", err)
			}
		}
		conns[i] = conn
	}
	var existing int64
	if err := conns[0].QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM jobs LIMIT 1) j`).Scan(&existing); err != nil {
		return st, fmt.Errorf("check jobs: %w", err)
	}
	if existing != 0 {
		return st, errors.New("jobs is not empty: dbgen loads only into an empty, migrated database")
	}
	schema, err := dropIndexes(ctx, conns[0])
	if err != nil {
		return st, err
	}
	meanRetries, meanPods := c.params()
	fmt.Fprintf(progress, "dbgen: %d jobs (target %d transitions, %d log rows: mean %.1f retries per retried job, %.1f pods per job) over %s up to %s, %d workers\n",
		c.Jobs, c.Transitions, c.LogRows, meanRetries, meanPods, c.Span, c.End.Format(time.RFC3339), c.Workers)
	q := newChunkSQL(c.Seed)
	start := time.Now()
	var (
		mu   sync.Mutex
		done int
	)
	var chunks []func(*sql.Conn) error
	for from := 1; from <= c.Jobs; from += c.ChunkJobs {
		to := min(from+c.ChunkJobs-1, c.Jobs)
		chunks = append(chunks, func(conn *sql.Conn) error {
			if err := loadChunk(ctx, conn, q, c, from, to, meanRetries, meanPods); err != nil {
				return fmt.Errorf("load jobs %d-%d: %w", from, to, err)
			}
			mu.Lock()
			defer mu.Unlock()
			done += to - from + 1
			el := time.Since(start)
			fmt.Fprintf(progress, "dbgen: %d/%d jobs in %s (%.0f jobs/s)\n", done, c.Jobs, el.Round(time.Second), float64(done)/el.Seconds())
			return nil
		})
	}
	if err := parallel(conns, chunks); err != nil {
		return st, err
	}
	st.Load = time.Since(start)

	start = time.Now()
	for _, phase := range schema.restore() {
		var steps []func(*sql.Conn) error
		for _, stmt := range phase {
			steps = append(steps, func(conn *sql.Conn) error {
				t0 := time.Now()
				if err := execDDL(ctx, conn, stmt); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(progress, "dbgen: %s in %s\n", stmt, time.Since(t0).Round(10*time.Millisecond))
				return nil
			})
		}
		if err := parallel(conns, steps); err != nil {
			return st, err
		}
	}
	st.Index = time.Since(start)

	// From schema 9 a finalized job's row holds its pod and log counts, which the archiver records
	// as it finalizes the job: the same function as the migration's records the generated ones.
	start = time.Now()
	var counts bool
	if err := conns[0].QueryRowContext(ctx, `SELECT to_regproc('jobvault_count_finalized') IS NOT NULL`).Scan(&counts); err != nil {
		return st, fmt.Errorf("find jobvault_count_finalized: %w", err)
	}
	if counts {
		// The planner needs the loaded tables' statistics (autovacuum was off during the load):
		// without them it plans the function's per-job subquery over whole tables, and counting
		// 10,000 jobs did not end in 5 minutes.
		if err := execDDL(ctx, conns[0], `ANALYZE `+strings.Join(tables, ", ")); err != nil {
			return st, err
		}
		var n int64
		if err := conns[0].QueryRowContext(ctx, `SELECT jobvault_count_finalized()`).Scan(&n); err != nil {
			return st, fmt.Errorf("count finalized jobs: %w", err)
		}
		fmt.Fprintf(progress, "dbgen: counts of %d finalized jobs in %s\n", n, time.Since(start).Round(10*time.Millisecond))
	}
	st.Count = time.Since(start)

	start = time.Now()
	var vacuums []func(*sql.Conn) error
	for _, t := range tables {
		vacuums = append(vacuums, func(conn *sql.Conn) error { return execDDL(ctx, conn, `VACUUM (ANALYZE) `+t) })
	}
	if err := parallel(conns, vacuums); err != nil {
		return st, err
	}
	st.Vacuum = time.Since(start)
	return Count(ctx, db, st)
}

// parallel runs steps on conns, each connection taking the next step when done with one, and
// returns the first error (the steps not started then are skipped).
func parallel(conns []*sql.Conn, steps []func(*sql.Conn) error) error {
	next := make(chan func(*sql.Conn) error)
	errs := make(chan error, len(conns))
	var stop sync.Once
	quit := make(chan struct{})
	for _, conn := range conns {
		go func() {
			for step := range next {
				if err := step(conn); err != nil {
					stop.Do(func() { close(quit) })
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
feed:
	for _, step := range steps {
		select {
		case next <- step:
		case <-quit:
			break feed
		}
	}
	close(next)
	var first error
	for range conns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Count fills st's row counts and size from the database.
func Count(ctx context.Context, db *sql.DB, st Stats) (Stats, error) {
	err := db.QueryRowContext(ctx, `
SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM job_transitions), (SELECT count(*) FROM pods),
       (SELECT count(*) FROM log_objects),
       pg_total_relation_size('jobs') + pg_total_relation_size('job_transitions') +
       pg_total_relation_size('pods') + pg_total_relation_size('log_objects')`).
		Scan(&st.Jobs, &st.Transitions, &st.Pods, &st.LogRows, &st.Bytes)
	if err != nil {
		return st, fmt.Errorf("count rows: %w", err)
	}
	return st, nil
}

// The SQL of one chunk, in the order loadChunk runs it (its arguments are listed there). @rN
// stands for a uniform draw in [0, 1) fixed by the row's key, the salt N and the seed ({seed}):
// the rnd template, expanded by salted.
const (
	rnd = `(((hashint8extended(%s, %s + {seed}) >> 11) & 9007199254740991)::float8 / 9007199254740992.0)`

	genJobsSQL = `
INSERT INTO gen_jobs
SELECT n, uid, namespace, name, created_at, phase, retries, pods, sidecar, init,
       created_at + queued AS started_at,
       CASE WHEN phase IN ('Running', 'Pending') THEN NULL ELSE created_at + queued + ran END AS finished_at
FROM (
    SELECT n,
           md5('job/{seed}/' || n)::uuid::text AS uid,
           'team-' || lpad(floor($5::float8 * power(@r1, 3))::int::text, 3, '0') AS namespace,
           (ARRAY['train', 'etl', 'eval', 'sweep', 'report', 'backfill'])[1 + floor(6 * @r2)::int] || '-' || (n % 50000) AS name,
           $3::timestamptz - $4::float8 * interval '1 second' + (n - 1 + @r3) / $6::float8 * $4::float8 * interval '1 second' AS created_at,
           CASE WHEN (n - 1 + @r3) / $6::float8 > 0.9995 THEN (CASE WHEN @r4 < 0.5 THEN 'Running' ELSE 'Pending' END)
                WHEN @r4 < 0.85 THEN 'Completed' WHEN @r4 < 0.94 THEN 'Failed'
                WHEN @r4 < 0.98 THEN 'Terminated' ELSE 'Aborted' END AS phase,
           CASE WHEN @r5 < $7::float8 THEN least($8::int, 1 + floor(-ln(1 - @r6) * ($9::float8 - 1))::int) ELSE 0 END AS retries,
           least($10::int, 1 + floor(-ln(1 - @r7) * ($11::float8 - 0.5))::int) AS pods,
           @r8 < 0.4 AS sidecar,
           @r9 < 0.3 AS init,
           (@r10 * 300) * interval '1 second' AS queued,
           exp(3 + 6 * @r11) * interval '1 second' AS ran
    FROM generate_series($1::bigint, $2::bigint) n
) g`

	insertJobsSQL = `
INSERT INTO jobs (uid, cluster, namespace, name, queue, submitter, submitter_groups, admitted_at, created_at,
                  finished_at, phase, retry_count, labels, annotations, spec, status, archive_state,
                  archive_location, archived_at, release_reason, recorded_at, updated_at)
SELECT uid, 'prod-eu-1', namespace, name, CASE WHEN @r1 < 0.8 THEN 'default' ELSE 'batch' END,
       CASE WHEN @r2 < $2::float8 THEN NULL ELSE 'user-' || lpad(floor($1::float8 * power(@r3, 2.5))::int::text, 4, '0') || '@example.com' END,
       CASE WHEN @r2 < $2::float8 THEN NULL ELSE ARRAY['system:authenticated', namespace || '-members'] END,
       CASE WHEN @r2 < $2::float8 THEN NULL ELSE created_at - interval '5 milliseconds' END,
       created_at, finished_at, phase, retries,
       jsonb_build_object('app', split_part(name, '-', 1), 'team', namespace, 'volcano.sh/queue-name', 'default'),
       jsonb_build_object('jobvault.io/tracked', 'true'),
       jsonb_build_object('minAvailable', pods, 'schedulerName', 'volcano', 'queue', 'default', 'maxRetry', 3,
           'policies', jsonb_build_array(jsonb_build_object('event', 'PodFailed', 'action', 'RestartJob')),
           'tasks', jsonb_build_array(jsonb_build_object('name', 'worker', 'replicas', pods, 'template',
               jsonb_build_object('spec', jsonb_build_object('restartPolicy', 'Never', 'containers', jsonb_build_array(
                   jsonb_build_object('name', 'main', 'image', 'registry.example.com/' || namespace || '/' || split_part(name, '-', 1) || ':v' || (n % 97),
                       'command', jsonb_build_array('python', '-m', split_part(name, '-', 1), '--shard', n % 64),
                       'env', jsonb_build_array(jsonb_build_object('name', 'TOKEN', 'value', '<redacted>')),
                       'resources', jsonb_build_object('requests', jsonb_build_object('cpu', '2', 'memory', '8Gi'))))))))),
       jsonb_build_object('state', jsonb_build_object('phase', phase, 'lastTransitionTime', coalesce(finished_at, started_at)),
           'succeeded', CASE WHEN phase = 'Completed' THEN pods ELSE 0 END, 'retryCount', retries, 'minAvailable', pods),
       CASE WHEN phase IN ('Completed', 'Failed', 'Terminated') THEN (CASE WHEN @r4 < 0.01 THEN 'released' ELSE 'archived' END) ELSE 'pending' END,
       's3://jobvault-archive/prod/' || namespace || '/' || name || '/' || uid || '/',
       CASE WHEN phase IN ('Completed', 'Failed', 'Terminated') THEN finished_at + interval '3 seconds' END,
       CASE WHEN phase IN ('Completed', 'Failed', 'Terminated') AND @r4 < 0.01 THEN 'logs unavailable: 1 (node lost)' END,
       created_at + interval '40 milliseconds', coalesce(finished_at, created_at) + interval '3 seconds'
FROM gen_jobs`

	// The phase path: Pending, Running, then per retry Restarting, Pending, Running, then the
	// phase's tail. Times spread evenly from creation to the end (or to started_at + 1 h when running).
	insertTransitionsSQL = `
INSERT INTO job_transitions (job_uid, phase, transition_time, reason, message, resource_version, observed_at, source)
SELECT j.uid, p.phase,
       j.created_at + (coalesce(j.finished_at, j.started_at + interval '1 hour') - j.created_at) * (p.k - 1) / greatest(1, cardinality(j.path) - 1),
       CASE p.phase WHEN 'Restarting' THEN 'PodFailed' WHEN 'Failed' THEN 'PodFailed' WHEN 'Terminated' THEN 'JobTerminated' ELSE '' END,
       CASE p.phase WHEN 'Restarting' THEN 'pod ' || j.name || '-worker-0 failed, restarting the job' ELSE '' END,
       (j.n * 64 + p.k)::text,
       j.created_at + (coalesce(j.finished_at, j.started_at + interval '1 hour') - j.created_at) * (p.k - 1) / greatest(1, cardinality(j.path) - 1) + interval '200 milliseconds',
       CASE WHEN p.k % 5 = 0 THEN 'observed' ELSE 'condition' END
FROM (
    SELECT g.*,
           CASE WHEN g.phase = 'Pending' THEN ARRAY['Pending']
                ELSE ARRAY['Pending', 'Running'] ||
                     coalesce((SELECT array_agg(x.p ORDER BY r, x.o) FROM generate_series(1, g.retries) r,
                                   unnest(ARRAY['Restarting', 'Pending', 'Running']) WITH ORDINALITY x(p, o)), '{}') ||
                     CASE g.phase WHEN 'Completed' THEN ARRAY['Completing', 'Completed']
                                  WHEN 'Failed' THEN ARRAY['Failed']
                                  WHEN 'Terminated' THEN ARRAY['Terminating', 'Terminated']
                                  WHEN 'Aborted' THEN ARRAY['Aborting', 'Aborted']
                                  ELSE '{}'::text[] END
           END AS path
    FROM gen_jobs g
) j
CROSS JOIN LATERAL unnest(j.path) WITH ORDINALITY p(phase, k)`

	// The job's pods, then one failed pod per retry (Volcano recreated it).
	genPodsSQL = `
INSERT INTO gen_pods
SELECT j.n, i, md5('pod/{seed}/' || j.n || '/' || i)::uuid::text, j.uid, j.namespace,
       j.name || '-worker-' || i, i >= j.pods, j.sidecar, j.init, @r1 < $1::float8,
       coalesce(j.finished_at, j.started_at + interval '1 hour') - (CASE WHEN i >= j.pods THEN (j.retries + j.pods - i) * interval '1 minute' ELSE interval '0' END),
       'prod/' || j.namespace || '/' || j.name || '/' || j.uid || '/pods/' || j.name || '-worker-' || i || '/' || md5('pod/{seed}/' || j.n || '/' || i)::uuid::text || '/'
FROM gen_jobs j CROSS JOIN LATERAL generate_series(0, j.pods + j.retries - 1) i
WHERE j.phase <> 'Pending'`

	insertPodsSQL = `
INSERT INTO pods (uid, job_uid, namespace, name, task, node, phase, created_at, started_at, finished_at,
                  deleted_before_terminal, archive_state, archived_at, release_reason, recorded_at, updated_at)
SELECT p.uid, p.job_uid, p.namespace, p.name, 'worker', 'node-' || lpad((hashint8extended(p.job_n * 4096 + p.i, {seed}) & 511)::text, 3, '0'),
       CASE WHEN p.failed THEN 'Failed' WHEN j.finished_at IS NULL THEN 'Running' ELSE 'Succeeded' END,
       j.started_at, j.started_at + interval '2 seconds', CASE WHEN j.finished_at IS NULL AND NOT p.failed THEN NULL ELSE p.finished_at END,
       j.phase IN ('Terminated', 'Aborted'),
       CASE WHEN j.finished_at IS NULL AND NOT p.failed THEN 'pending' ELSE 'archived' END,
       CASE WHEN j.finished_at IS NULL AND NOT p.failed THEN NULL ELSE p.finished_at + interval '1 second' END,
       NULL, j.started_at + interval '50 milliseconds', coalesce(p.finished_at, j.started_at) + interval '1 second'
FROM gen_pods p JOIN gen_jobs j ON j.n = p.job_n`

	// Every container's current log, and previous-1 where the main container restarted. Still
	// running pods have no log row yet.
	insertLogsSQL = `
INSERT INTO log_objects (pod_uid, container, container_type, instance, object_key, bytes, stored_bytes, sha256, state, reason, created_at, updated_at)
SELECT p.uid, c.container, c.type, c.instance,
       CASE WHEN @r1 < 0.001 THEN NULL ELSE p.prefix || c.container || CASE c.instance WHEN 'current' THEN '' ELSE '.previous' END || '.log.gz' END,
       CASE WHEN @r1 < 0.001 THEN 0 ELSE floor(exp(4 + 12 * @r2))::bigint END,
       CASE WHEN @r1 < 0.001 THEN 0 ELSE floor(exp(4 + 12 * @r2) / 7 + 20)::bigint END,
       CASE WHEN @r1 < 0.001 THEN NULL ELSE md5(p.uid || c.container || c.instance) || md5(c.instance || c.container || p.uid) END,
       CASE WHEN @r1 < 0.001 THEN 'unavailable' ELSE 'stored' END,
       CASE WHEN @r1 < 0.001 THEN 'node lost before the log was read' END,
       p.finished_at + interval '500 milliseconds', p.finished_at + interval '500 milliseconds'
FROM gen_pods p
JOIN gen_jobs j ON j.n = p.job_n
CROSS JOIN LATERAL (VALUES ('main', 'regular', 'current', 1), ('main', 'regular', 'previous-1', 2),
                           ('sidecar', 'regular', 'current', 3), ('init-data', 'init', 'current', 4)) c(container, type, instance, k)
WHERE (j.finished_at IS NOT NULL OR p.failed)
  AND (c.k = 1 OR (c.k = 2 AND p.restarted) OR (c.k = 3 AND p.sidecar) OR (c.k = 4 AND p.init))`
)

// salted expands @rN in q to the draw rnd(key, N).
func salted(q, key string) string {
	out := make([]byte, 0, len(q)*2)
	for i := 0; i < len(q); i++ {
		if q[i] == '@' && i+2 < len(q) && q[i+1] == 'r' {
			j := i + 2
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			out = append(out, fmt.Sprintf(rnd, key, q[i+2:j])...)
			i = j - 1
			continue
		}
		out = append(out, q[i])
	}
	return string(out)
}

// chunkSQL is the statements of one chunk, in order, with the seed in place.
type chunkSQL struct{ genJobs, jobs, transitions, genPods, pods, logs string }

func newChunkSQL(seed int) chunkSQL {
	f := func(q, key string) string { return strings.ReplaceAll(salted(q, key), "{seed}", strconv.Itoa(seed)) }
	return chunkSQL{
		genJobs:     f(genJobsSQL, "n"),
		jobs:        f(insertJobsSQL, "(n * 7 + 1)"),
		transitions: f(insertTransitionsSQL, "n"),
		genPods:     f(genPodsSQL, "(j.n * 4096 + i)"),
		pods:        f(insertPodsSQL, "p.job_n"),
		logs:        f(insertLogsSQL, "(p.job_n * 262144 + p.i * 64 + c.k)"),
	}
}

func loadChunk(ctx context.Context, conn *sql.Conn, q chunkSQL, c Config, from, to int, meanRetries, meanPods float64) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	for _, s := range []struct {
		name string
		q    string
		args []any
	}{
		{"clear", `TRUNCATE gen_jobs, gen_pods`, nil},
		{"draw jobs", q.genJobs, []any{from, to, c.End.UTC(), c.Span.Seconds(), c.Namespaces, c.Jobs,
			retriedShare, maxRetries, meanRetries, maxPodsPerJob, meanPods}},
		{"analyze", `ANALYZE gen_jobs`, nil},
		{"jobs", q.jobs, []any{c.Submitters, unknownSubmitters}},
		{"transitions", q.transitions, nil},
		{"draw pods", q.genPods, []any{previousShare}},
		{"analyze", `ANALYZE gen_pods`, nil},
		{"pods", q.pods, nil},
		{"logs", q.logs, nil},
	} {
		if _, err := tx.ExecContext(ctx, s.q, s.args...); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return tx.Commit()
}

// AuditScaleVersions are the migrations that made the audit views fast at this scale without
// changing what they say: the tests compare the views before and after each on the same rows, and
// the benchmark times the queries before and after the last.
var AuditScaleVersions = []uint{6, 9}

// VersionBefore is the newest embedded migration older than v, or an error if there is none.
func VersionBefore(v uint) (uint, error) {
	var prev uint
	for _, x := range db.Versions() {
		if x < v {
			prev = x
		}
	}
	if prev == 0 {
		return 0, fmt.Errorf("no migration before %d in %v", v, db.Versions())
	}
	return prev, nil
}

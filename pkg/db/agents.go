package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
)

// Capture at the source (migration 0013): each container run has one owner, the node agent
// (record.CapturedByAgent) or the archiver's API capture (record.CapturedByAPI). The archiver
// claims a run when it first captures it (ClaimRun), says when it is over (EndRun), and takes it
// over from an agent that went silent (TakeOverRun); the agent polls its runs (AgentRuns),
// stores them through AgentRecords, whose writes are fenced by the owner, and completes
// (CompleteRun) or gives them up (ReleaseRun). Ownership moves from the agent to the API only,
// never back (a trigger refuses it, whatever the role).

// HeartbeatInterval is how often a node agent records its heartbeat (Heartbeat), and
// AgentHealthyWithin how recent its last one must be for the agent to count as healthy: three
// intervals, so that one late or lost heartbeat does not hand its runs over.
const (
	HeartbeatInterval  = 5 * time.Second
	AgentHealthyWithin = 3 * HeartbeatInterval
)

// RunKey names one run of a container: its restart count while it ran.
type RunKey struct {
	PodUID, Container string
	Run               int32
}

func (k RunKey) String() string { return fmt.Sprintf("%s/%s/%d", k.PodUID, k.Container, k.Run) }

// RunClaim is what the archiver knows of a run when it first captures it: enough for the agent to
// name the run's objects without reading any other record.
type RunClaim struct {
	RunKey
	// Node is the pod's node ("" when not known: the run is then the API's).
	Node string
	// Namespace and Pod name the pod; JobName and JobUID its VcJob (archive.JobRef, with
	// Namespace).
	Namespace, Pod  string
	JobName, JobUID string
}

// AgentRun is a run an agent owns and has not completed.
type AgentRun struct {
	RunClaim
	// Over: the archiver saw the run end; once its files are drained and stored, the agent
	// completes it.
	Over bool
}

// LogRun is the recorded capture of a run: its owner and the hand-over, if any.
type LogRun struct {
	RunClaim
	// Owner is the run's capture now, ClaimedOwner the one first assigned.
	Owner, ClaimedOwner string
	Over, Complete      bool
	// HandedOverAt and HandOverReason tell when and why the agent's run went to the API (zero
	// and empty: it did not).
	HandedOverAt   time.Time
	HandOverReason string
	// AgentHealthy: the node's agent beat within the healthyWithin asked for, by the database's
	// clock.
	AgentHealthy bool
}

// HandOverReleased prefixes the hand-over reason of a run its agent gave up (ReleaseRun).
const HandOverReleased = "released by agent: "

// Heartbeat records that the agent of node is alive, with the bytes it holds of files that were
// deleted or rotated away. The time is the database's, the one every health check compares with.
func (d *DB) Heartbeat(ctx context.Context, node string, heldBytes int64) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if node == "" || heldBytes < 0 {
		return fmt.Errorf("record heartbeat of agent %q: %w heartbeat: node is required, held bytes not negative", node, ErrInvalid)
	}
	if _, err := d.db.ExecContext(ctx, `
INSERT INTO capture_agents (node, heartbeat_at, held_bytes) VALUES ($1, now(), $2)
ON CONFLICT (node) DO UPDATE SET heartbeat_at = now(), held_bytes = EXCLUDED.held_bytes`, node, heldBytes); err != nil {
		return fmt.Errorf("record heartbeat of agent %q: %w", node, translate(err))
	}
	return nil
}

// healthy is the SQL condition that the agent of the node in column node beat within the
// seconds in parameter secs.
func healthy(node, secs string) string {
	return `EXISTS (SELECT 1 FROM capture_agents a WHERE a.node = ` + node + ` AND a.heartbeat_at > now() - ` + secs + `::float8 * interval '1 second')`
}

// ClaimRun assigns the run its owner, once, and returns it, and whether this call assigned it
// (first): record.CapturedByAgent if the node's agent beat within healthyWithin and nothing of
// the run is stored yet (a run the API capture began before the agent came stays the API's), else
// record.CapturedByAPI. A run claimed before keeps its owner, whatever c says. The pod row must
// exist (ErrNotFound).
func (d *DB) ClaimRun(ctx context.Context, c RunClaim, healthyWithin time.Duration) (owner string, first bool, err error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return claimRun(ctx, d.db, c, healthyWithin)
}

// claimRun is ClaimRun on the pool or in a transaction (read committed: each try sees the claims
// committed before it).
func claimRun(ctx context.Context, q querier, c RunClaim, healthyWithin time.Duration) (owner string, first bool, err error) {
	owner, first, _, err = claimAndLook(ctx, q, c, healthyWithin, "")
	return owner, first, err
}

// recordedOfRun says which of a run's records exist: its log row (under the instance asked
// for), gaps, segments.
type recordedOfRun struct{ log, gaps, segments bool }

// claimAndLook is claimRun that also says, when instance is not empty, which of the run's records
// exist, in the same statement: a run's capture start reads only those (issue 28: a new run's
// start was four statements, the claim and three reads that found nothing). What another
// transaction commits after this statement was as likely to commit after those reads: a capture
// copes with either.
func claimAndLook(ctx context.Context, q querier, c RunClaim, healthyWithin time.Duration, instance string) (owner string, first bool, seen recordedOfRun, err error) {
	if c.PodUID == "" || c.Container == "" || c.Run < 0 || c.Namespace == "" || c.Pod == "" || c.JobName == "" || c.JobUID == "" {
		return "", false, seen, fmt.Errorf("claim run %s: %w claim: pod UID, container, namespace, pod, job name and UID are required, run not negative", c.RunKey, ErrInvalid)
	}
	look := `false, false, false`
	args := []any{c.PodUID, c.Container, c.Run, c.Node, c.Namespace, c.Pod, c.JobName, c.JobUID, healthyWithin.Seconds()}
	if instance != "" {
		look = `EXISTS (SELECT 1 FROM log_objects WHERE pod_uid = $1 AND container = $2 AND instance = $10),
       EXISTS (SELECT 1 FROM log_gaps WHERE pod_uid = $1 AND container = $2 AND run = $3),
       EXISTS (SELECT 1 FROM log_segments WHERE pod_uid = $1 AND container = $2 AND run = $3)`
		args = append(args, instance)
	}
	// A row another claim inserts meanwhile is invisible to this statement's snapshot: the
	// insert does nothing and the select finds nothing. The next attempt sees it.
	for range 3 {
		err = q.QueryRowContext(ctx, `
WITH ins AS (
    INSERT INTO log_runs (pod_uid, container, run, node, namespace, pod_name, job_name, job_uid, owner, claimed_owner)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, o.owner, o.owner
    FROM (SELECT CASE WHEN `+healthy("$4", "$9")+`
                       AND NOT EXISTS (SELECT 1 FROM log_segments s WHERE s.pod_uid = $1 AND s.container = $2 AND s.run = $3)
                      THEN 'agent' ELSE 'api' END AS owner) o
    ON CONFLICT (pod_uid, container, run) DO NOTHING
    RETURNING owner
),
claim AS (
    SELECT owner, true AS first FROM ins
    UNION ALL
    SELECT owner, false FROM log_runs WHERE pod_uid = $1 AND container = $2 AND run = $3
)
SELECT owner, first, `+look+` FROM claim`, args...).Scan(&owner, &first, &seen.log, &seen.gaps, &seen.segments)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", false, seen, fmt.Errorf("claim run %s: %w", c.RunKey, translate(err))
		}
		return owner, first, seen, nil
	}
	return "", false, seen, fmt.Errorf("claim run %s: %w: claimed concurrently, and the claim is not visible", c.RunKey, ErrConflict)
}

// Run returns the recorded capture of a run (ErrNotFound if it was never claimed), with whether
// its node's agent beat within healthyWithin.
func (d *DB) Run(ctx context.Context, k RunKey, healthyWithin time.Duration) (LogRun, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	var r LogRun
	err := scanRun(d.db.QueryRowContext(ctx, `SELECT `+runColumns+`, `+healthy("r.node", "$4")+`
FROM log_runs r WHERE r.pod_uid = $1 AND r.container = $2 AND r.run = $3`,
		k.PodUID, k.Container, k.Run, healthyWithin.Seconds()), &r, &r.AgentHealthy)
	if err != nil {
		return LogRun{}, fmt.Errorf("get run %s: %w", k, translate(err))
	}
	return r, nil
}

// runColumns are the columns of a log_runs row (as r) that scanRun reads.
const runColumns = `r.pod_uid, r.container, r.run, r.node, r.namespace, r.pod_name, r.job_name, r.job_uid, r.owner, r.claimed_owner,
       r.over, r.complete, r.handed_over_at, coalesce(r.hand_over_reason, '')`

// scanRun reads runColumns, then extra, into r.
func scanRun(row interface{ Scan(...any) error }, r *LogRun, extra ...any) error {
	var handedOver sql.NullTime
	err := row.Scan(append([]any{&r.PodUID, &r.Container, &r.Run, &r.Node, &r.Namespace, &r.Pod, &r.JobName, &r.JobUID, &r.Owner, &r.ClaimedOwner,
		&r.Over, &r.Complete, &handedOver, &r.HandOverReason}, extra...)...)
	if handedOver.Valid {
		r.HandedOverAt = handedOver.Time.UTC()
	}
	return err
}

// JobRuns returns the recorded captures of every run of a job's pods, by pod, container and run
// (AgentHealthy is not read).
func (d *DB) JobRuns(ctx context.Context, jobUID string) ([]LogRun, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `SELECT `+runColumns+`
FROM log_runs r JOIN pods p ON p.uid = r.pod_uid
WHERE p.job_uid = $1
ORDER BY p.created_at, r.pod_uid, r.container, r.run`, jobUID)
	if err != nil {
		return nil, fmt.Errorf("get runs of job %s: %w", jobUID, translate(err))
	}
	defer rows.Close()
	var out []LogRun
	for rows.Next() {
		var r LogRun
		if err := scanRun(rows, &r); err != nil {
			return nil, fmt.Errorf("get runs of job %s: %w", jobUID, translate(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get runs of job %s: %w", jobUID, translate(err))
	}
	return out, nil
}

// EndRun records that the run is over, as the archiver saw it: its agent completes it once it
// stored all of it. Idempotent.
func (d *DB) EndRun(ctx context.Context, k RunKey) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	res, err := d.db.ExecContext(ctx, `UPDATE log_runs SET over = true WHERE pod_uid = $1 AND container = $2 AND run = $3 AND NOT over`,
		k.PodUID, k.Container, k.Run)
	if err == nil {
		err = d.affected(ctx, res, k)
	}
	if err != nil {
		return fmt.Errorf("end run %s: %w", k, translate(err))
	}
	return nil
}

// AgentRuns lists the runs the agent of node owns and has not completed.
func (d *DB) AgentRuns(ctx context.Context, node string) ([]AgentRun, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `
SELECT pod_uid, container, run, namespace, pod_name, job_name, job_uid, over
FROM log_runs WHERE node = $1 AND owner = 'agent' AND NOT complete
ORDER BY claimed_at, pod_uid, container, run`, node)
	if err != nil {
		return nil, fmt.Errorf("get runs of agent %q: %w", node, translate(err))
	}
	defer rows.Close()
	var out []AgentRun
	for rows.Next() {
		r := AgentRun{RunClaim: RunClaim{Node: node}}
		if err := rows.Scan(&r.PodUID, &r.Container, &r.Run, &r.Namespace, &r.Pod, &r.JobName, &r.JobUID, &r.Over); err != nil {
			return nil, fmt.Errorf("get runs of agent %q: %w", node, translate(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get runs of agent %q: %w", node, translate(err))
	}
	return out, nil
}

// CompleteRun records that the agent stored all of an over run: the archiver then assembles it.
// Only while the agent owns the run (ErrNotOwner otherwise) and once it is over (ErrInvalid
// before). Idempotent.
func (d *DB) CompleteRun(ctx context.Context, k RunKey) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	res, err := d.db.ExecContext(ctx, `
UPDATE log_runs SET complete = true, completed_at = now()
WHERE pod_uid = $1 AND container = $2 AND run = $3 AND owner = 'agent' AND over AND NOT complete`, k.PodUID, k.Container, k.Run)
	if err == nil {
		if n, _ := res.RowsAffected(); n == 0 {
			err = d.whyNot(ctx, k, func(r LogRun) error {
				switch {
				case r.Owner != record.CapturedByAgent:
					return ErrNotOwner
				case r.Complete:
					return nil
				}
				return fmt.Errorf("%w: the run is not over", ErrInvalid)
			})
		}
	}
	if err != nil {
		return fmt.Errorf("complete run %s: %w", k, translate(err))
	}
	return nil
}

// ReleaseRun gives a run the agent owns up to the API capture, with the reason (the agent cannot
// read its files, say): from then on the agent's writes for it fail with ErrNotOwner, and the
// archiver's capture resumes after the agent's last segment. Idempotent; ErrConflict for a run
// the agent completed.
func (d *DB) ReleaseRun(ctx context.Context, k RunKey, why string) error {
	taken, err := d.handOver(ctx, k, HandOverReleased+why)
	if err == nil && !taken {
		err = fmt.Errorf("%w: the run is complete", ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("release run %s: %w", k, err)
	}
	return nil
}

// TakeOverRun moves a run from its agent to the API capture, with the reason (the agent went
// silent): it reports whether the API owns the run now (also when it did already), or not
// because the agent completed it first (then it is to be assembled as it is). Once it returns,
// no write of the agent for the run succeeds.
func (d *DB) TakeOverRun(ctx context.Context, k RunKey, why string) (bool, error) {
	taken, err := d.handOver(ctx, k, why)
	if err != nil {
		return false, fmt.Errorf("take over run %s: %w", k, err)
	}
	return taken, nil
}

// handOver moves the run to the API unless it is complete, and reports whether the API owns it.
// The update waits for the agent's fenced writes in flight (they hold the row FOR SHARE) and
// every later one finds the new owner.
func (d *DB) handOver(ctx context.Context, k RunKey, why string) (bool, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if why == "" {
		return false, fmt.Errorf("%w: a hand-over needs its reason", ErrInvalid)
	}
	res, err := d.db.ExecContext(ctx, `
UPDATE log_runs SET owner = 'api', handed_over_at = now(), hand_over_reason = $4
WHERE pod_uid = $1 AND container = $2 AND run = $3 AND owner = 'agent' AND NOT complete`, k.PodUID, k.Container, k.Run, why)
	if err != nil {
		return false, translate(err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return true, nil
	}
	taken := false
	err = d.whyNot(ctx, k, func(r LogRun) error {
		taken = r.Owner == record.CapturedByAPI
		return nil
	})
	return taken, err
}

// whyNot reads the run again after an update that changed nothing, and gives judge the row
// (ErrNotFound when there is none).
func (d *DB) whyNot(ctx context.Context, k RunKey, judge func(LogRun) error) error {
	var r LogRun
	err := d.db.QueryRowContext(ctx, `SELECT owner, over, complete FROM log_runs WHERE pod_uid = $1 AND container = $2 AND run = $3`,
		k.PodUID, k.Container, k.Run).Scan(&r.Owner, &r.Over, &r.Complete)
	if err != nil {
		return translate(err)
	}
	return judge(r)
}

// affected is ErrNotFound when an update of the run changed no row and the run does not exist.
func (d *DB) affected(ctx context.Context, res sql.Result, k RunKey) error {
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	return d.whyNot(ctx, k, func(LogRun) error { return nil })
}

// PutSources records which capture stored which byte ranges of a run's archived log (see
// record.SourceRanges), once: the same ranges again change nothing. Append-only.
func (d *DB) PutSources(ctx context.Context, ranges []record.SourceRange) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return putSources(ctx, d.db, ranges)
}

// putSources is PutSources on the pool or in a transaction.
func putSources(ctx context.Context, q querier, ranges []record.SourceRange) error {
	if len(ranges) == 0 {
		return nil
	}
	var (
		pods, containers, instances, sources []string
		runs, froms, tos                     []int64
	)
	for _, r := range ranges {
		pods, containers, instances, sources = append(pods, r.PodUID), append(containers, r.Container), append(instances, r.Instance), append(sources, r.Source)
		runs, froms, tos = append(runs, int64(r.Run)), append(froms, r.From), append(tos, r.To)
	}
	if _, err := q.ExecContext(ctx, `
INSERT INTO log_sources (pod_uid, container, run, instance, from_bytes, to_bytes, source)
SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::bigint[], $6::bigint[], $7::text[])
ON CONFLICT (pod_uid, container, run, from_bytes) DO NOTHING`,
		pods, containers, runs, instances, froms, tos, sources); err != nil {
		return fmt.Errorf("record sources of the log of %s/%s/%d: %w", ranges[0].PodUID, ranges[0].Container, ranges[0].Run, translate(err))
	}
	return nil
}

// Sources returns the recorded byte ranges of a run's archived log, by the capture that stored
// them, in order.
func (d *DB) Sources(ctx context.Context, k RunKey) ([]record.SourceRange, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.db.QueryContext(ctx, `
SELECT instance, from_bytes, to_bytes, source FROM log_sources
WHERE pod_uid = $1 AND container = $2 AND run = $3 ORDER BY from_bytes`, k.PodUID, k.Container, k.Run)
	if err != nil {
		return nil, fmt.Errorf("get sources of the log of %s: %w", k, translate(err))
	}
	defer rows.Close()
	var out []record.SourceRange
	for rows.Next() {
		r := record.SourceRange{PodUID: k.PodUID, Container: k.Container, Run: k.Run}
		if err := rows.Scan(&r.Instance, &r.From, &r.To, &r.Source); err != nil {
			return nil, fmt.Errorf("get sources of the log of %s: %w", k, translate(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get sources of the log of %s: %w", k, translate(err))
	}
	return out, nil
}

// AgentRecords is what the agent of one node keeps in the database while it captures its runs
// (capture.Records): its segments (recorded as record.CapturedByAgent's) and gaps are written only
// while the agent owns the run, the run is on its node and not complete, checked in the same
// statement as the write; otherwise ErrNotOwner, and the agent must drop the run. A take-over
// waits for a fenced write in flight, so no segment is stored by both captures.
type AgentRecords struct {
	d    *DB
	node string
}

// AgentRecords returns the fenced records of node's agent.
func (d *DB) AgentRecords(node string) AgentRecords { return AgentRecords{d: d, node: node} }

// Segments returns the run's recorded segments (whoever stored them), in order.
func (a AgentRecords) Segments(ctx context.Context, podUID, container string, run int32) ([]record.Segment, error) {
	return a.d.Segments(ctx, podUID, container, run)
}

// PutSegment records s as the agent's, while the agent owns the run (see DB.PutSegment).
func (a AgentRecords) PutSegment(ctx context.Context, s record.Segment) error {
	s.Source = record.CapturedByAgent
	return a.d.putSegment(ctx, s, a.node)
}

// PutGap records g, while the agent owns the run (see DB.PutGap).
func (a AgentRecords) PutGap(ctx context.Context, g record.Gap) error {
	return a.d.putGap(ctx, g, a.node)
}

// DeleteSegments always fails: the archiver forgets a run's segments once it assembled them.
func (a AgentRecords) DeleteSegments(_ context.Context, podUID, container string, run int32) error {
	return fmt.Errorf("delete segments of %s/%s/%d: %w: the agent deletes no segment", podUID, container, run, ErrInvalid)
}

// fence wraps an INSERT … SELECT … FROM owned … RETURNING 1 whose first three parameters are the
// run's key into a statement that returns whether the run's job is still open, whether the run is
// the writer's (owned) and whether the row was inserted. With node "", the archiver's own write:
// owned holds a row only while the job is open (podJobOpen). With node (a parameter placeholder
// such as "$15"), the agent's: only while the run is the agent's, on that node and not complete,
// locked FOR SHARE until the statement's transaction ends, so that a hand-over waits for it (the
// agent's role may not read, let alone lock, the jobs; the archiver completes a run before its job
// is sealed).
func fence(node, insert string) string {
	open, owned := podJobOpen, `SELECT 1 FROM open WHERE ok`
	if node != "" {
		open = `SELECT true AS ok`
		owned = `SELECT 1 FROM log_runs WHERE pod_uid = $1 AND container = $2 AND run = $3
               AND node = ` + node + ` AND owner = 'agent' AND NOT complete FOR SHARE`
	}
	return `WITH open AS (` + open + `),
owned AS (` + owned + `),
ins AS (` + insert + `)
SELECT (SELECT ok FROM open), EXISTS (SELECT 1 FROM owned), EXISTS (SELECT 1 FROM ins)`
}

// fencedInsert runs insert (an INSERT … SELECT … FROM owned … RETURNING 1 of a run's row, its key
// in the first three of args) through fence, for the archiver (node "") or for the agent of node,
// and reports whether the row was inserted (false: the same key was there). ErrFinalized when the
// run's job is sealed, ErrNotOwner when the run is not the agent's; errors are not translated.
func (d *DB) fencedInsert(ctx context.Context, node, insert string, args ...any) (bool, error) {
	placeholder := ""
	if node != "" {
		args = append(args, node)
		placeholder = fmt.Sprintf("$%d", len(args))
	}
	var open, owned, inserted bool
	err := d.db.QueryRowContext(ctx, fence(placeholder, insert), args...).Scan(&open, &owned, &inserted)
	switch {
	case err != nil:
		return false, err
	case !open:
		return false, ErrFinalized
	case !owned:
		return false, ErrNotOwner
	}
	return inserted, nil
}

// podJobOpen selects ok: whether the job of the pod whose UID is $1 is still open, not finalized
// (true when the pod or its job has no row: the write's own checks refuse it then). A finalized
// job's record is sealed: a row added to it afterwards is what audit verify reports as tampering.
// It locks the job's row FOR SHARE until the statement's transaction ends: a finalization locks
// it FOR UPDATE before it reads the rows it seals, so either it waits for the write and sees the
// row (and seals again), or the write waits for it and is refused.
const podJobOpen = `SELECT coalesce((SELECT j.archive_state = 'pending' FROM pods p JOIN jobs j ON j.uid = p.job_uid
                    WHERE p.uid = $1 FOR SHARE OF j), true) AS ok`

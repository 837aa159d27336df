package db

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lib/pq/pqerror"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
)

// healthyWithin is the contract's: three heartbeats of 5 s.
const healthyWithin = 15 * time.Second

// runFixture records a job and a pod on node and returns the claim of the pod's "main" run 0.
func runFixture(t *testing.T, records *db.DB, uid, node string) db.RunClaim {
	t.Helper()
	mustUpsertJob(t, records, newJob("job-"+uid).build())
	pod := newPod("pod-"+uid, "job-"+uid)
	pod.Node = node
	if err := records.UpsertPod(t.Context(), pod); err != nil {
		t.Fatalf("UpsertPod: %v", err)
	}
	return db.RunClaim{RunKey: db.RunKey{PodUID: pod.UID, Container: "main"}, Node: node, Namespace: pod.Namespace, Pod: pod.Name,
		JobName: "job-job-" + uid, JobUID: "job-" + uid}
}

func mustClaim(t *testing.T, records *db.DB, c db.RunClaim, want string) {
	t.Helper()
	if owner, _, err := records.ClaimRun(t.Context(), c, healthyWithin); err != nil || owner != want {
		t.Fatalf("ClaimRun(%s on %q) = %q, %v; want %q", c.RunKey, c.Node, owner, err, want)
	}
}

// segment is the seq-th segment of a run in which every segment holds 100 bytes.
func segment(k db.RunKey, seq int32, key string) record.Segment {
	return record.Segment{PodUID: k.PodUID, Container: k.Container, Run: k.Run, Seq: seq, ObjectKey: fmt.Sprintf("%s/%d", key, seq),
		StoredBytes: 10, Bytes: 100, TotalBytes: 100 * int64(seq+1), LastTime: at(time.Duration(seq) * time.Second), LastTimeLines: 1,
		HashState: []byte{byte(seq)}}
}

// TestDBClaimRun: a run is the agent's when its node's agent beat recently and nothing of it is
// stored yet, else the API's; the first claim wins, whatever a later one finds.
func TestDBClaimRun(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	if err := records.Heartbeat(ctx, "node-a", 0); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if err := records.Heartbeat(ctx, "node-silent", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(ctx, `UPDATE capture_agents SET heartbeat_at = now() - interval '16 seconds' WHERE node = 'node-silent'`); err != nil {
		t.Fatal(err)
	}

	mustClaim(t, records, runFixture(t, records, "a", "node-a"), record.CapturedByAgent)
	mustClaim(t, records, runFixture(t, records, "none", "node-without-agent"), record.CapturedByAPI)
	mustClaim(t, records, runFixture(t, records, "silent", "node-silent"), record.CapturedByAPI)
	mustClaim(t, records, runFixture(t, records, "unscheduled", ""), record.CapturedByAPI)

	// The API capture began before the agent came (an archiver of before 0013): it keeps the run.
	begun := runFixture(t, records, "begun", "node-a")
	if err := records.PutSegment(ctx, segment(begun.RunKey, 0, "seg")); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, records, begun, record.CapturedByAPI)

	// The first claim wins: the agent came since, or left.
	late := runFixture(t, records, "late", "node-b")
	mustClaim(t, records, late, record.CapturedByAPI)
	if err := records.Heartbeat(ctx, "node-b", 0); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, records, late, record.CapturedByAPI)
	a := runFixture(t, records, "a2", "node-a")
	mustClaim(t, records, a, record.CapturedByAgent)
	if _, err := c.ExecContext(ctx, `DELETE FROM capture_agents WHERE node = 'node-a'`); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, records, a, record.CapturedByAgent)

	// Concurrent claims of one run agree.
	con := runFixture(t, records, "con", "node-b")
	owners := make([]string, 8)
	firsts := make([]bool, len(owners))
	errs := make([]error, len(owners))
	var wg sync.WaitGroup
	for i := range owners {
		wg.Go(func() { owners[i], firsts[i], errs[i] = records.ClaimRun(ctx, con, healthyWithin) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent ClaimRun: %v", err)
	}
	if want := slices.Repeat([]string{record.CapturedByAgent}, len(owners)); !slices.Equal(owners, want) {
		t.Errorf("concurrent claims = %v, want all agent", owners)
	}
	if n := len(slices.DeleteFunc(firsts, func(first bool) bool { return !first })); n != 1 {
		t.Errorf("%d of the concurrent claims say they assigned the owner, want 1", n)
	}

	for name, bad := range map[string]db.RunClaim{
		"no job":   {RunKey: db.RunKey{PodUID: "pod-a", Container: "x"}, Namespace: "team-a", Pod: "p"},
		"no pod":   {RunKey: db.RunKey{PodUID: "pod-a", Container: "x"}, Namespace: "team-a", JobName: "j", JobUID: "u"},
		"negative": {RunKey: db.RunKey{PodUID: "pod-a", Container: "x", Run: -1}, Namespace: "team-a", Pod: "p", JobName: "j", JobUID: "u"},
	} {
		if _, _, err := records.ClaimRun(ctx, bad, healthyWithin); !errors.Is(err, db.ErrInvalid) {
			t.Errorf("ClaimRun(%s) = %v, want ErrInvalid", name, err)
		}
	}
	unknown := db.RunClaim{RunKey: db.RunKey{PodUID: "pod-unknown", Container: "x"}, Namespace: "team-a", Pod: "p", JobName: "j", JobUID: "u"}
	if _, _, err := records.ClaimRun(ctx, unknown, healthyWithin); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("ClaimRun of a pod not recorded = %v, want ErrNotFound", err)
	}
}

// TestDBAgentRunLifecycle: the agent lists its node's runs, completes one only once the archiver
// said it is over, and not one it does not own; a completed run cannot be taken over or released;
// a released or taken-over run is the API's, with the reason, for good.
func TestDBAgentRunLifecycle(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	if err := records.Heartbeat(ctx, "node-a", 42); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, c, `SELECT held_bytes FROM capture_agents WHERE node = 'node-a'`); n != 42 {
		t.Errorf("held_bytes = %d, want 42", n)
	}
	done, released, taken, other := runFixture(t, records, "done", "node-a"), runFixture(t, records, "rel", "node-a"),
		runFixture(t, records, "taken", "node-a"), runFixture(t, records, "other", "node-b")
	for _, r := range []db.RunClaim{done, released, taken} {
		mustClaim(t, records, r, record.CapturedByAgent)
	}
	mustClaim(t, records, other, record.CapturedByAPI)

	runs, err := records.AgentRuns(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	want := []db.AgentRun{{RunClaim: done}, {RunClaim: released}, {RunClaim: taken}}
	if diff := cmp.Diff(want, runs); diff != "" {
		t.Errorf("AgentRuns (-want +got):\n%s", diff)
	}

	if err := records.CompleteRun(ctx, done.RunKey); !errors.Is(err, db.ErrInvalid) {
		t.Errorf("CompleteRun before the run is over = %v, want ErrInvalid", err)
	}
	for range 2 {
		if err := records.EndRun(ctx, done.RunKey); err != nil {
			t.Fatalf("EndRun: %v", err)
		}
	}
	if runs, _ := records.AgentRuns(ctx, "node-a"); len(runs) != 3 || !runs[0].Over {
		t.Errorf("AgentRuns after EndRun = %+v, want the first over", runs)
	}
	for range 2 {
		if err := records.CompleteRun(ctx, done.RunKey); err != nil {
			t.Fatalf("CompleteRun: %v", err)
		}
	}
	if ok, err := records.TakeOverRun(ctx, done.RunKey, "agent silent"); ok || err != nil {
		t.Errorf("TakeOverRun of a complete run = %t, %v; want false, nil", ok, err)
	}
	if err := records.ReleaseRun(ctx, done.RunKey, "late"); !errors.Is(err, db.ErrConflict) {
		t.Errorf("ReleaseRun of a complete run = %v, want ErrConflict", err)
	}

	for range 2 {
		if err := records.ReleaseRun(ctx, released.RunKey, "cannot read its files"); err != nil {
			t.Fatalf("ReleaseRun: %v", err)
		}
		if ok, err := records.TakeOverRun(ctx, taken.RunKey, "agent silent"); !ok || err != nil {
			t.Fatalf("TakeOverRun = %t, %v; want true", ok, err)
		}
	}
	if runs, _ := records.AgentRuns(ctx, "node-a"); len(runs) != 0 {
		t.Errorf("AgentRuns after completion, release and take-over = %+v, want none", runs)
	}
	for _, k := range []db.RunKey{released.RunKey, taken.RunKey, other.RunKey} {
		if err := records.EndRun(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := records.CompleteRun(ctx, k); !errors.Is(err, db.ErrNotOwner) {
			t.Errorf("CompleteRun(%s) of the API's run = %v, want ErrNotOwner", k, err)
		}
	}
	r, err := records.Run(ctx, released.RunKey, healthyWithin)
	if err != nil {
		t.Fatal(err)
	}
	if r.Owner != record.CapturedByAPI || r.ClaimedOwner != record.CapturedByAgent || r.HandedOverAt.IsZero() ||
		r.HandOverReason != db.HandOverReleased+"cannot read its files" || !r.AgentHealthy || r.Complete {
		t.Errorf("released run = %+v", r)
	}
	if r, _ := records.Run(ctx, done.RunKey, healthyWithin); r.Owner != record.CapturedByAgent || !r.Complete || !r.HandedOverAt.IsZero() {
		t.Errorf("completed run = %+v", r)
	}
	if r, _ := records.Run(ctx, other.RunKey, healthyWithin); r.AgentHealthy {
		t.Errorf("run on a node without agent: AgentHealthy, want not")
	}
	if _, err := records.Run(ctx, db.RunKey{PodUID: "pod-done", Container: "nope"}, healthyWithin); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Run of a run never claimed = %v, want ErrNotFound", err)
	}

	// The row only moves forward, whoever writes it (here the tables' owner).
	for _, stmt := range []string{
		`UPDATE log_runs SET owner = 'agent' WHERE pod_uid = 'pod-taken'`,
		`UPDATE log_runs SET complete = false, completed_at = NULL WHERE pod_uid = 'pod-done'`,
		`UPDATE log_runs SET over = false WHERE pod_uid = 'pod-done'`,
		`UPDATE log_runs SET node = 'node-z' WHERE pod_uid = 'pod-other'`,
		`UPDATE log_runs SET hand_over_reason = 'forged' WHERE pod_uid = 'pod-taken'`,
	} {
		if _, err := c.ExecContext(ctx, stmt); sqlState(err) != pqerror.RestrictViolation {
			t.Errorf("%s = %v, want SQLSTATE 23001", stmt, err)
		}
	}
}

// TestDBAgentWritesFenced: the agent's segments and gaps are recorded, as the agent's, only while
// it owns the run on its node; after the take-over its writes fail with ErrNotOwner and change
// nothing, and the API capture continues the same numbering.
func TestDBAgentWritesFenced(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	if err := records.Heartbeat(ctx, "node-a", 0); err != nil {
		t.Fatal(err)
	}
	run := runFixture(t, records, "f", "node-a")
	mustClaim(t, records, run, record.CapturedByAgent)
	api := runFixture(t, records, "api", "node-x")
	mustClaim(t, records, api, record.CapturedByAPI)
	agent, stranger := records.AgentRecords("node-a"), records.AgentRecords("node-b")

	s0 := segment(run.RunKey, 0, "agent")
	s0.Streams, s0.SourcePosition = []byte{0, 10, 1, 90}, []byte("inode 7 offset 130")
	for range 2 { // a retried flush
		if err := agent.PutSegment(ctx, s0); err != nil {
			t.Fatalf("agent PutSegment: %v", err)
		}
	}
	gap := record.Gap{PodUID: run.PodUID, Container: "main", After: at(time.Second), Reason: record.GapAgentLetGo, Detail: "file 0.log.20251125"}
	if err := agent.PutGap(ctx, gap); err != nil {
		t.Fatalf("agent PutGap: %v", err)
	}
	if err := stranger.PutSegment(ctx, segment(run.RunKey, 1, "stranger")); !errors.Is(err, db.ErrNotOwner) {
		t.Errorf("PutSegment by another node's agent = %v, want ErrNotOwner", err)
	}
	if err := agent.PutSegment(ctx, segment(api.RunKey, 0, "agent")); !errors.Is(err, db.ErrNotOwner) {
		t.Errorf("agent PutSegment of the API's run = %v, want ErrNotOwner", err)
	}
	if err := agent.DeleteSegments(ctx, run.PodUID, "main", 0); err == nil {
		t.Error("agent DeleteSegments succeeded, want refused")
	}

	if ok, err := records.TakeOverRun(ctx, run.RunKey, "agent silent"); !ok || err != nil {
		t.Fatalf("TakeOverRun = %t, %v", ok, err)
	}
	if err := agent.PutSegment(ctx, segment(run.RunKey, 1, "agent")); !errors.Is(err, db.ErrNotOwner) {
		t.Errorf("agent PutSegment after the take-over = %v, want ErrNotOwner", err)
	}
	if err := agent.PutSegment(ctx, s0); !errors.Is(err, db.ErrNotOwner) {
		t.Errorf("agent PutSegment of its own segment again after the take-over = %v, want ErrNotOwner", err)
	}
	if err := agent.PutGap(ctx, record.Gap{PodUID: run.PodUID, Container: "main", After: at(time.Hour), Reason: record.GapRotated}); !errors.Is(err, db.ErrNotOwner) {
		t.Errorf("agent PutGap after the take-over = %v, want ErrNotOwner", err)
	}
	if err := records.PutSegment(ctx, segment(run.RunKey, 1, "api")); err != nil {
		t.Fatalf("API PutSegment after the take-over: %v", err)
	}

	segs, err := records.Segments(ctx, run.PodUID, "main", 0)
	if err != nil {
		t.Fatal(err)
	}
	want0, want1 := s0, segment(run.RunKey, 1, "api")
	want0.Source, want1.Source = record.CapturedByAgent, record.CapturedByAPI
	if diff := cmp.Diff([]record.Segment{want0, want1}, segs); diff != "" {
		t.Errorf("segments (-want +got):\n%s", diff)
	}
	if gaps, _ := records.Gaps(ctx, "job-f"); len(gaps) != 1 || gaps[0].Reason != record.GapAgentLetGo {
		t.Errorf("gaps = %+v, want the agent's one", gaps)
	}
}

// TestDBTakeOverWhileAgentWrites is the fencing race: an agent writes segments as fast as it can
// while the archiver takes the run over, reads what is recorded and goes on from there. Every
// segment the agent was told is recorded is recorded as the agent's, none after the one the
// archiver resumed from, and the archiver's numbers never collide with the agent's: no segment is
// stored by both.
func TestDBTakeOverWhileAgentWrites(t *testing.T) {
	ctx := t.Context()
	records, _ := stack.OpenRecords(t)
	if err := records.Heartbeat(ctx, "node-a", 0); err != nil {
		t.Fatal(err)
	}
	agent := records.AgentRecords("node-a")
	for round := range 20 {
		run := runFixture(t, records, fmt.Sprintf("race%d", round), "node-a")
		mustClaim(t, records, run, record.CapturedByAgent)
		k := run.RunKey

		stored := make(chan int32, 1) // the agent's segments that it was told are recorded
		var agentErr error
		var wg sync.WaitGroup
		// The take-over comes later in each round, so that it meets the agent's writes at
		// various points.
		reached, finished := make(chan struct{}), make(chan struct{})
		wg.Go(func() {
			var seq int32
			defer func() { stored <- seq; close(finished) }()
			for ; ; seq++ {
				if seq == int32(1+round) {
					close(reached)
				}
				if err := agent.PutSegment(ctx, segment(k, seq, "agent")); err != nil {
					if !errors.Is(err, db.ErrNotOwner) {
						agentErr = err
					}
					return
				}
			}
		})
		select {
		case <-reached:
		case <-finished:
			t.Fatalf("round %d: the agent stopped before the take-over: %v", round, agentErr)
		}
		if ok, err := records.TakeOverRun(ctx, k, "agent silent"); !ok || err != nil {
			t.Fatalf("round %d: TakeOverRun = %t, %v", round, ok, err)
		}
		segs, err := records.Segments(ctx, k.PodUID, k.Container, k.Run)
		if err != nil {
			t.Fatal(err)
		}
		resumeAt := int32(len(segs))
		for i := range int32(3) {
			if err := records.PutSegment(ctx, segment(k, resumeAt+i, "api")); err != nil {
				t.Fatalf("round %d: API PutSegment %d after the take-over: %v", round, resumeAt+i, err)
			}
		}
		wg.Wait()
		if agentErr != nil {
			t.Fatalf("round %d: agent: %v", round, agentErr)
		}
		agentStored := <-stored
		if agentStored != resumeAt {
			t.Errorf("round %d: the agent was told %d segments are recorded; the archiver found %d after the take-over", round, agentStored, resumeAt)
		}
		segs, err = records.Segments(ctx, k.PodUID, k.Container, k.Run)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range segs {
			want := record.CapturedByAgent
			if int32(i) >= resumeAt {
				want = record.CapturedByAPI
			}
			if s.Seq != int32(i) || s.Source != want || s.ObjectKey != fmt.Sprintf("%s/%d", want, i) {
				t.Errorf("round %d: segment %d = seq %d by %s (%s), want seq %d by %s", round, i, s.Seq, s.Source, s.ObjectKey, i, want)
			}
		}
		if len(segs) != int(resumeAt)+3 {
			t.Errorf("round %d: %d segments, want %d", round, len(segs), resumeAt+3)
		}
	}
}

// TestDBTakeOverWaitsForWriteInFlight: a take-over that comes while an agent's write is in
// flight (held there by a slow trigger the test adds) waits for it: the archiver then finds the
// agent's segment and resumes after it, and the agent was told its segment is stored.
func TestDBTakeOverWaitsForWriteInFlight(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	if _, err := c.ExecContext(ctx, `
CREATE FUNCTION test_slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.object_key LIKE 'slow/%' THEN PERFORM pg_sleep(2); END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_slow_insert BEFORE INSERT ON log_segments FOR EACH ROW EXECUTE FUNCTION test_slow_insert();`); err != nil {
		t.Fatal(err)
	}
	if err := records.Heartbeat(ctx, "node-a", 0); err != nil {
		t.Fatal(err)
	}
	run := runFixture(t, records, "flight", "node-a")
	mustClaim(t, records, run, record.CapturedByAgent)
	agentErr := make(chan error, 1)
	go func() { agentErr <- records.AgentRecords("node-a").PutSegment(ctx, segment(run.RunKey, 0, "slow")) }()
	deadline := time.Now().Add(10 * time.Second)
	for queryInt(t, c, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%INSERT INTO log_segments%'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the agent's write never got in flight")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ok, err := records.TakeOverRun(ctx, run.RunKey, "agent silent"); !ok || err != nil {
		t.Fatalf("TakeOverRun = %t, %v", ok, err)
	}
	segs, err := records.Segments(ctx, run.PodUID, "main", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := records.PutSegment(ctx, segment(run.RunKey, int32(len(segs)), "api")); err != nil {
		t.Errorf("API PutSegment %d after the take-over: %v", len(segs), err)
	}
	if err := <-agentErr; err != nil || len(segs) != 1 {
		t.Errorf("the agent's write in flight = %v, and the archiver found %d segments after the take-over; want it stored and found", err, len(segs))
	}
}

// TestDBSources: the byte ranges each capture stored survive the segments, once, and an auditor
// reads them with the hand-over in audit_log_sources.
func TestDBSources(t *testing.T) {
	ctx := t.Context()
	records, dsn := stack.OpenRecords(t)
	if err := records.Heartbeat(ctx, "node-a", 0); err != nil {
		t.Fatal(err)
	}
	run := runFixture(t, records, "s", "node-a")
	mustClaim(t, records, run, record.CapturedByAgent)
	agent := records.AgentRecords("node-a")
	for seq := range int32(2) {
		if err := agent.PutSegment(ctx, segment(run.RunKey, seq, "agent")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := records.TakeOverRun(ctx, run.RunKey, "agent silent for 15s"); err != nil {
		t.Fatal(err)
	}
	if err := records.PutSegment(ctx, segment(run.RunKey, 2, "api")); err != nil {
		t.Fatal(err)
	}
	segs, err := records.Segments(ctx, run.PodUID, "main", 0)
	if err != nil {
		t.Fatal(err)
	}
	ranges := record.SourceRanges(segs, record.InstanceCurrent)
	for range 2 {
		if err := records.PutSources(ctx, ranges); err != nil {
			t.Fatalf("PutSources: %v", err)
		}
	}
	if err := records.DeleteSegments(ctx, run.PodUID, "main", 0); err != nil {
		t.Fatal(err)
	}
	got, err := records.Sources(ctx, run.RunKey)
	if err != nil {
		t.Fatal(err)
	}
	want := []record.SourceRange{
		{PodUID: run.PodUID, Container: "main", Instance: record.InstanceCurrent, From: 0, To: 200, Source: record.CapturedByAgent},
		{PodUID: run.PodUID, Container: "main", Instance: record.InstanceCurrent, From: 200, To: 300, Source: record.CapturedByAPI},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Sources (-want +got):\n%s", diff)
	}

	ac := rawDB(t, stack.LoginRole(t, dsn, "jobvault_auditor"))
	rows, err := ac.QueryContext(ctx, `SELECT job_uid, node, container, run, instance, from_bytes, to_bytes, source, claimed_owner, owner, hand_over_reason,
  handed_over_at IS NOT NULL FROM audit_log_sources ORDER BY from_bytes`)
	if err != nil {
		t.Fatalf("as the auditor: %v", err)
	}
	defer rows.Close()
	var view []string
	for rows.Next() {
		var (
			job, node, container, instance, source, claimed, owner, reason string
			run                                                            int
			from, to                                                       int64
			handedOver                                                     bool
		)
		if err := rows.Scan(&job, &node, &container, &run, &instance, &from, &to, &source, &claimed, &owner, &reason, &handedOver); err != nil {
			t.Fatal(err)
		}
		view = append(view, fmt.Sprintf("%s %s %s/%d %s [%d,%d) %s claimed %s now %s: %s (%t)", job, node, container, run, instance, from, to, source, claimed, owner, reason, handedOver))
	}
	wantView := []string{
		"job-s node-a main/0 current [0,200) agent claimed agent now api: agent silent for 15s (true)",
		"job-s node-a main/0 current [200,300) api claimed agent now api: agent silent for 15s (true)",
	}
	if diff := cmp.Diff(wantView, view); diff != "" {
		t.Errorf("audit_log_sources (-want +got):\n%s", diff)
	}
	c := rawDB(t, dsn)
	if _, err := c.ExecContext(ctx, `UPDATE log_sources SET source = 'agent'`); sqlState(err) != pqerror.RestrictViolation {
		t.Errorf("UPDATE log_sources = %v, want SQLSTATE 23001 (append-only)", err)
	}
}

// TestDBAgentRole: jobvault_agent does what the agent does (heartbeat, its runs, fenced segments
// and gaps, completion and release) and nothing else: it reads no pod, job or log record, claims
// or takes over no run, deletes nothing, and cannot move a run back to itself.
func TestDBAgentRole(t *testing.T) {
	ctx := t.Context()
	owner, dsn := stack.OpenRecords(t)
	c := rawDB(t, dsn)
	agentDB, adsn := openAsRole(t, dsn, "jobvault_agent")

	if err := agentDB.Heartbeat(ctx, "node-a", 0); err != nil {
		t.Fatalf("Heartbeat as the agent: %v", err)
	}
	if err := agentDB.Heartbeat(ctx, "node-a", 7); err != nil {
		t.Fatalf("second Heartbeat as the agent: %v", err)
	}
	done, released := runFixture(t, owner, "d", "node-a"), runFixture(t, owner, "r", "node-a")
	mustClaim(t, owner, done, record.CapturedByAgent)
	mustClaim(t, owner, released, record.CapturedByAgent)
	runs, err := agentDB.AgentRuns(ctx, "node-a")
	if err != nil || len(runs) != 2 {
		t.Fatalf("AgentRuns as the agent = %+v, %v; want 2 runs", runs, err)
	}
	recs := agentDB.AgentRecords("node-a")
	if err := recs.PutSegment(ctx, segment(done.RunKey, 0, "agent")); err != nil {
		t.Fatalf("PutSegment as the agent: %v", err)
	}
	if err := recs.PutGap(ctx, record.Gap{PodUID: done.PodUID, Container: "main", After: at(time.Second), Reason: record.GapAgentLetGo}); err != nil {
		t.Fatalf("PutGap as the agent: %v", err)
	}
	if segs, err := recs.Segments(ctx, done.PodUID, "main", 0); err != nil || len(segs) != 1 {
		t.Fatalf("Segments as the agent = %d, %v", len(segs), err)
	}
	if err := owner.EndRun(ctx, done.RunKey); err != nil {
		t.Fatal(err)
	}
	if err := agentDB.CompleteRun(ctx, done.RunKey); err != nil {
		t.Fatalf("CompleteRun as the agent: %v", err)
	}
	if err := agentDB.ReleaseRun(ctx, released.RunKey, "cannot open its files"); err != nil {
		t.Fatalf("ReleaseRun as the agent: %v", err)
	}

	if _, _, err := agentDB.ClaimRun(ctx, runFixture(t, owner, "x", "node-a"), healthyWithin); sqlState(err) != pqerror.InsufficientPrivilege {
		t.Errorf("ClaimRun as the agent = %v, want permission denied", err)
	}
	if err := agentDB.EndRun(ctx, released.RunKey); sqlState(err) != pqerror.InsufficientPrivilege {
		t.Errorf("EndRun as the agent = %v, want permission denied", err)
	}
	ac := rawDB(t, adsn)
	for _, tc := range []struct {
		stmt string
		want pqerror.Code
	}{
		{`SELECT * FROM jobs`, pqerror.InsufficientPrivilege},
		{`SELECT * FROM pods`, pqerror.InsufficientPrivilege},
		{`SELECT * FROM log_objects`, pqerror.InsufficientPrivilege},
		{`SELECT * FROM audit_log_sources`, pqerror.InsufficientPrivilege},
		{`DELETE FROM log_segments`, pqerror.InsufficientPrivilege},
		{`UPDATE log_segments SET source = 'api'`, pqerror.InsufficientPrivilege},
		{`DELETE FROM log_runs`, pqerror.InsufficientPrivilege},
		{`UPDATE log_runs SET over = true`, pqerror.InsufficientPrivilege},
		{`UPDATE log_runs SET node = 'node-b'`, pqerror.InsufficientPrivilege},
		{`UPDATE log_runs SET owner = 'agent' WHERE pod_uid = 'pod-r'`, pqerror.RestrictViolation},
		{`INSERT INTO log_sources (pod_uid, container, run, instance, from_bytes, to_bytes, source) VALUES ('pod-d', 'main', 0, 'current', 0, 1, 'agent')`, pqerror.InsufficientPrivilege},
		{`DELETE FROM capture_agents`, pqerror.InsufficientPrivilege},
	} {
		if _, err := ac.ExecContext(ctx, tc.stmt); sqlState(err) != tc.want {
			t.Errorf("as the agent: %s = %v, want SQLSTATE %s", tc.stmt, err, tc.want)
		}
	}
	// Nothing else: every privilege the agent holds on this database's relations.
	got := rolePrivileges(t, c, "jobvault_agent")
	want := []string{"capture_agents:INSERT", "capture_agents:SELECT", "capture_agents:UPDATE", "log_gaps:INSERT", "log_gaps:SELECT",
		"log_runs:SELECT", "log_runs:UPDATE", "log_segments:INSERT", "log_segments:SELECT"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent privileges (-want +got):\n%s", diff)
	}
}

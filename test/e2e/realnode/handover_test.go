package realnode

import (
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeAgentGoneAPITakesOver is issue 25's proof 4: the node's agent (`archiver agent`)
// captures a run from the node's files, then is killed (SIGKILL: no more heartbeats, no more
// writes) while the container still writes. The archiver takes the run over once the agent has
// been silent for db.AgentHealthyWithin, and the API capture resumes after the agent's last
// segment: the archive is byte-exact, and the records say which capture stored which bytes and
// why the run changed hands.
func TestRealNodeAgentGoneAPITakesOver(t *testing.T) {
	t.Parallel()
	s, rn := rig(t)
	ctx := t.Context()
	// Young segments, so that the agent stores several before it is killed.
	agent := stack.StartAgent(t, s, rn.Name, rn.PodLogsDir(), "--capture-segment-age=1s")

	// Under the rotation size (1 MiB): the API capture resumes from the current file, which holds
	// everything, so any byte missing is the hand-over's.
	job := testbed.Job(s.NS, "handover").Task("w", 1, []string{"main"},
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: 600 << 10, For: 45 * time.Second, Lines: []int{100}}})).Obj()
	stack.CreateAs(t, s.Env, "erin", job)

	run := agentRun(t, s.Records, rn.Name, 2*time.Minute)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		segs, err := s.Records.Segments(ctx, run.PodUID, run.Container, run.Run)
		if err != nil {
			t.Fatal(err)
		}
		if len(segs) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent stored %d segments in a minute, want 3", len(segs))
		}
	}
	agent.Proc.Kill()
	killedAt := time.Now()
	// Once the API owns the run, no write of the agent's can land any more (a statement it sent
	// before it died may have): what it stored is final.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		r, err := s.Records.Run(ctx, run.RunKey, db.AgentHealthyWithin)
		if err != nil {
			t.Fatal(err)
		}
		if r.Owner == record.CapturedByAPI {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is still the agent's a minute after it was killed: %+v", r)
		}
	}
	segs, err := s.Records.Segments(ctx, run.PodUID, run.Container, run.Run)
	if err != nil {
		t.Fatal(err)
	}
	var agentBytes int64
	for _, seg := range segs {
		if seg.Source == record.CapturedByAgent {
			agentBytes = seg.TotalBytes
		}
	}

	j := s.WaitArchived(t, job, 3*time.Minute)
	t.Logf("archived %s after the agent was killed", time.Since(killedAt).Round(time.Second))
	written := rn.Written(s.NS, run.PodUID, "main", 0)
	if len(written) != 600<<10 {
		t.Fatalf("the container wrote %d bytes, want 600 KiB", len(written))
	}
	row := logRows(t, s, string(j.UID))["main/"+record.InstanceCurrent]
	s.CheckLog(t, row, written)
	s.CheckSources(t, row, 0)
	if g := s.Gaps(t, string(j.UID)); len(g) != 0 {
		t.Errorf("gaps %+v, want none", g)
	}

	runs, err := s.Records.JobRuns(ctx, string(j.UID))
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %+v (%v), want one", runs, err)
	}
	r := runs[0]
	if r.ClaimedOwner != record.CapturedByAgent || r.Owner != record.CapturedByAPI || r.HandedOverAt.Before(killedAt) ||
		!strings.Contains(r.HandOverReason, "sent no heartbeat") || r.Node != rn.Name {
		t.Errorf("run record %+v: want claimed by the agent of %s, taken over by the API after it was killed because it sent no heartbeat", r, rn.Name)
	}
	ranges, err := s.Records.Sources(ctx, r.RunKey)
	if err != nil {
		t.Fatal(err)
	}
	want := []record.SourceRange{
		{PodUID: r.PodUID, Container: "main", Instance: record.InstanceCurrent, From: 0, To: agentBytes, Source: record.CapturedByAgent},
		{PodUID: r.PodUID, Container: "main", Instance: record.InstanceCurrent, From: agentBytes, To: int64(len(written)), Source: record.CapturedByAPI},
	}
	if len(ranges) != 2 || ranges[0] != want[0] || ranges[1] != want[1] {
		t.Errorf("sources %+v, want %+v", ranges, want)
	}
	t.Logf("the agent stored bytes [0, %d), the API capture [%d, %d) after taking the run over %s after the agent was killed (%s)",
		agentBytes, agentBytes, len(written), r.HandedOverAt.Sub(killedAt).Round(time.Second), r.HandOverReason)
}

// agentRun waits until the archiver has given a run on node to its agent, and returns it.
func agentRun(t *testing.T, records *db.DB, node string, timeout time.Duration) db.AgentRun {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		runs, err := records.AgentRuns(t.Context(), node)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 1 {
			return runs[0]
		}
		if len(runs) > 1 || time.Now().After(deadline) {
			t.Fatalf("runs of the agent of %s: %+v, want one within %s", node, runs, timeout)
		}
	}
}

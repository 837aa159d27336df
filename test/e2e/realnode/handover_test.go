package realnode

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/archiver"
	"github.com/jobvault/jobvault/pkg/capture"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeAgentGoneAPITakesOver is issue 25's proof 4: the node's agent captures a run, then
// is gone (killed: no more heartbeats, no more writes) while the container still writes. The
// archiver takes the run over once the agent has been silent for db.AgentHealthyWithin, and the
// API capture resumes after the agent's last segment: the archive is byte-exact, and the records
// say which capture stored which bytes and why the run changed hands.
//
// The agent here is the contract's agent as the database sees it: it beats, and it stores the run
// with the same capture loop through db.AgentRecords (its writes fenced by the owner), under keys
// of its own. It reads through pods/log rather than the node's files; what is proven is the
// hand-over, which does not depend on where the agent read.
func TestRealNodeAgentGoneAPITakesOver(t *testing.T) {
	s, rn := rig(t)
	ctx := t.Context()
	beating, stopBeating := context.WithCancel(ctx)
	defer stopBeating()
	beat := func() {
		if err := s.Records.Heartbeat(ctx, rn.Name, 0); err != nil {
			t.Errorf("Heartbeat: %v", err)
		}
	}
	beat()
	go func() {
		for {
			select {
			case <-beating.Done():
				return
			case <-time.After(db.HeartbeatInterval):
				beat()
			}
		}
	}()

	// Under the rotation size (1 MiB): the API capture resumes from the current file, which holds
	// everything, so any byte missing is the hand-over's.
	job := testbed.Job(s.NS, "handover").Task("w", 1, []string{"main"},
		rn.Pods(map[string]testbed.Workload{"main": {Bytes: 600 << 10, For: 45 * time.Second, Lines: []int{100}}})).Obj()
	stack.CreateAs(t, s.Env, "erin", job)

	run := agentRun(t, s.Records, rn.Name, 2*time.Minute)
	agentCtx, kill := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() { agentDone <- runAgent(agentCtx, s, run) }()
	var agentBytes int64
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
	kill()
	stopBeating()
	if err := <-agentDone; err != nil && ctx.Err() == nil && agentCtx.Err() == nil {
		t.Fatalf("agent: %v", err)
	}
	killedAt := time.Now()
	segs, err := s.Records.Segments(ctx, run.PodUID, run.Container, run.Run)
	if err != nil {
		t.Fatal(err)
	}
	agentBytes = segs[len(segs)-1].TotalBytes

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

// runAgent captures run as its node's agent would, until ctx ends: the capture loop with its
// writes fenced by db.AgentRecords and its segments under keys of their own (".agent").
func runAgent(ctx context.Context, s *stack.Rig, run db.AgentRun) error {
	cs, err := kubernetes.NewForConfig(s.Env.Config)
	if err != nil {
		return err
	}
	layout := archive.Layout{Prefix: "archive"}
	job := archive.JobRef{Namespace: run.Namespace, Name: run.JobName, UID: run.JobUID}
	ref := capture.Ref{Namespace: run.Namespace, Pod: run.Pod, PodUID: run.PodUID, Container: run.Container, Run: run.Run}
	segKey := func(seq int32) string {
		key, _ := layout.Segment(job, run.Pod, run.PodUID, run.Container, run.Run, seq)
		return key + ".agent"
	}
	// Small, young segments so that the agent stores several before it is killed; no start rule
	// (NodeLogMaxSize 0): the agent reads its files from their start.
	cfg := capture.Config{SegmentBytes: 16 << 10, SegmentAge: time.Second, Poll: time.Second, Retry: time.Second}
	_, err = capture.Capture(ctx, cfg, archiver.KubeLogs{Clientset: cs, OpenTimeout: 30 * time.Second}, s.Records.AgentRecords(run.Node),
		s.Store, segKey, ref, func(context.Context) (capture.End, error) { return capture.End{}, nil }, nil)
	return err
}

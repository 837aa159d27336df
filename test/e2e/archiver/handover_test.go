package archiver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestAgentRunHandedOver (issue 25): a run the archiver gave to its node's agent goes to the API
// capture when the agent gives it up, when it goes silent, or when it has not completed the run
// by the log deadline; the API capture then archives it byte-exact, and the records say the run
// was claimed by the agent, taken over, why, and that the API capture stored every byte; a segment
// the agent stored but never recorded is swept when the job is sealed. The agent is played
// through the database, as the agent program uses it (heartbeats and ReleaseRun; it stores
// nothing but that segment): the KWOK nodes have no files to read.
func TestAgentRunHandedOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason string // the metric's
		flags  []string
		// act plays the agent once the archiver gave it the run: stop its heartbeats (silent),
		// give the run up, or nothing (it never completes).
		act    func(t *testing.T, records *db.DB, run db.AgentRun, stopBeating func())
		wantIn string // in the recorded hand-over reason
	}{
		{reason: "released", wantIn: db.HandOverReleased + "cannot read its files",
			act: func(t *testing.T, records *db.DB, run db.AgentRun, _ func()) {
				if err := records.ReleaseRun(t.Context(), run.RunKey, "cannot read its files"); err != nil {
					t.Fatalf("ReleaseRun: %v", err)
				}
			}},
		{reason: "silent", wantIn: "sent no heartbeat for 15s",
			act: func(_ *testing.T, _ *db.DB, _ db.AgentRun, stopBeating func()) { stopBeating() }},
		{reason: "deadline", flags: []string{"--log-deadline=5s"}, wantIn: "did not complete the run within the log deadline (5s)",
			act: func(*testing.T, *db.DB, db.AgentRun, func()) {}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			t.Parallel()
			s := stack.NewRig(t, objstore.BackendFS, tc.flags...)
			beating, stopBeating := context.WithCancel(t.Context())
			defer stopBeating()
			beat := func() {
				for _, node := range testbed.Nodes {
					if err := s.Records.Heartbeat(t.Context(), node, 0); err != nil && beating.Err() == nil {
						t.Errorf("Heartbeat of %s: %v", node, err)
					}
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

			job := testbed.Job(s.NS, "handed-over").Task("worker", 1, []string{"main"}).Obj()
			want := stack.PodLogs(t, s.Env, s.NS, job.Name, map[string]int{"worker": 1}, []string{"main"}, false)
			stack.CreateAs(t, s.Env, "alice", job)
			run := claimedByAgent(t, s.Records, time.Minute)
			// A segment the agent stored whose record was refused once the run was taken over (or
			// stored just before the agent was killed): swept when the job is sealed.
			orphan := stack.Must(archive.Layout{Prefix: "archive"}.Segment(archive.JobRef{Namespace: run.Namespace, Name: run.JobName, UID: run.JobUID},
				run.Pod, run.PodUID, run.Container, run.Run, 0)) + ".agent"
			if err := s.Store.Put(t.Context(), orphan, strings.NewReader("never recorded"), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			tc.act(t, s.Records, run, stopBeating)

			j := s.WaitArchived(t, job, 2*time.Minute)
			s.CheckJobArchive(t, j, want)
			if _, err := s.Store.Stat(t.Context(), orphan); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("the agent's segment %s is left in the store after the job was archived (%v)", orphan, err)
			}
			runs, err := s.Records.JobRuns(t.Context(), string(j.UID))
			if err != nil || len(runs) != 1 {
				t.Fatalf("runs %+v (%v), want one", runs, err)
			}
			if r := runs[0]; r.ClaimedOwner != record.CapturedByAgent || r.Owner != record.CapturedByAPI || r.HandedOverAt.IsZero() ||
				!strings.Contains(r.HandOverReason, tc.wantIn) || r.Complete {
				t.Errorf("run %+v: want claimed by the agent, taken over by the API capture with a reason holding %q", r, tc.wantIn)
			}
			ranges, err := s.Records.Sources(t.Context(), runs[0].RunKey)
			if err != nil || len(ranges) != 1 || ranges[0].Source != record.CapturedByAPI || ranges[0].From != 0 {
				t.Errorf("sources %+v (%v), want the whole log by the API capture", ranges, err)
			}
			metrics := s.Metrics(t)
			for _, m := range []string{`jobvault_archiver_runs_taken_over_total{reason="` + tc.reason + `"} 1`,
				`jobvault_archiver_runs_claimed_total{owner="agent"} 1`, `jobvault_archiver_runs_claimed_total{owner="api"} 0`} {
				if !strings.Contains(metrics, m) {
					t.Errorf("the archiver's /metrics lacks %s", m)
				}
			}
		})
	}
}

// claimedByAgent waits until the archiver has given a run to the agent of a KWOK node, and
// returns it.
func claimedByAgent(t *testing.T, records *db.DB, timeout time.Duration) db.AgentRun {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		for _, node := range testbed.Nodes {
			runs, err := records.AgentRuns(t.Context(), node)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) > 0 {
				return runs[0]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run was given to an agent within %s", timeout)
		}
	}
}

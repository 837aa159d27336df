package archiver

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestCaptureFastCrashLoopKeepsEachRunsOwnLines: a container crash-loops faster than its status
// can follow (7 runs of 0.4 s). Each run's record holds only that run's own lines, in order: never
// the next run's (a read served another run), and what is missing of it is a recorded gap. A run
// the capture read lines of is stored, not "unavailable" with those lines thrown away.
func TestCaptureFastCrashLoopKeepsEachRunsOwnLines(t *testing.T) {
	t.Parallel()
	s := stack.NewRig(t, objstore.BackendS3)
	rt := s.Env.Runtime(t, testbed.RuntimeOptions{})
	job := testbed.Job(s.NS, "fastloop").Task("w", 1, []string{"main"}, testbed.Restarts(6, 400*time.Millisecond)).Obj()
	pod := testbed.PodName(job.Name, "w", 0)
	var runs [][]testbed.Chunk
	for run := range 7 {
		runs = append(runs, stack.SteadyOutput(fmt.Sprintf("run %d", run), 4, 512))
	}
	rt.Run(t, s.NS, pod, map[string]testbed.Output{"main": {Runs: runs, Every: 50 * time.Millisecond}})
	stack.CreateAs(t, s.Env, "erin", job)
	j := s.WaitArchived(t, job, 3*time.Minute)
	checkOwnLines(t, s, rt, string(j.UID), pod, 7)
}

// checkOwnLines fails unless each of the n runs of the pod's container "main" is recorded with
// only its own lines, in order, and with a gap for what is missing of it.
func checkOwnLines(t *testing.T, s *stack.Rig, rt *testbed.Runtime, jobUID, pod string, n int32) {
	t.Helper()
	all := s.Gaps(t, jobUID)
	for run := range n {
		instance := record.InstanceCurrent
		if run < n-1 {
			instance = record.PreviousInstance(run + 1)
		}
		row := logRow(t, s, jobUID, "main", instance)
		if row.State != record.LogStored {
			t.Logf("run %d recorded %s: %s", run, row.State, row.Reason)
			continue
		}
		written := rt.Written(s.NS, pod, "main", run)
		got, _ := s.ReadLog(t, row.ObjectKey)
		t.Logf("run %d: %d bytes archived (%.40q…), %d written", run, len(got), got, len(written))
		missing := missingRuns(t, written, got) // fails unless got is the run's own lines, in order
		var runGaps []record.Gap
		for _, g := range all {
			if g.Run == run {
				runGaps = append(runGaps, g)
			}
		}
		if len(missing) > 0 && len(runGaps) == 0 {
			t.Errorf("run %d: %d of %d bytes archived, missing %v, and no gap recorded", run, len(got), len(written), missing)
		}
		t.Logf("run %d: %d of %d bytes archived, gaps %v", run, len(got), len(written), runGaps)
	}
}

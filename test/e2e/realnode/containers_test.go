package realnode

import (
	"testing"
	"time"

	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestRealNodeContainersNoReopenLoop: a pod with an init container, two regular containers and a
// third that ends early, long before the pod. On a real kubelet a follow stream ends at EOF once
// its container has stopped (KWOK's never ends): a capture that reopens an ended container's
// stream at once spins (33,590 opens a second were seen on an ended init container). Every run is
// archived byte-exact, and pods/log is asked a bounded number of times per container.
func TestRealNodeContainersNoReopenLoop(t *testing.T) {
	s, rn := rig(t)
	job := testbed.Job(s.NS, "containers").Task("w", 1, []string{"main", "helper", "early"}, testbed.InitContainers("setup"),
		rn.Pods(map[string]testbed.Workload{
			"setup":  {Bytes: 20 << 10},
			"main":   {Bytes: 300 << 10, For: 12 * time.Second},
			"helper": {Bytes: 100 << 10, For: 12 * time.Second, Stream: "stderr", Lines: []int{80, 20 << 10}},
			"early":  {Bytes: 10 << 10, NoFinalNewline: true},
		})).Obj()
	before := s.Env.PodLogRequests(t)
	start := time.Now()
	stack.CreateAs(t, s.Env, "erin", job)
	j := s.WaitArchived(t, job, 3*time.Minute)
	requests := s.Env.PodLogRequests(t) - before
	t.Logf("archived %s after the job's creation; pods/log asked %d times for 4 containers", time.Since(start).Round(time.Second), requests)

	name := testbed.PodName(job.Name, "w", 0)
	uid := podUID(t, s, string(j.UID), name)
	rows := logRows(t, s, string(j.UID))
	for _, c := range []string{"setup", "main", "helper", "early"} {
		// A capture opens each container's stream once, plus a few reopens (a stream that ends,
		// the final read): 10 is generous, a reopen loop is thousands.
		n := rn.LogRequests(t, s.NS, name, c)
		t.Logf("container %s: the kubelet served %d log requests", c, n)
		if n > 10 {
			t.Errorf("container %s: the kubelet served %d log requests: a reopen loop", c, n)
		}
		row, ok := rows[c+"/"+record.InstanceCurrent]
		if !ok {
			t.Errorf("no archived log of container %s (rows %v)", c, rows)
			continue
		}
		written := rn.Written(s.NS, uid, c, 0)
		if len(written) == 0 {
			t.Errorf("container %s recorded nothing written", c)
		}
		s.CheckLog(t, row, written)
	}
	if g := s.Gaps(t, string(j.UID)); len(g) != 0 {
		t.Errorf("gaps %+v, want none", g)
	}
	if requests > 40 {
		t.Errorf("pods/log asked %d times for 4 containers in %s: a reopen loop", requests, time.Since(start).Round(time.Second))
	}
}

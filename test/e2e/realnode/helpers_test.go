package realnode

import (
	"os"
	"strconv"
	"testing"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// rig is an archiver (the real binary, fs store) for a namespace of its own, told the real node's
// rotation size, and the real node.
func rig(t *testing.T, flags ...string) (*stack.Rig, *testbed.RealNode) {
	t.Helper()
	rn := testbed.Cluster(t).RealNode(t, nodeOptions)
	t.Logf("real node started in %s (once per test binary)", rn.StartedIn.Round(100_000_000))
	flags = append([]string{"--node-log-max-size=" + strconv.Itoa(1<<20)}, flags...)
	return stack.NewRig(t, objstore.BackendFS, flags...), rn
}

// logRows returns the job's recorded logs by container and instance.
func logRows(t *testing.T, s *stack.Rig, jobUID string) map[string]record.LogObject {
	t.Helper()
	logs, err := s.Records.LogObjects(t.Context(), jobUID)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]record.LogObject{}
	for _, l := range logs {
		rows[l.Container+"/"+l.Instance] = l
	}
	return rows
}

// podUID returns the UID of the job's pod named name, as recorded (the pod may be gone).
func podUID(t *testing.T, s *stack.Rig, jobUID, name string) string {
	t.Helper()
	pods, err := s.Records.Pods(t.Context(), jobUID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Name == name {
			return p.UID
		}
	}
	t.Fatalf("no pod %s recorded for job %s (%v)", name, jobUID, pods)
	return ""
}

// commonPrefix is how many bytes a and b share at their start.
func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// envInt is the integer in the environment variable name, def if unset: a proof's size, larger
// in make bench-agent-full than in make test.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a number", name, v)
	}
	return n
}

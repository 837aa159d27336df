package testbed

import (
	"os"

	"github.com/prometheus/procfs"
)

// APIServerPID is the process id of the cluster's kube-apiserver, for benchmarks that read its
// CPU time from /proc. envtest starts it as a child of this process (the setpriv wrapper execs
// it, keeping the pid) and does not expose the process, so it is found by parent and name.
func (e *Env) APIServerPID(t T) int {
	t.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		t.Fatalf("testbed: list processes: %v", err)
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err == nil && st.PPID == os.Getpid() && st.Comm == "kube-apiserver" {
			return p.PID
		}
	}
	t.Fatalf("testbed: no kube-apiserver among the children of process %d", os.Getpid())
	return 0
}

// Package realnode proves the capture on a real node (testbed.RealNode): the kubelet of the
// cluster's version with containerd and runc, whose rotation, follow streams, restarts,
// termination and container GC are the real ones, not a model's. Byte-exact always means against
// what the workload program recorded it wrote.
package realnode

import (
	"testing"
	"time"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// nodeOptions are the real node's settings for the whole suite: rotation at 1 MiB (the smallest
// quick tests use), five files kept, and CrashLoopBackOff capped at 2 s so that a crash loop of
// four restarts takes seconds rather than the default's 150 s of back-off.
var nodeOptions = testbed.RealNodeOptions{LogMaxSize: "1Mi", LogMaxFiles: 5, CrashLoopMaxBackoff: 2 * time.Second}

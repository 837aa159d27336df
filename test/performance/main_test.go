// Package bench holds the benchmarks (`make bench`): the webhook's handler and VcJob creates
// through the API server with and without it; the archiver following 1,000 containers, its
// capture throughput against a raw pods/log copy, and its release latency; the node agent against
// the API capture on the real node (BenchmarkAgent); the audit chain's finalizations and its full
// verification proof (BenchmarkAuditFinalize, BenchmarkAuditVerify). Their targets are in targets.yaml, each
// once; its only test (TestTargets) reads that file, so `go test ./...` starts nothing here.
package performance

import (
	"os"
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) {
	if os.Getenv(floorClientEnv) != "" {
		os.Exit(floorClientMain()) // a floor's client (floorClient), not the tests
	}
	testbed.Main(m)
}

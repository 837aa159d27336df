package stack

import (
	"os/exec"
	"runtime"
	"testing"
)

// CPUStress runs n busy processes (one per CPU when n is 0) beside the test until it ends, as a
// loaded machine has them: the capture's follow streams, the API server and the node then fall
// behind their containers. They are stopped, by the PIDs started here, at the test's cleanup.
func CPUStress(t testing.TB, n int) {
	t.Helper()
	if n <= 0 {
		n = runtime.NumCPU()
	}
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a CPU stress process: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

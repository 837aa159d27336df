package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// ModuleRoot is the jobvault module's root directory (two levels above this file).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// GoBuild builds one of jobvault's own programs (e.g. "./archiver") once per test binary and
// returns the path of the binary, so tests run the real program with its real flags.
func GoBuild(t T, pkg string) string {
	t.Helper()
	out, err := goBuild(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// goBuild is GoBuild for the parts that report errors instead of failing a test.
func goBuild(pkg string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p, nil
	}
	out := filepath.Join(WorkDir(), "programs", filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testbed: go build %s: %w\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out, nil
}

// Start runs a program as a testbed process (log in WorkDir()/name.log) that the test stops when
// it ends; callers may Stop or Kill it earlier.
func Start(t T, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p, err := startProcess(name, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	onStop(p.Stop)
	return p
}

// WaitReady polls url until it answers 200, failing the test with the process log otherwise.
func (p *Process) WaitReady(t T, url string, timeout time.Duration) {
	t.Helper()
	if err := p.waitFor(timeout, httpOK(url)); err != nil {
		t.Fatal(err)
	}
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort(t T) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(fmt.Errorf("testbed: free port: %w", err))
	}
	return p
}

// StartShared runs a program that outlives the test that started it (shared by the whole run); it
// stops with every other part at the end of the run.
func StartShared(t T, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p, err := startProcess(name, cmd)
	if err != nil {
		t.Fatal(err)
	}
	onStop(p.Stop)
	return p
}

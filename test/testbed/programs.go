package testbed

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
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
	cached, err := BuildProgram(pkg)
	if err != nil {
		return "", err
	}
	// The run's own name for the binary, as it was when built: a later build into the cache
	// (the code changed meanwhile) replaces the cache's file, not this one.
	out := filepath.Join(WorkDir(), "programs", filepath.Base(pkg))
	if err := linkOrCopy(cached, out); err != nil {
		return "", fmt.Errorf("testbed: %s: %w", pkg, err)
	}
	built[pkg] = out
	return out, nil
}

// BuildProgram builds one of jobvault's programs (e.g. "./archiver") into a directory of the
// cache kept between runs, one per module root, and returns the binary's path there. go build
// leaves a binary as it is when it is up to date (its build ID says what it was built from) and
// links it again when anything it is built from changed, so the test binaries of a run, and the
// runs after, link each program once rather than once each (some 100 MiB each, seconds of both
// cores). The processes that build at once (go test runs two test binaries at a time) take turns
// by a file lock, so none replaces a binary that another is writing. A later build replaces the
// file when the code changed: a caller that runs the program later should link it elsewhere
// first, as GoBuild does.
func BuildProgram(pkg string) (string, error) {
	dir := filepath.Join(CacheDir(), "programs", moduleKey())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testbed: create %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", fmt.Errorf("testbed: open the build lock: %w", err)
	}
	defer lock.Close() // and unlocked
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("testbed: lock %s: %w", lock.Name(), err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testbed: go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// moduleKey names the module root in the cache: two checkouts never share a binary.
func moduleKey() string {
	root, err := filepath.Abs(ModuleRoot())
	if err != nil {
		root = ModuleRoot()
	}
	sum := sha256.Sum256([]byte(root))
	return hex.EncodeToString(sum[:8])
}

// linkOrCopy gives the file src the name dst too: a hard link, or a copy where the two are on
// different file systems.
func linkOrCopy(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dst), err)
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	return nil
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

// WaitReady polls url until it answers 200, failing the test with the process log otherwise. A
// wait longer than readyProgress logs each readyProgress it goes on, so that a long one (a cache of
// 100,000 pods syncing on a loaded machine) is seen waiting, not hung.
func (p *Process) WaitReady(t T, url string, timeout time.Duration) {
	t.Helper()
	ok, start, next := httpOK(url), time.Now(), readyProgress
	if err := p.waitFor(timeout, func() error {
		err := ok()
		if err != nil && time.Since(start) >= next {
			t.Logf("%s not ready after %s (waiting up to %s): %v", p.Name, next, timeout, err)
			next += readyProgress
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// readyProgress is how often WaitReady reports a wait that goes on.
const readyProgress = 30 * time.Second

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

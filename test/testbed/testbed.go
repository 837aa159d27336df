// Package testbed starts the real parts jobvault runs against, on 127.0.0.1 only: kube-apiserver and
// etcd (through envtest), the real Volcano scheduler and job controller, KWOK serving pods and their
// logs, Postgres 15, MinIO and the GCS emulator. Parts start lazily, once per test binary, on first
// use; Main stops every one of them at exit, also when the run is interrupted.
//
// Binaries are built and cached by `make testbed` (test/tools/build.sh); a missing binary fails the
// test with that advice, never a silent skip.
package testbed

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

//go:embed versions.env
var versionsEnv string

// Versions maps the keys of versions.env (e.g. KUBE_VERSION) to their values.
var Versions = parseVersions(versionsEnv)

func parseVersions(s string) map[string]string {
	v := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, val, ok := strings.Cut(line, "="); ok {
			v[k] = val
		}
	}
	return v
}

// CacheDir is where test/tools/build.sh caches binaries: $JOBVAULT_CACHE or ~/.cache/jobvault.
func CacheDir() string {
	if d := os.Getenv("JOBVAULT_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "jobvault")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "jobvault")
}

// Binary returns the path of a cached testbed binary built for the version under versionKey.
func Binary(name, versionKey string) (string, error) {
	p := filepath.Join(CacheDir(), "bin", name+"-"+Versions[versionKey], name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("testbed binary %s %s is not built (%s): run `make testbed` first", name, Versions[versionKey], p)
	}
	return p, nil
}

var (
	mu       sync.Mutex
	stoppers []func() // in start order; run in reverse
	workDir  string
)

// Main runs the tests of a package that uses testbed parts and stops every part at the end. Use it
// as `func TestMain(m *testing.M) { testbed.Main(m) }`.
func Main(m *testing.M) {
	// Programs under test log to their own files; in-process helpers (webhook servers, clients)
	// stay quiet unless TESTBED_LOG is set.
	if os.Getenv("TESTBED_LOG") != "" {
		ctrllog.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrllog.SetLogger(logr.Discard())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "testbed: %v: stopping all parts\n", s)
		StopAll()
		os.Exit(130)
	}()
	code := m.Run()
	if code != 0 && WorkDirIfCreated() != "" {
		// Keep every part's log for the failure messages that point at them.
		os.Setenv("TESTBED_KEEP", "1")
		fmt.Fprintf(os.Stderr, "testbed: run failed; logs of every part kept in %s\n", WorkDirIfCreated())
	}
	StopAll()
	os.Exit(code)
}

// stopMu serialises StopAll: a second caller (the signal handler racing the end of the run) waits
// until the first has stopped everything, instead of exiting under it.
var stopMu sync.Mutex

// StopAll stops every started part, newest first. Safe to call more than once, concurrently.
func StopAll() {
	stopMu.Lock()
	defer stopMu.Unlock()
	mu.Lock()
	s := stoppers
	stoppers = nil
	dir := workDir
	workDir = ""
	mu.Unlock()
	for i := len(s) - 1; i >= 0; i-- {
		s[i]()
	}
	if dir != "" && os.Getenv("TESTBED_KEEP") == "" {
		_ = os.RemoveAll(dir)
	}
}

func onStop(f func()) {
	mu.Lock()
	defer mu.Unlock()
	stoppers = append(stoppers, f)
}

// WorkDirIfCreated is WorkDir if some part has created it, else "".
func WorkDirIfCreated() string {
	mu.Lock()
	defer mu.Unlock()
	return workDir
}

// WorkDir is the per-run directory holding every part's data and log files. Set TESTBED_KEEP=1 to
// keep it after the run.
func WorkDir() string {
	mu.Lock()
	defer mu.Unlock()
	if workDir == "" {
		d, err := os.MkdirTemp("", "jobvault-testbed-")
		if err != nil {
			panic(err)
		}
		// Postgres runs as another user and must reach its data dir under here.
		_ = os.Chmod(d, 0o755)
		workDir = d
	}
	return workDir
}

// once memoises the start of a shared part and its error.
type once[T any] struct {
	o   sync.Once
	v   T
	err error
}

func (o *once[T]) get(name string, start func() (T, error)) (T, error) {
	o.o.Do(func() {
		t0 := time.Now()
		o.v, o.err = start()
		if o.err == nil {
			// Progress for the slow parts; shown by `go test -v` and with any failure.
			fmt.Fprintf(os.Stderr, "testbed: %s ready in %.1fs (logs in %s)\n", name, time.Since(t0).Seconds(), WorkDir())
		}
	})
	return o.v, o.err
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// The kernel may hand a port just closed out again: two calls in a row gave an archiver
		// the same port for its health probe and its metrics, and it died at start ("address
		// already in use"; TestArchiveNamespaceRetention, 2026-11-28). A port is handed out once
		// per process.
		if !portsGiven[port] {
			portsGiven[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no port the kernel offered was one not handed out already")
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// Process is a part the testbed started; it dies with the test binary (SIGKILL via Pdeathsig) even
// when the binary is killed, so no run leaves processes behind.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startProcess runs bin with args as a child whose stdout and stderr go to WorkDir()/name.log.
func startProcess(name string, cmd *exec.Cmd) (*Process, error) {
	logPath := filepath.Join(WorkDir(), name+".log")
	for i := 2; fileExists(logPath); i++ {
		logPath = filepath.Join(WorkDir(), fmt.Sprintf("%s-%d.log", name, i))
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id of the part.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the part's process group, then SIGKILL after a grace period.
func (p *Process) Stop() {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill ends the part at once with SIGKILL (crash tests).
func (p *Process) Kill() {
	if !p.Exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// failure describes a part that did not start: its name, the cause, the tail of its log.
func (p *Process) failure(err error) error {
	return fmt.Errorf("testbed part %s failed to start: %w (log: %s)%s", p.Name, err, p.LogPath, tail(p.LogPath))
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n--- last lines of the log ---\n" + string(bytes.TrimSpace(b))
}

// waitFor polls ready until it returns nil, the process exits, or the timeout passes.
func (p *Process) waitFor(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if p.Exited() {
			return p.failure(errors.New("process exited"))
		}
		if err = ready(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p.failure(fmt.Errorf("not ready after %s: %v", timeout, err))
}

// T is the part of testing.TB the testbed uses, so that programs other than tests (the demo) can
// drive it too.
type T interface {
	Helper()
	Name() string
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

// Command demo runs jobvault end to end on a local stack built from the testbed: kube-apiserver,
// the real Volcano scheduler and controller, KWOK nodes, Postgres, and a filesystem (default) or
// MinIO object store. It runs the webhook, the archiver and the archive API as local processes
// wired as in a cluster, submits sample VcJobs, prints what was archived and how a user with view
// rights reads a deleted job's logs with kubectl-jobvault (built into <dir>/bin), and waits for
// Ctrl-C (or `make demo-down`) to stop everything.
//
// With --real-node it also runs one job on the testbed's real node (a kubelet with containerd and
// runc; needs root) and says which job ran where.
//
//	go run ./test/demo [--store=fs|s3] [--exit] [--real-node]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

func main() {
	store := flag.String("store", objstore.BackendFS, "Object store for the archive: fs (a directory, browsable after the demo) or s3 (a local MinIO).")
	dir := flag.String("dir", ".demo", "Directory for the demo's PID file and the fs store's archive.")
	exit := flag.Bool("exit", false, "Stop as soon as the summary is printed instead of waiting for Ctrl-C.")
	realNode := flag.Bool("real-node", false, "Also run a job on the testbed's real node (kubelet, containerd, runc; needs root and `apt-get install containerd runc containernetworking-plugins`).")
	flag.Parse()

	r := &runner{}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Println("\njobvault demo: stopping everything")
		r.stop()
		os.Exit(0)
	}()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		r.Fatal(err)
	}
	pidFile := filepath.Join(*dir, "demo.pid")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { os.Remove(pidFile) })
	// The archiver writes under the prefix "archive", so the archive is <dir>/archive/<namespace>/<job>/….
	root, err := filepath.Abs(*dir)
	if err != nil {
		r.Fatal(err)
	}
	if _, err := run(r, os.Stdout, options{Backend: *store, FSRoot: root, Dir: root, Explore: !*exit, RealNode: *realNode}); err != nil {
		r.Fatal(err)
	}
	if !*exit {
		fmt.Println("Press Ctrl-C (or run `make demo-down`) to stop everything.")
		select {}
	}
	r.stop()
}

// runner drives the testbed outside `go test`: Fatal stops every part and exits.
type runner struct{ cleanups []func() }

func (r *runner) Helper()                      {}
func (r *runner) Name() string                 { return "demo" }
func (r *runner) Cleanup(f func())             { r.cleanups = append(r.cleanups, f) }
func (r *runner) Fatal(args ...any)            { r.fail(fmt.Sprint(args...)) }
func (r *runner) Fatalf(f string, args ...any) { r.fail(fmt.Sprintf(f, args...)) }
func (r *runner) Logf(f string, args ...any)   { fmt.Fprintf(os.Stderr, f+"\n", args...) }

// Errorf reports a failure that does not stop the demo, such as a part that failed to clean up.
func (r *runner) Errorf(f string, args ...any) { r.Logf("jobvault demo: "+f, args...) }

// Context is the demo's: it ends with the process.
func (r *runner) Context() context.Context { return context.Background() }

// TempDir makes a directory under the testbed's work directory, removed when the demo stops.
func (r *runner) TempDir() string {
	d, err := os.MkdirTemp(testbed.WorkDir(), "demo-")
	if err != nil {
		r.Fatal(err)
	}
	r.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func (r *runner) fail(msg string) {
	fmt.Fprintln(os.Stderr, "jobvault demo failed:", msg)
	r.stop()
	os.Exit(1)
}

func (r *runner) stop() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
	testbed.StopAll()
}

var _ stack.TB = (*runner)(nil)

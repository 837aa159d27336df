package performance

// The client side of BenchmarkReleaseThroughput's floors (issue 28, target 1): what the least any
// archiver must do per pod costs the archiver's own process. Each floor's client runs in a child
// process, this test binary again with floorClientEnv set, whose CPU is read by process id between
// its start-up and its end: the benchmark's own process cannot be measured, as the testbed's node
// model (serving the pods' logs) runs in it.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/archiver"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/test/testbed"
)

// floorClientEnv names the file of the floorSpec a child of the benchmark runs (floorClientMain).
const floorClientEnv = "JOBVAULT_BENCH_FLOOR_CLIENT"

// The floors a client runs.
const (
	floorPatches = "patches" // one merge patch of an annotation on each pod
	floorLogs    = "logs"    // each pod's log read once through pods/log
	floorRecords = "records" // each pod's small log gzipped and PUT (checked), and one one-row transaction
	// All three in turn for each pod, by one client: what any archiver must do per pod, and no
	// more (its log read through pods/log, stored, one row, one patch).
	floorArchive = "archive"
)

// floorSpec is one floor for a child to run: Op on each pod, by Workers at once.
type floorSpec struct {
	Op         string
	Kubeconfig string // cluster-admin's
	Namespace  string
	Pods       []string
	Workers    int
	Store      objstore.Config
	DSN        string
}

// floorTimeout bounds a floor's child process: a request that hangs fails the benchmark instead of
// holding it until go test's own timeout.
const floorTimeout = 5 * time.Minute

// floorClient runs spec in a child process and returns the CPU the child spent on it, in ms per
// pod, its process start-up and clients' set-up left out (its connections are opened in the run, as an
// archiver's first requests open them). measure is called with the floor's run: what it samples
// around run (the servers' CPU) is the floor's server side.
func floorClient(b *testing.B, spec floorSpec, measure func(run func())) float64 {
	b.Helper()
	path := filepath.Join(b.TempDir(), "floor-"+spec.Op+".json")
	data, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.Context(), floorTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), floorClientEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // not left behind by a benchmark that dies
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait() //nolint:errcheck // its failure is read from its lines first
	defer in.Close() //nolint:errcheck // ends the child
	out := bufio.NewScanner(outPipe)
	expect := func(line string) {
		if !out.Scan() || out.Text() != line {
			b.Fatalf("floor %s client: want %q, got %q (%v)", spec.Op, line, out.Text(), out.Err())
		}
	}
	expect("ready")
	var spent float64
	measure(func() {
		t0 := sampleProc(b, cmd.Process.Pid)
		if _, err := io.WriteString(in, "go\n"); err != nil {
			b.Fatal(err)
		}
		expect("done")
		spent = sampleProc(b, cmd.Process.Pid).cpu - t0.cpu
	})
	return spent / float64(len(spec.Pods)) * 1000
}

// floorClientMain runs the floor named by floorClientEnv's file: it sets its clients up, says
// "ready", runs the floor when told (a line on standard input), says "done" and waits for its
// input to end. It returns the process's exit code.
func floorClientMain() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "floor client:", err)
		return 1
	}
	data, err := os.ReadFile(os.Getenv(floorClientEnv))
	if err != nil {
		return fail(err)
	}
	var spec floorSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), floorTimeout)
	defer cancel()
	each, err := floorWork(ctx, spec)
	if err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return fail(fmt.Errorf("not told to go: %v", in.Err()))
	}
	if err := inParallel(len(spec.Pods), spec.Workers, each); err != nil {
		return fail(fmt.Errorf("floor %s: %w", spec.Op, err))
	}
	fmt.Println("done")
	for in.Scan() { // until the benchmark has read this process's CPU
	}
	return 0
}

// floorWork returns the work of spec's floor for pod i, its clients set up.
func floorWork(ctx context.Context, spec floorSpec) (func(i int) error, error) {
	switch spec.Op {
	case floorPatches:
		return patchWork(ctx, spec, "1")
	case floorLogs:
		read, err := logWork(ctx, spec)
		if err != nil {
			return nil, err
		}
		return func(i int) error { _, err := read(i); return err }, nil
	case floorRecords:
		record, err := recordWork(ctx, spec, "floor")
		if err != nil {
			return nil, err
		}
		raw := testbed.Bytes(smallLines("floor-pod", 10))
		return func(i int) error { return record(i, raw) }, nil
	case floorArchive:
		// Another table and prefix than the records floor's, another annotation value than the
		// patch floor's (a patch that changes nothing is not written).
		read, err := logWork(ctx, spec)
		if err != nil {
			return nil, err
		}
		record, err := recordWork(ctx, spec, "floor_archive")
		if err != nil {
			return nil, err
		}
		patch, err := patchWork(ctx, spec, "2")
		if err != nil {
			return nil, err
		}
		return func(i int) error {
			log, err := read(i)
			if err == nil {
				err = record(i, log)
			}
			if err == nil {
				err = patch(i)
			}
			return err
		}, nil
	}
	return nil, fmt.Errorf("unknown floor %q", spec.Op)
}

// restConfig is cluster-admin's, unthrottled: the floors go as fast as the API server takes them.
func restConfig(spec floorSpec) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", spec.Kubeconfig)
	if err == nil {
		cfg.QPS, cfg.Burst = -1, 0
	}
	return cfg, err
}

// patchWork merge-patches the floor's annotation, set to value, onto pod i.
func patchWork(ctx context.Context, spec floorSpec, value string) (func(i int) error, error) {
	cfg, err := restConfig(spec)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	body := []byte(`{"metadata":{"annotations":{"bench.jobvault.io/floor":"` + value + `"}}}`)
	return func(i int) error {
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name = spec.Namespace, spec.Pods[i]
		return c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, body))
	}, nil
}

// logWork reads pod i's log once through pods/log, with the clientset the archiver reads logs
// with, and returns it.
func logWork(ctx context.Context, spec floorSpec) (func(i int) ([]byte, error), error) {
	cfg, err := restConfig(spec)
	if err != nil {
		return nil, err
	}
	cs, err := archiver.LogsClientset(cfg)
	if err != nil {
		return nil, err
	}
	return func(i int) ([]byte, error) {
		rc, err := cs.CoreV1().Pods(spec.Namespace).GetLogs(spec.Pods[i], &corev1.PodLogOptions{Container: "main", Timestamps: true}).Stream(ctx)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		log, err := io.ReadAll(rc)
		if err == nil && len(log) == 0 {
			err = fmt.Errorf("pod %s: empty log", spec.Pods[i])
		}
		return log, err
	}, nil
}

// recordWork returns the records' work for pod i and its log: the log gzipped and PUT under
// prefix/, checked as the archiver's are, then one transaction inserting one keyed row into table
// prefix_logs, which it makes first.
func recordWork(ctx context.Context, spec floorSpec, prefix string) (func(i int, log []byte) error, error) {
	store, err := objstore.New(ctx, spec.Store)
	if err != nil {
		return nil, err
	}
	// Arguments sent in binary, as pkg/db sends them: one round trip a statement, not two.
	db, err := sql.Open("postgres", spec.DSN+"&binary_parameters=yes")
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(spec.Workers)
	table := prefix + "_logs"
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+` (pod_uid text, container text, instance text,
    object_key text NOT NULL, bytes bigint NOT NULL, sha256 text NOT NULL, PRIMARY KEY (pod_uid, container, instance))`); err != nil {
		return nil, err
	}
	// Compressors reused at the archiver's level (pkg/capture's gzipWriters): a new one a pod
	// would cost more than the archiver spends.
	zws := sync.Pool{New: func() any { zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed); return zw }}
	return func(i int, log []byte) error {
		var zipped bytes.Buffer
		zw := zws.Get().(*gzip.Writer)
		defer zws.Put(zw)
		zw.Reset(&zipped)
		zw.Write(log) //nolint:errcheck // into memory
		zw.Close()    //nolint:errcheck // into memory
		key := fmt.Sprintf("%s/%06d/main.log.gz", prefix, i)
		opts := objstore.PutOptions{ContentType: archive.LogContentType, ContentEncoding: "gzip", Checksum: objstore.ChecksumOf(zipped.Bytes())}
		if err := store.Put(ctx, key, bytes.NewReader(zipped.Bytes()), opts); err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` VALUES ($1, 'main', 'current', $2, $3, $4)`,
			fmt.Sprintf("pod-%06d", i), key, len(log), strings.Repeat("0", 64)); err != nil {
			tx.Rollback() //nolint:errcheck // the insert's error says why
			return err
		}
		return tx.Commit()
	}, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
)

// Exit codes of `archiver logs`.
const (
	inspectOK = 0
	// inspectFailed: the command failed, or verify found at least one problem.
	inspectFailed = 1
	// inspectUsage: the command line is wrong.
	inspectUsage = 2
)

const inspectUsageText = `Usage: archiver logs COMMAND [flags]

Read-only inspection of archived logs, for auditors. The job is named by --job-uid, or by
--namespace and --job (the name; add --cluster-name when several clusters share the database).

Commands:
  ls      List the job's archived container logs: pod, container, instance, state, uncompressed
          bytes, sha256, object key, and why a log is unavailable.
            archiver logs ls --job-uid UID
  cat     Print one log, decompressed, by object key or by pod and container.
            archiver logs cat --key KEY
            archiver logs cat --job-uid UID --pod POD --container NAME [--instance previous-1]
  verify  Re-read every object of the job's archive and compare it with the database: each log's
          uncompressed size and sha256, job.json, and manifest.json against the records. Prints
          every problem; exits 1 if there is any.
            archiver logs verify --job-uid UID

The database comes from --db-dsn (default $JOBVAULT_DB_DSN; the password from PGPASSWORD or
PGPASSFILE) and the store from the same --store-* flags as the archiver's, --store-prefix included
(ls takes them too, and ignores them).
Exit status: 0 success, 1 failure or problems found, 2 usage error.
Run 'archiver logs COMMAND -h' for a command's flags.
`

// runInspect runs `archiver logs ARGS...` and returns the process's exit code.
func runInspect(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return inspectMain(ctx, args, os.Stdout, os.Stderr)
}

// inspectCmd holds the flags of one `archiver logs` command.
type inspectCmd struct {
	name      string
	fs        *flag.FlagSet
	dsn       string
	dbTimeout time.Duration
	store     objstore.Config
	output    string

	jobUID, cluster, namespace, job string
	key, pod, container, instance   string
}

// newInspectCmd registers the flags command name takes: the job selectors, the database and the
// store for all, the log selectors for cat, the output format for ls and verify.
func newInspectCmd(name string, stderr io.Writer) *inspectCmd {
	c := &inspectCmd{name: name, fs: flag.NewFlagSet("archiver logs "+name, flag.ContinueOnError)}
	fs := c.fs
	fs.SetOutput(stderr)
	fs.StringVar(&c.dsn, "db-dsn", os.Getenv("JOBVAULT_DB_DSN"), "Postgres connection string, without password (lib/pq reads PGPASSWORD or PGPASSFILE). Default $JOBVAULT_DB_DSN.")
	fs.DurationVar(&c.dbTimeout, "db-timeout", 30*time.Second, "Timeout of each database query.")
	fs.StringVar(&c.jobUID, "job-uid", "", "UID of the job.")
	fs.StringVar(&c.namespace, "namespace", "", "Namespace of the job, with --job.")
	fs.StringVar(&c.job, "job", "", "Name of the job, with --namespace.")
	fs.StringVar(&c.cluster, "cluster-name", "", "Cluster of the job, with --namespace and --job, when several clusters share the database.")
	// Every command takes the store flags, so that one set of flags (or a shell alias) serves all;
	// ls does not read the store and ignores them.
	c.store.BindFlags(fs)
	if name == "cat" {
		fs.StringVar(&c.key, "key", "", "Object key of the log (as `archiver logs ls` prints it); no database needed.")
		fs.StringVar(&c.pod, "pod", "", "Pod name or UID, with --container.")
		fs.StringVar(&c.container, "container", "", "Container name, with --pod.")
		fs.StringVar(&c.instance, "instance", db.InstanceCurrent, "Which run of the container: current, or previous-N for the run that ended when its restartCount reached N.")
	}
	if name == "ls" || name == "verify" {
		fs.StringVar(&c.output, "output", "text", "Output format: text or json.")
	}
	return c
}

func inspectMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, inspectUsageText)
		return inspectUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, inspectUsageText)
		return inspectOK
	case "ls", "cat", "verify":
	default:
		fmt.Fprintf(stderr, "archiver logs: unknown command %q\n\n%s", args[0], inspectUsageText)
		return inspectUsage
	}
	c := newInspectCmd(args[0], stderr)
	if err := c.fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return inspectOK
		}
		return inspectUsage
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "archiver logs %s: invalid arguments:\n%v\n", c.name, err)
		return inspectUsage
	}
	var err error
	switch c.name {
	case "ls":
		err = c.ls(ctx, stdout)
	case "cat":
		err = c.cat(ctx, stdout)
	case "verify":
		var ok bool
		ok, err = c.verify(ctx, stdout)
		if err == nil && !ok {
			return inspectFailed
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "archiver logs %s: %v\n", c.name, err)
		return inspectFailed
	}
	return inspectOK
}

// validate reports every problem with the command line at once.
func (c *inspectCmd) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.fs.NArg() > 0 {
		add("unexpected arguments: %s", strings.Join(c.fs.Args(), " "))
	}
	byKey := c.name == "cat" && c.key != ""
	byName := c.namespace != "" || c.job != ""
	switch {
	case byKey && (c.jobUID != "" || byName || c.pod != "" || c.container != ""):
		add("--key names the log by itself: drop --job-uid, --namespace, --job, --pod and --container")
	case byKey:
	case c.jobUID != "" && byName:
		add("name the job either by --job-uid or by --namespace and --job, not both")
	case c.jobUID == "" && !byName:
		add("name the job by --job-uid, or by --namespace and --job")
	case byName && (c.namespace == "" || c.job == ""):
		add("--namespace and --job go together")
	}
	if c.name == "cat" && !byKey && (c.pod == "" || c.container == "") {
		add("cat needs --key, or --pod and --container")
	}
	if !byKey && c.dsn == "" {
		add("--db-dsn (or $JOBVAULT_DB_DSN) is required")
	}
	if c.dbTimeout <= 0 {
		add("--db-timeout must be positive, got %s", c.dbTimeout)
	}
	if c.output != "" && c.output != "text" && c.output != "json" {
		add("--output %q is not text or json", c.output)
	}
	if c.name == "cat" || c.name == "verify" {
		if err := c.store.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// openDB connects without migrating: inspection never writes, and may run with a read-only role.
func (c *inspectCmd) openDB(ctx context.Context) (*db.DB, error) {
	ctx, cancel := context.WithTimeout(ctx, c.dbTimeout)
	defer cancel()
	return db.Open(ctx, c.dsn, db.Options{MaxOpenConns: 2})
}

// dbCtx bounds one database call.
func (c *inspectCmd) dbCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.dbTimeout)
}

// resolveJob returns the UID of the job the flags name.
func (c *inspectCmd) resolveJob(ctx context.Context, records *db.DB) (string, error) {
	if c.jobUID != "" {
		return c.jobUID, nil
	}
	// No dbCtx: FindJobs pages through the namespace, and each page is its own query.
	jobs, err := inspect.FindJobs(ctx, records, c.cluster, c.namespace, c.job)
	if err != nil {
		return "", err
	}
	switch len(jobs) {
	case 0:
		return "", fmt.Errorf("no job %s/%s is recorded", c.namespace, c.job)
	case 1:
		return jobs[0].UID, nil
	}
	var b strings.Builder
	for _, j := range jobs {
		fmt.Fprintf(&b, "\n  --job-uid %s  (cluster %q, created %s, phase %s)", j.UID, j.Cluster, j.CreatedAt.Format(time.RFC3339), j.Phase)
	}
	return "", fmt.Errorf("%d jobs %s/%s are recorded; choose one:%s", len(jobs), c.namespace, c.job, b.String())
}

func (c *inspectCmd) ls(ctx context.Context, stdout io.Writer) error {
	records, err := c.openDB(ctx)
	if err != nil {
		return err
	}
	defer records.Close()
	uid, err := c.resolveJob(ctx, records)
	if err != nil {
		return err
	}
	dctx, cancel := c.dbCtx(ctx)
	defer cancel()
	logs, err := inspect.List(dctx, records, uid)
	if err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(stdout, logs)
	}
	return inspect.WriteTable(stdout, logs)
}

func (c *inspectCmd) cat(ctx context.Context, stdout io.Writer) error {
	store, err := objstore.New(ctx, c.store)
	if err != nil {
		return err
	}
	key := c.key
	if key == "" {
		if key, err = c.findLogKey(ctx); err != nil {
			return err
		}
	}
	return inspect.Cat(ctx, store, key, stdout)
}

// findLogKey looks up the object key of the log --pod, --container and --instance name.
func (c *inspectCmd) findLogKey(ctx context.Context) (string, error) {
	records, err := c.openDB(ctx)
	if err != nil {
		return "", err
	}
	defer records.Close()
	uid, err := c.resolveJob(ctx, records)
	if err != nil {
		return "", err
	}
	dctx, cancel := c.dbCtx(ctx)
	defer cancel()
	logs, err := inspect.List(dctx, records, uid)
	if err != nil {
		return "", err
	}
	l, err := inspect.Select(logs, c.pod, c.container, c.instance)
	if err != nil {
		return "", err
	}
	if l.State != db.LogStored {
		return "", fmt.Errorf("the log of container %s (%s) of pod %s was not archived: %s", l.Container, l.Instance, l.Pod, l.Reason)
	}
	return l.Key, nil
}

// verify prints the report and returns whether the archive matches its records.
func (c *inspectCmd) verify(ctx context.Context, stdout io.Writer) (bool, error) {
	store, err := objstore.New(ctx, c.store)
	if err != nil {
		return false, err
	}
	records, err := c.openDB(ctx)
	if err != nil {
		return false, err
	}
	defer records.Close()
	uid, err := c.resolveJob(ctx, records)
	if err != nil {
		return false, err
	}
	// The same layout as the archiver's (archiver/main.go): the prefix is --store-prefix.
	rep, err := inspect.Verify(ctx, timeoutRecords{records, c.dbTimeout}, store, archive.Layout{Prefix: c.store.Prefix}, uid)
	if err != nil {
		return false, err
	}
	if c.output == "json" {
		return rep.OK(), writeJSON(stdout, rep)
	}
	return rep.OK(), rep.WriteText(stdout)
}

// timeoutRecords bounds each database call of a long verification by its own timeout, rather than
// the whole run, which lasts as long as the objects take to read.
type timeoutRecords struct {
	db      *db.DB
	timeout time.Duration
}

func (t timeoutRecords) Job(ctx context.Context, uid string) (db.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.db.Job(ctx, uid)
}

func (t timeoutRecords) Pods(ctx context.Context, jobUID string) ([]db.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.db.Pods(ctx, jobUID)
}

func (t timeoutRecords) LogObjects(ctx context.Context, jobUID string) ([]db.LogObject, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.db.LogObjects(ctx, jobUID)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Package cli is the `archiver logs` command: read-only inspection of archived logs for auditors
// (list, print, verify). The archiver binary hands it its arguments; tests call Main directly.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/record"
)

// Exit codes of Main.
const (
	ExitOK = 0
	// ExitFailed: the command failed, or verify found at least one problem.
	ExitFailed = 1
	// ExitUsage: the command line is wrong, or names another store or prefix than the records.
	ExitUsage = 2
)

const usageText = `Usage: archiver logs COMMAND [flags]

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
          uncompressed size and sha256, job.json, and manifest.json against the records. The
          archive is found where the database recorded it; prints every problem; exits 1 if there
          is any.
            archiver logs verify --job-uid UID

The database comes from --db-dsn (default $JOBVAULT_DB_DSN; the password from PGPASSWORD or
PGPASSFILE) and the store from the same --store-* flags as the archiver's (ls takes them too, and
ignores them). --store-prefix is optional: the records say where each archive is, and a prefix
that disagrees with them is a usage error, never a missing object.
Exit status: 0 success, 1 failure or problems found, 2 usage error (or the flags name another
store or prefix than the one the job was archived under).
Run 'archiver logs COMMAND -h' for a command's flags.
`

// command holds the flags of one `archiver logs` command.
type command struct {
	name   string
	fs     *flag.FlagSet
	db     db.Config
	store  objstore.Config
	prefix string
	output string

	jobUID, cluster, namespace, job string
	key, pod, container, instance   string
}

// newInspectCmd registers the flags command name takes: the job selectors, the database and the
// store for all, the log selectors for cat, the output format for ls and verify.
func newInspectCmd(name string, stderr io.Writer) *command {
	c := &command{name: name, fs: flag.NewFlagSet("archiver logs "+name, flag.ContinueOnError)}
	fs := c.fs
	fs.SetOutput(stderr)
	c.db.BindFlags(fs)
	fs.StringVar(&c.jobUID, "job-uid", "", "UID of the job.")
	fs.StringVar(&c.namespace, "namespace", "", "Namespace of the job, with --job.")
	fs.StringVar(&c.job, "job", "", "Name of the job, with --namespace.")
	fs.StringVar(&c.cluster, "cluster-name", "", "Cluster of the job, with --namespace and --job, when several clusters share the database.")
	// Every command takes the store flags, so that one set of flags (or a shell alias) serves all;
	// ls does not read the store and ignores them.
	c.store.BindFlags(fs)
	fs.StringVar(&c.prefix, "store-prefix", "", "Key prefix the archive is expected under; by default, wherever the database recorded it.")
	if name == "cat" {
		fs.StringVar(&c.key, "key", "", "Object key of the log (as `archiver logs ls` prints it); no database needed.")
		fs.StringVar(&c.pod, "pod", "", "Pod name or UID, with --container.")
		fs.StringVar(&c.container, "container", "", "Container name, with --pod.")
		fs.StringVar(&c.instance, "instance", record.InstanceCurrent, "Which run of the container: current, or previous-N for the run that ended when its restartCount reached N.")
	}
	if name == "ls" || name == "verify" {
		fs.StringVar(&c.output, "output", "text", "Output format: text or json.")
	}
	return c
}

// Main runs `archiver logs ARGS...` and returns the process's exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return ExitOK
	case "ls", "cat", "verify":
	default:
		fmt.Fprintf(stderr, "archiver logs: unknown command %q\n\n%s", args[0], usageText)
		return ExitUsage
	}
	c := newInspectCmd(args[0], stderr)
	if err := c.fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if err := c.validate(); err != nil {
		fmt.Fprintf(stderr, "archiver logs %s: invalid arguments:\n%v\n", c.name, err)
		return ExitUsage
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
			return ExitFailed
		}
	}
	var located *inspect.LocationError
	switch {
	case errors.As(err, &located):
		fmt.Fprintf(stderr, "archiver logs %s: %v\n", c.name, err)
		return ExitUsage
	case err != nil:
		fmt.Fprintf(stderr, "archiver logs %s: %v\n", c.name, err)
		return ExitFailed
	}
	return ExitOK
}

// validate reports every problem with the command line at once.
func (c *command) validate() error {
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
	if !byKey {
		if err := c.db.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.output != "" && c.output != "text" && c.output != "json" {
		add("--output %q is not text or json", c.output)
	}
	if c.name == "cat" || c.name == "verify" {
		if err := c.store.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := (archive.Layout{Prefix: c.prefix}).Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// openDB connects without migrating: inspection never writes, and may run with a read-only role.
func (c *command) openDB(ctx context.Context) (*db.DB, error) {
	opts := c.db.Options
	opts.MaxOpenConns = 2
	return db.Open(ctx, c.db.DSN, opts)
}

// resolveJob returns the UID of the job the flags name.
func (c *command) resolveJob(ctx context.Context, records *db.DB) (string, error) {
	if c.jobUID != "" {
		return c.jobUID, nil
	}
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

func (c *command) ls(ctx context.Context, stdout io.Writer) error {
	records, err := c.openDB(ctx)
	if err != nil {
		return err
	}
	defer records.Close()
	uid, err := c.resolveJob(ctx, records)
	if err != nil {
		return err
	}
	logs, err := inspect.List(ctx, records, uid)
	if err != nil {
		return err
	}
	if c.output == "json" {
		return writeJSON(stdout, logs)
	}
	return inspect.WriteTable(stdout, logs)
}

func (c *command) cat(ctx context.Context, stdout io.Writer) error {
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
func (c *command) findLogKey(ctx context.Context) (string, error) {
	records, err := c.openDB(ctx)
	if err != nil {
		return "", err
	}
	defer records.Close()
	uid, err := c.resolveJob(ctx, records)
	if err != nil {
		return "", err
	}
	logs, err := inspect.List(ctx, records, uid)
	if err != nil {
		return "", err
	}
	l, err := inspect.Select(logs, c.pod, c.container, c.instance)
	if err != nil {
		return "", err
	}
	if l.State != record.LogStored {
		return "", fmt.Errorf("the log of container %s (%s) of pod %s was not archived: %s", l.Container, l.Instance, l.Pod, l.Reason)
	}
	return l.Key, nil
}

// verify prints the report and returns whether the archive matches its records.
func (c *command) verify(ctx context.Context, stdout io.Writer) (bool, error) {
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
	var opts inspect.VerifyOptions
	c.fs.Visit(func(f *flag.Flag) {
		if f.Name == "store-prefix" {
			opts.Prefix = &c.prefix
		}
	})
	rep, err := inspect.Verify(ctx, records, store, uid, opts)
	if err != nil {
		return false, err
	}
	if c.output == "json" {
		return rep.OK(), writeJSON(stdout, rep)
	}
	return rep.OK(), rep.WriteText(stdout)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

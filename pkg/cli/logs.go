package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/pkg/record"
	"github.com/jobvault/jobvault/pkg/verify"
)

// logsCommand is `archiver logs`: one job's archived logs.
func logsCommand() *Command {
	return &Command{
		Name:    "logs",
		Summary: "Read-only inspection of archived logs, for auditors.",
		Description: "The job is named by --job-uid, or by --namespace and --job (the name; add --cluster-name " +
			"when several clusters share the database). The database comes from --db-dsn (default $JOBVAULT_DB_DSN; " +
			"the password from PGPASSWORD or PGPASSFILE) and the store from the same --store-* flags as the " +
			"archiver's (ls takes them too, and ignores them). --store-prefix is optional: the records say where " +
			"each archive is, and a prefix that disagrees with them is a usage error, never a missing object.",
		Subcommands: []*Command{
			{
				Name: "ls",
				Summary: "List the job's archived container logs: pod, container, instance, state, uncompressed " +
					"bytes, sha256, object key, and why a log is unavailable.",
				Examples: []string{"archiver logs ls --job-uid UID"},
				Reads:    ReadsDB | ReadsStore,
				bind:     bindLogs("ls"),
			},
			{
				Name:     "cat",
				Summary:  "Print one log, decompressed, by object key or by pod and container.",
				Examples: []string{"archiver logs cat --key KEY", "archiver logs cat --job-uid UID --pod POD --container NAME [--instance previous-1]"},
				Reads:    ReadsDB | ReadsStore,
				bind:     bindLogs("cat"),
			},
			{
				Name: "verify",
				Summary: "Re-read every object of the job's archive and compare it with the database: each log's " +
					"uncompressed size and sha256, its stream index, job.json, and manifest.json against the records. " +
					"The archive is found where the database recorded it; prints every problem; exits 1 if there is any.",
				Examples: []string{"archiver logs verify --job-uid UID"},
				Reads:    ReadsDB | ReadsStore,
				bind:     bindLogs("verify"),
			},
		},
	}
}

// logsCmd holds the flags of one `archiver logs` command.
type logsCmd struct {
	name   string
	src    *sources
	output string

	jobUID, cluster, namespace, job string
	key, pod, container, instance   string
}

// bindLogs registers the flags the logs command name takes: the job selectors for all, the log
// selectors for cat, the output format for ls and verify.
func bindLogs(name string) func(fs *flag.FlagSet, src *sources) runner {
	return func(fs *flag.FlagSet, src *sources) runner {
		c := &logsCmd{name: name, src: src}
		fs.StringVar(&c.jobUID, "job-uid", "", "UID of the job.")
		fs.StringVar(&c.namespace, "namespace", "", "Namespace of the job, with --job.")
		fs.StringVar(&c.job, "job", "", "Name of the job, with --namespace.")
		fs.StringVar(&c.cluster, "cluster-name", "", "Cluster of the job, with --namespace and --job, when several clusters share the database.")
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
}

// validate reports every problem with the command line at once.
func (c *logsCmd) validate() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
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
	if c.output != "" && c.output != "text" && c.output != "json" {
		add("--output %q is not text or json", c.output)
	}
	return append(errs, c.src.validate(!byKey, c.name == "cat" || c.name == "verify")...)
}

func (c *logsCmd) run(ctx context.Context, stdout, _ io.Writer) error {
	switch c.name {
	case "ls":
		return c.ls(ctx, stdout)
	case "cat":
		return c.cat(ctx, stdout)
	default:
		return c.verify(ctx, stdout)
	}
}

// resolveJob returns the UID of the job the flags name.
func (c *logsCmd) resolveJob(ctx context.Context, records *db.DB) (string, error) {
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

// logsConns bounds the connections of a logs command: it makes one query at a time.
const logsConns = 2

// withJob opens the database and runs fn with it and the UID of the job the flags name.
func (c *logsCmd) withJob(ctx context.Context, fn func(records *db.DB, uid string) error) error {
	records, err := c.src.openDB(ctx, logsConns)
	if err != nil {
		return err
	}
	defer records.Close()
	uid, err := c.resolveJob(ctx, records)
	if err != nil {
		return err
	}
	return fn(records, uid)
}

func (c *logsCmd) ls(ctx context.Context, stdout io.Writer) error {
	return c.withJob(ctx, func(records *db.DB, uid string) error {
		logs, err := inspect.List(ctx, records, uid)
		if err != nil {
			return err
		}
		if c.output == "json" {
			return writeJSON(stdout, logs)
		}
		return inspect.WriteTable(stdout, logs)
	})
}

func (c *logsCmd) cat(ctx context.Context, stdout io.Writer) error {
	store, err := c.src.openStore(ctx)
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
func (c *logsCmd) findLogKey(ctx context.Context) (key string, err error) {
	err = c.withJob(ctx, func(records *db.DB, uid string) error {
		logs, err := inspect.List(ctx, records, uid)
		if err != nil {
			return err
		}
		l, err := inspect.Select(logs, c.pod, c.container, c.instance)
		if err != nil {
			return err
		}
		if l.State != record.LogStored {
			return fmt.Errorf("the log of container %s (%s) of pod %s was not archived: %s", l.Container, l.Instance, l.Pod, l.Reason)
		}
		key = l.Key
		return nil
	})
	return key, err
}

// verify prints the job's report (verify.Job); errFound when it has findings.
func (c *logsCmd) verify(ctx context.Context, stdout io.Writer) error {
	store, err := c.src.openStore(ctx)
	if err != nil {
		return err
	}
	return c.withJob(ctx, func(records *db.DB, uid string) error {
		rep, err := verify.Job(ctx, records, store, uid, verify.JobOptions{Prefix: c.src.prefixGiven()})
		if err != nil {
			return err
		}
		return writeReport(stdout, c.output, rep)
	})
}

// report is what both verify scopes return.
type report interface {
	OK() bool
	WriteText(w io.Writer) error
}

// writeReport prints rep as text or JSON; errFound when it has findings.
func writeReport(w io.Writer, output string, rep report) error {
	var err error
	if output == "json" {
		err = writeJSON(w, rep)
	} else {
		err = rep.WriteText(w)
	}
	switch {
	case err != nil:
		return err
	case !rep.OK():
		return errFound
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

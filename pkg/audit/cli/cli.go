// Package cli is the `archiver audit` command: evidence for auditors that stands on its own
// (verify) and exports of the audit views they can check (export). The archiver binary hands it
// its arguments; tests call Main directly.
package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
)

// Exit codes of Main.
const (
	ExitOK = 0
	// ExitFailed: the command failed, or verify found at least one problem.
	ExitFailed = 1
	// ExitUsage: the command line is wrong.
	ExitUsage = 2
)

// commands are the `archiver audit` commands, each run with its own arguments.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"verify": verifyMain,
	"export": export,
}

const usageText = `Usage: archiver audit COMMAND [flags]

Evidence for auditors: every finalized job has a gapless per-cluster sequence number; its
manifest records the size and sha256 of every object of its archive, the digest of its database
rows and the sha256 of the previous manifest (a hash chain); a signed digest of the chain head is
written periodically.

Commands:
  verify  Recompute the chain between two sequence numbers: every link, every manifest and object
          (read back and hashed), every database row (digested again), the finalized jobs missing
          from the chain, the objects no manifest lists, and the signed digests (with
          --audit-public-key). Prints each altered, missing, extra, re-ordered or forged item by
          name and a summary; exits 1 on any finding.
            archiver audit verify --from 1 --to 5000 --audit-public-key pub.pem
  export  Stream an audit view over a time range as CSV or JSON Lines, deterministically, with
          the query, the time range, the row count and the sha256 of the export beside it.
            archiver audit export --from 2026-10-01 --to 2026-11-01 --out outcomes.csv

Run 'archiver audit COMMAND -h' for a command's flags.
Exit status: 0 success, 1 failure or findings, 2 usage error.
`

// Main runs `archiver audit ARGS...` and returns the process's exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return ExitUsage
	}
	if run, ok := commands[args[0]]; ok {
		return run(ctx, args[1:], stdout, stderr)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return ExitOK
	}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(stderr, "archiver audit: unknown command %q (commands: %s)\n\n%s", args[0], strings.Join(names, ", "), usageText)
	return ExitUsage
}

// verifyCmd holds the flags of `archiver audit verify`.
type verifyCmd struct {
	fs        *flag.FlagSet
	db        db.Config
	store     objstore.Config
	layout    archive.Layout
	cluster   string
	from, to  int64
	publicKey string
	output    string
	workers   int
}

func newVerifyCmd(stderr io.Writer) *verifyCmd {
	c := &verifyCmd{fs: flag.NewFlagSet("archiver audit verify", flag.ContinueOnError)}
	fs := c.fs
	fs.SetOutput(stderr)
	c.db.BindFlags(fs)
	c.store.BindFlags(fs)
	c.layout.BindFlags(fs)
	fs.StringVar(&c.cluster, "cluster-name", "", "Cluster whose chain to verify (the archiver's --cluster-name).")
	fs.Int64Var(&c.from, "from", 1, "First sequence number to verify.")
	fs.Int64Var(&c.to, "to", 0, "Last sequence number to verify; 0 for the chain head (then also the head itself, entries beyond it and finalized jobs missing from the chain).")
	fs.StringVar(&c.publicKey, "audit-public-key", "", "File of the ed25519 public key that signs the chain head (PEM PKIX, 32 raw bytes or 64 hex digits); without it the signed digests' signatures are not checked, and the report says so.")
	fs.StringVar(&c.output, "output", "text", "Output format: text or json.")
	fs.IntVar(&c.workers, "workers", 8, "Entries verified in parallel.")
	return c
}

func (c *verifyCmd) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.fs.NArg() > 0 {
		add("unexpected arguments: %s", strings.Join(c.fs.Args(), " "))
	}
	if c.from < 1 {
		add("--from %d: sequence numbers start at 1", c.from)
	}
	if c.to < 0 || (c.to > 0 && c.to < c.from) {
		add("--to %d: 0 (the head) or at least --from (%d)", c.to, c.from)
	}
	if c.output != "text" && c.output != "json" {
		add("--output %q is not text or json", c.output)
	}
	if c.workers < 1 {
		add("--workers %d: at least 1", c.workers)
	}
	errs = append(errs, c.db.Validate(), c.store.Validate(), c.layout.Validate())
	return errors.Join(errs...)
}

func verifyMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newVerifyCmd(stderr)
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	var pub ed25519.PublicKey
	err := c.validate()
	if c.publicKey != "" {
		var kerr error
		pub, kerr = audit.LoadPublicKey(c.publicKey)
		err = errors.Join(err, kerr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "archiver audit verify: invalid arguments:\n%v\n", err)
		return ExitUsage
	}
	report, err := c.run(ctx, pub, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "archiver audit verify: %v\n", err)
		return ExitFailed
	}
	if c.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(report)
	} else {
		err = report.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "archiver audit verify: %v\n", err)
		return ExitFailed
	}
	if !report.OK() {
		return ExitFailed
	}
	return ExitOK
}

func (c *verifyCmd) run(ctx context.Context, pub ed25519.PublicKey, stderr io.Writer) (audit.Report, error) {
	opts := c.db.Options
	opts.MaxOpenConns = c.workers + 2
	records, err := db.Open(ctx, c.db.DSN, opts) // no migration: verifying never writes
	if err != nil {
		return audit.Report{}, err
	}
	defer records.Close()
	store, err := objstore.New(ctx, c.store)
	if err != nil {
		return audit.Report{}, err
	}
	return audit.Verify(ctx, records, store, audit.VerifyOptions{Cluster: c.cluster, From: c.from, To: c.to, Prefix: c.layout.Prefix,
		PublicKey: pub, Progress: stderr, Workers: c.workers})
}

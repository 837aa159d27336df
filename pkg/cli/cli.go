// Package cli is the archiver's command tree for auditors: `archiver logs` (ls, cat, verify: one
// job's archive) and `archiver audit` (verify: a range of the audit chain; export: the audit
// views). Every command that reads the database or the store takes the archiver's own flags for
// them (--db-*, --store-*), bound in one place (sources). The archiver binary hands Main its
// arguments; tests call Main directly; docs/reference/cli.md is generated from the tree
// (WriteReference, written to docs/reference/cli.md by make docs).
//
// Every command exits with the same codes:
//
//	0  success (verify: nothing found)
//	1  failure, or verify found at least one problem
//	2  usage error: the command line is wrong, names another store or prefix than the one the
//	   job was archived under, or asks the database for something it refuses as invalid
//
// The flag package serves the tree, as it serves the archiver, the agent and the webhook: the
// tree is two groups of a few commands, and each command's flag set is built by the same code
// that documents it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jobvault/jobvault/pkg/archive"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/verify"
)

// Exit codes of Main, the same for every command.
const (
	ExitOK = 0
	// ExitFailed: the command failed, or verify found at least one problem.
	ExitFailed = 1
	// ExitUsage: the command line is wrong, names another store or prefix than the records, or
	// asks the database for something it refuses as invalid.
	ExitUsage = 2
)

// exitStatus documents the exit codes, for the usage texts and the reference.
var exitStatus = []struct {
	Code    int
	Meaning string
}{
	{ExitOK, "success (verify: nothing found)"},
	{ExitFailed, "failure, or verify found at least one problem"},
	{ExitUsage, "usage error: the command line is wrong, names another store or prefix than the one the job was archived under, or asks the database for something it refuses as invalid"},
}

// errFound is what a verify command returns when its report has findings: exit 1, and nothing on
// stderr (the report said it all).
var errFound = errors.New("findings")

// Command is a node of the tree: a group of subcommands, or a command that runs.
type Command struct {
	Name string
	// Summary is one sentence, for the parent's list.
	Summary string
	// Description is the rest of the help: paragraphs separated by blank lines.
	Description string
	// Examples are command lines, one each.
	Examples []string
	// Reads says which of the shared flags the command takes.
	Reads Reads
	// Subcommands of a group.
	Subcommands []*Command
	// bind registers the command's own flags on fs and returns what runs it.
	bind func(fs *flag.FlagSet, src *sources) runner
}

// Reads names the shared flags a command takes.
type Reads int

const (
	// ReadsDB: the --db-* flags.
	ReadsDB Reads = 1 << iota
	// ReadsStore: the --store-* flags, --store-prefix included.
	ReadsStore
)

// runner is a command with its flags parsed.
type runner interface {
	// validate returns every problem with the command line.
	validate() []error
	// run does the work; errFound means a report with findings.
	run(ctx context.Context, stdout, stderr io.Writer) error
}

// Tree returns the command tree: the archiver with its groups `logs` and `audit`.
func Tree() *Command {
	return &Command{
		Name: "archiver",
		Summary: "Read what jobvault archived, for auditors: a job's logs, and the audit chain's evidence. " +
			"Every command only reads, and takes the archiver's --db-* and --store-* flags.",
		Subcommands: []*Command{logsCommand(), auditCommand()},
	}
}

// Main runs `archiver ARGS...`, ARGS starting with the group (logs or audit), and returns the
// process's exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := Tree()
	if len(args) == 0 {
		fmt.Fprint(stderr, root.usage(root.Name))
		return ExitUsage
	}
	return root.dispatch(ctx, root.Name, args, stdout, stderr)
}

// dispatch runs the subcommand args[0] of the group c, named path.
func (c *Command) dispatch(ctx context.Context, path string, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, c.usage(path))
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, c.usage(path))
		return ExitOK
	}
	sub := c.find(args[0])
	if sub == nil {
		fmt.Fprintf(stderr, "%s: unknown command %q (commands: %s)\n\n%s", path, args[0], strings.Join(c.names(), ", "), c.usage(path))
		return ExitUsage
	}
	if sub.bind == nil {
		return sub.dispatch(ctx, path+" "+sub.Name, args[1:], stdout, stderr)
	}
	return sub.runLeaf(ctx, path+" "+sub.Name, args[1:], stdout, stderr)
}

func (c *Command) find(name string) *Command {
	for _, s := range c.Subcommands {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (c *Command) names() []string {
	names := make([]string, len(c.Subcommands))
	for i, s := range c.Subcommands {
		names[i] = s.Name
	}
	return names
}

// flagSet builds the command's flags: the shared ones it reads, bound once by sources, and its
// own. The help it prints is the command's usage.
func (c *Command) flagSet(path string, stderr io.Writer) (*flag.FlagSet, *sources, runner) {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(stderr)
	src := &sources{}
	src.bind(fs, c.Reads)
	r := c.bind(fs, src)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), c.usage(path))
		fs.PrintDefaults()
	}
	return fs, src, r
}

// runLeaf parses args, validates them all at once and runs the command.
func (c *Command) runLeaf(ctx context.Context, path string, args []string, stdout, stderr io.Writer) int {
	fs, src, r := c.flagSet(path, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	fs.Visit(func(f *flag.Flag) { src.set[f.Name] = true })
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if err := errors.Join(append(errs, r.validate()...)...); err != nil {
		fmt.Fprintf(stderr, "%s: invalid arguments:\n%v\n", path, err)
		return ExitUsage
	}
	err := r.run(ctx, stdout, stderr)
	var located *verify.LocationError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errFound):
		return ExitFailed
	case errors.As(err, &located), errors.Is(err, db.ErrInvalid):
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return ExitFailed
	}
}

// sources are the database and the store a command reads, with the archiver's own flags: bound
// here once for every command, so that one set of flags (or a shell alias) serves them all.
type sources struct {
	db     db.Config
	store  objstore.Config
	prefix string
	reads  Reads
	// set holds the flags given on the command line.
	set map[string]bool
}

// envDefaults are the flags whose default the environment gives: the reference shows their
// usage, which names the variable, and not the value it has where the reference is generated.
var envDefaults = map[string]bool{"db-dsn": true}

// bind registers the shared flags the command reads.
func (s *sources) bind(fs *flag.FlagSet, r Reads) {
	s.reads, s.set = r, map[string]bool{}
	if r&ReadsDB != 0 {
		s.db.BindFlags(fs)
	}
	if r&ReadsStore != 0 {
		s.store.BindFlags(fs)
		fs.StringVar(&s.prefix, "store-prefix", "", "Key prefix the archiver writes under (its --store-prefix), without leading or trailing slash. "+
			"logs finds each archive where the database recorded it and needs it only to check that (a prefix that disagrees is a usage error, never a missing object); "+
			"audit verify reads the signed digests under it.")
	}
}

// validate reports the problems of the shared flags the command needs for this run (logs ls
// takes the store flags and ignores them; logs cat --key needs no database). The prefix, when
// bound, is always checked.
func (s *sources) validate(needDB, needStore bool) []error {
	var errs []error
	if needDB {
		errs = append(errs, s.db.Validate())
	}
	if needStore {
		errs = append(errs, s.store.Validate())
	}
	if s.reads&ReadsStore != 0 {
		errs = append(errs, archive.Layout{Prefix: s.prefix}.Validate())
	}
	return errs
}

// openDB connects with at most conns connections, without migrating: the commands never write,
// and may run as a read-only role.
func (s *sources) openDB(ctx context.Context, conns int) (*db.DB, error) {
	opts := s.db.Options
	opts.MaxOpenConns = conns
	return db.Open(ctx, s.db.DSN, opts)
}

func (s *sources) openStore(ctx context.Context) (objstore.Store, error) {
	return objstore.New(ctx, s.store)
}

// prefixGiven returns the --store-prefix given on the command line, nil when it was not.
func (s *sources) prefixGiven() *string {
	if !s.set["store-prefix"] {
		return nil
	}
	return &s.prefix
}

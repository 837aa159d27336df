package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/jobvault/jobvault/test/testbed"
)

// command is one command line's --help: its usage text and its flags.
type command struct {
	Name  string // e.g. "archiver audit verify"
	Usage string // the help text without the flags
	Flags []flagDoc
}

// flagDoc is one flag as the flag package prints it.
type flagDoc struct {
	Name, Type, Usage string
}

// programs are the binaries whose commands are documented, as packages of the module; each is
// named after its directory.
var programs = []string{"archiver", "archiver/apiserver", "webhook"}

// helpOf builds each program (into the testbed's cache of programs, where go build relinks it
// only when its code changed) and reads the --help of it and of every subcommand its usage lists,
// so a command added to a program is documented without a change here.
func helpOf() ([]command, error) {
	var cmds []command
	for _, pkg := range programs {
		bin, err := testbed.BuildProgram("./" + pkg)
		if err != nil {
			return nil, err
		}
		found, err := walkHelp(bin, filepath.Base(pkg), nil)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, found...)
	}
	return cmds, nil
}

// walkHelp reads the --help of the command args and of each subcommand its usage lists.
func walkHelp(bin, prog string, args []string) ([]command, error) {
	name := strings.Join(append([]string{prog}, args...), " ")
	text, err := runHelp(bin, args)
	if err != nil {
		return nil, fmt.Errorf("%s --help: %w", name, err)
	}
	cmd := parseHelp(name, text)
	cmds := []command{cmd}
	for _, sub := range subcommands(name, cmd.Usage) {
		found, err := walkHelp(bin, prog, append(append([]string{}, args...), sub))
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, found...)
	}
	return cmds, nil
}

// runHelp runs the binary with --help in an environment that holds nothing a default could be
// taken from ($JOBVAULT_DB_DSN, $POD_NAME, ...): the page must not depend on who generates it.
func runHelp(bin string, args []string) (string, error) {
	c := exec.Command(bin, append(args, "--help")...)
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	out, err := c.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return "", err
	}
	// --help exits 0 or 2 (the flag package's ErrHelp), by command.
	if len(out) == 0 {
		return "", fmt.Errorf("no output (%v)", err)
	}
	return strings.ReplaceAll(string(out), bin, filepath.Base(bin)), nil
}

var (
	flagLine  = regexp.MustCompile(`^  -([a-z0-9][a-z0-9-]*)(?: (\S+))?$`)
	flagUsage = regexp.MustCompile(`^    \t(.*)$`)
	// pflagLine is a flag as spf13/pflag prints it, its usage on the same line: apiserver's
	// flags come from k8s.io/apiserver's options, which are pflag's.
	pflagLine = regexp.MustCompile(`^\s+(?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)(?: ([a-zA-Z][\w.:]*))?\s{2,}(.*)$`)
	// pflagMore continues a pflag usage on the next line, indented to its column.
	pflagMore    = regexp.MustCompile(`^\s{20,}(\S.*)$`)
	progSubLine  = regexp.MustCompile(`^  (\S+) ([a-z][a-z0-9-]*) `)
	commandsLine = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)  `)
)

// parseHelp splits a --help text into its usage text and the flags the flag package printed.
func parseHelp(name, text string) command {
	cmd := command{Name: name}
	var usage []string
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			typ := m[2]
			if typ == "" {
				typ = "bool" // the flag package prints no type for a bool flag
			}
			cmd.Flags = append(cmd.Flags, flagDoc{Name: m[1], Type: typ})
			continue
		}
		if m := pflagLine.FindStringSubmatch(line); m != nil {
			typ := m[2]
			if typ == "" {
				typ = "bool"
			}
			cmd.Flags = append(cmd.Flags, flagDoc{Name: m[1], Type: typ, Usage: strings.TrimSpace(m[3])})
			continue
		}
		if m := pflagMore.FindStringSubmatch(line); m != nil && len(cmd.Flags) > 0 {
			f := &cmd.Flags[len(cmd.Flags)-1]
			f.Usage = strings.TrimSpace(f.Usage + " " + m[1])
			continue
		}
		if m := flagUsage.FindStringSubmatch(line); m != nil && len(cmd.Flags) > 0 {
			f := &cmd.Flags[len(cmd.Flags)-1]
			f.Usage = strings.TrimSpace(f.Usage + " " + m[1])
			continue
		}
		usage = append(usage, line)
	}
	cmd.Usage = strings.TrimSpace(strings.Join(usage, "\n"))
	// The header of the flags, which flags.md lists.
	cmd.Usage = strings.TrimSpace(strings.TrimSuffix(cmd.Usage, "Flags:"))
	return cmd
}

// subcommands are the commands a usage text lists: "  archiver logs COMMAND ..." lines of a
// program's usage, or the entries under "Commands:" of a command's.
func subcommands(name, usage string) []string {
	var subs []string
	inCommands := false
	for _, line := range strings.Split(usage, "\n") {
		if m := progSubLine.FindStringSubmatch(line); m != nil && m[1] == name {
			subs = append(subs, m[2])
			continue
		}
		switch {
		case strings.HasPrefix(line, "Commands:"):
			inCommands = true
		case inCommands && line == "":
			inCommands = false
		case inCommands:
			if m := commandsLine.FindStringSubmatch(line); m != nil {
				subs = append(subs, m[1])
			}
		}
	}
	return subs
}

// renderFlags is flags.md: a table of each command's flags.
func renderFlags(cmds []command) []byte {
	var b strings.Builder
	b.WriteString(generatedNote("each command's --help"))
	b.WriteString("# Flags\n\n")
	b.WriteString("Secrets never come from flags: the database password from `PGPASSWORD`/`PGPASSFILE`, S3 keys\n" +
		"from `--store-s3-*-key-file` or `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, GCS from application\n" +
		"default credentials (`STORAGE_EMULATOR_HOST` selects an emulator). Invalid configuration fails at\n" +
		"start-up with every problem listed. The `archiver logs` and `archiver audit` commands, with their\n" +
		"flags and exit codes, are in [cli.md](cli.md).\n\n" +
		"Environment: `JOBVAULT_DB_DSN` (the default of `--db-dsn`), `POD_NAME` (with `--shard-from-pod-name`),\n" +
		"`PGPASSWORD`, `PGPASSFILE`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `MINIO_ACCESS_KEY`,\n" +
		"`MINIO_SECRET_KEY`, `GOOGLE_APPLICATION_CREDENTIALS`, `STORAGE_EMULATOR_HOST`, `KUBECONFIG` (the webhook\n" +
		"only builds a client configuration from it; it never calls the API server).\n")
	for _, c := range cmds {
		if len(c.Flags) == 0 || inCLIReference(c.Name) {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n| flag | type | meaning |\n|---|---|---|\n", c.Name)
		for _, f := range c.Flags {
			fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, f.Type, cell(f.Usage))
		}
	}
	return []byte(b.String())
}

// inCLIReference reports whether the command is one of pkg/cli's tree, which cli.md documents
// whole from the tree itself.
func inCLIReference(name string) bool {
	return strings.HasPrefix(name, "archiver logs") || strings.HasPrefix(name, "archiver audit")
}

// cell makes text safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

package cli

//go:generate go run ./gendoc -out ../../docs/reference/cli.md

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// ReferencePath is where the reference lives, from the repository's root.
const ReferencePath = "docs/reference/cli.md"

// WriteReference writes the CLI reference in Markdown, from the tree itself: every command with
// its summary, description, examples and flags, and the exit codes. docs/reference/cli.md is
// this output (go run ./pkg/cli/gendoc); a test fails when it is stale.
func WriteReference(w io.Writer) error {
	root := Tree()
	var b strings.Builder
	b.WriteString("# CLI reference: `archiver logs` and `archiver audit`\n\n")
	b.WriteString("<!-- Generated from the command tree in pkg/cli by `go run ./pkg/cli/gendoc`: do not edit. " +
		"TestReferenceUpToDate fails when this file is stale. -->\n\n")
	b.WriteString(paragraphs(root.about()))
	b.WriteString("The archiver binary runs these commands when its first argument is `logs` or `audit`; " +
		"without one it runs the controller, and with `agent` the node agent (see the flag reference).\n\n")
	b.WriteString("## Exit status\n\nThe same for every command.\n\n| code | meaning |\n|---|---|\n")
	for _, e := range exitStatus {
		fmt.Fprintf(&b, "| %d | %s |\n", e.Code, cell(e.Meaning))
	}
	writeShared(&b)
	for _, group := range root.Subcommands {
		writeCommand(&b, group, root.Name+" "+group.Name, "## ")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCommand writes the section of the command named path, and of its subcommands one level
// down.
func writeCommand(b *strings.Builder, c *Command, path, heading string) {
	fmt.Fprintf(b, "\n%s%s\n\n", heading, path)
	b.WriteString(paragraphs(c.about()))
	if len(c.Examples) > 0 {
		b.WriteString("```sh\n" + strings.Join(c.Examples, "\n") + "\n```\n\n")
	}
	if c.bind == nil {
		b.WriteString("| command | what it does |\n|---|---|\n")
		for _, s := range c.Subcommands {
			fmt.Fprintf(b, "| [`%s %s`](#%s) | %s |\n", path, s.Name, anchor(path+" "+s.Name), cell(s.Summary))
		}
		for _, s := range c.Subcommands {
			writeCommand(b, s, path+" "+s.Name, "#"+heading)
		}
		return
	}
	fs, _, _ := c.flagSet(path, io.Discard)
	shared := sharedFlags(c.Reads)
	b.WriteString("| flag | meaning |\n|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		if shared.Lookup(f.Name) == nil {
			writeFlag(b, f)
		}
	})
	var also []string
	if c.Reads&ReadsDB != 0 {
		also = append(also, "the [database flags](#database-flags)")
	}
	if c.Reads&ReadsStore != 0 {
		also = append(also, "the [store flags](#store-flags)")
	}
	if len(also) > 0 {
		fmt.Fprintf(b, "\nAnd %s.\n", strings.Join(also, " and "))
	}
}

// writeShared writes the flags that sources binds for every command that reads the database or
// the store: the archiver's own.
func writeShared(b *strings.Builder) {
	b.WriteString("\n## Shared flags\n\nThe commands read the database and the store with the archiver's own flags, " +
		"so that one set of flags (or a shell alias) serves every command. Each command below says which it takes.\n")
	for _, s := range []struct {
		heading string
		reads   Reads
	}{{"Database flags", ReadsDB}, {"Store flags", ReadsStore}} {
		fmt.Fprintf(b, "\n### %s\n\n| flag | meaning |\n|---|---|\n", s.heading)
		sharedFlags(s.reads).VisitAll(func(f *flag.Flag) { writeFlag(b, f) })
	}
}

// sharedFlags are the shared flags a command that reads r takes.
func sharedFlags(r Reads) *flag.FlagSet {
	fs := flag.NewFlagSet("shared", flag.ContinueOnError)
	(&sources{}).bind(fs, r)
	return fs
}

func writeFlag(b *strings.Builder, f *flag.Flag) {
	fmt.Fprintf(b, "| `--%s` | %s%s |\n", f.Name, cell(f.Usage), defaultOf(f))
}

// defaultOf is " (default X)" as the flag package prints it, or "" for a zero default or one the
// environment gives.
func defaultOf(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	if envDefaults[f.Name] {
		return ""
	}
	if kind, _ := flag.UnquoteUsage(f); kind == "string" {
		return fmt.Sprintf(" (default %q)", f.DefValue)
	}
	return " (default " + f.DefValue + ")"
}

// paragraphs renders the text's paragraphs as Markdown: one line each, a blank line after.
func paragraphs(text string) string {
	var b strings.Builder
	for _, p := range strings.Split(text, "\n\n") {
		b.WriteString(strings.Join(strings.Fields(p), " ") + "\n\n")
	}
	return b.String()
}

// cell makes text safe in a table cell.
func cell(text string) string { return strings.ReplaceAll(text, "|", `\|`) }

// anchor is the heading's anchor as GitHub derives it.
func anchor(heading string) string { return strings.ReplaceAll(strings.ToLower(heading), " ", "-") }

// Package cli is the `archiver audit` command: evidence for auditors drawn from the database.
// The archiver binary hands it its arguments; tests call Main directly.
package cli

import (
	"context"
	"fmt"
	"io"
)

// Exit codes of Main.
const (
	ExitOK = 0
	// ExitFailed: the command failed.
	ExitFailed = 1
	// ExitUsage: the command line is wrong.
	ExitUsage = 2
)

const usageText = `Usage: archiver audit COMMAND [flags]

Evidence for auditors, read from the database.

Commands:
  export  Stream an audit view over a time range as CSV or JSON Lines, deterministically, with
          the query, the time range, the row count and the sha256 of the export beside it.
            archiver audit export --from 2026-10-01 --to 2026-11-01 --out outcomes.csv

Exit status: 0 success, 1 failure, 2 usage error.
Run 'archiver audit COMMAND -h' for a command's flags.
`

// Main runs `archiver audit ARGS...` and returns the process's exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
		return ExitOK
	case "export":
		return export(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "archiver audit: unknown command %q\n\n%s", args[0], usageText)
		return ExitUsage
	}
}

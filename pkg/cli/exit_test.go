package cli_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/cli"
)

// TestExitCodes: every command of the tree answers a bad command line, a help request and an
// unknown command with the same codes, before it reads anything.
func TestExitCodes(t *testing.T) {
	t.Setenv("JOBVAULT_DB_DSN", "")
	root := t.TempDir()
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: nil, code: cli.ExitUsage, stderr: "Usage: archiver COMMAND"},
		{args: []string{"logs"}, code: cli.ExitUsage, stderr: "Usage: archiver logs COMMAND"},
		{args: []string{"audit", "help"}, code: cli.ExitOK, stdout: "Run 'archiver audit COMMAND -h'"},
		{args: []string{"logs", "frobnicate"}, code: cli.ExitUsage, stderr: `archiver logs: unknown command "frobnicate" (commands: ls, cat, verify)`},
		{args: []string{"audit", "frobnicate"}, code: cli.ExitUsage, stderr: `archiver audit: unknown command "frobnicate" (commands: verify, export)`},
		{args: []string{"audit", "verify", "-h"}, code: cli.ExitOK, stderr: "\n  -workers int\n"},
		{args: []string{"logs", "verify", "--help"}, code: cli.ExitOK, stderr: "\n  -store-prefix string\n"},
		{args: []string{"audit", "verify", "--no-such-flag"}, code: cli.ExitUsage, stderr: "flag provided but not defined: -no-such-flag"},
		// Every problem at once, the shared flags' included.
		{args: []string{"audit", "verify", "--from", "0", "extra"}, code: cli.ExitUsage,
			stderr: "archiver audit verify: invalid arguments:\nunexpected arguments: extra\n--from 0: sequence numbers start at 1\n--db-dsn (or $JOBVAULT_DB_DSN) is required\n--store-fs-root is required"},
		{args: []string{"logs", "verify", "--job-uid", "u", "--output", "yaml", "--store-fs-root", root, "--store-prefix", "/x/"}, code: cli.ExitUsage,
			stderr: `--output "yaml" is not text or json`},
		{args: []string{"logs", "cat", "--key", "k", "--store-fs-root", root, "--job-uid", "u"}, code: cli.ExitUsage,
			stderr: "--key names the log by itself"},
		{args: []string{"audit", "export", "--from", "2026-10-02", "--to", "2026-10-01", "--db-dsn", "postgres://x"}, code: cli.ExitUsage,
			stderr: "--from 2026-10-02 is not before --to 2026-10-01"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Main(t.Context(), tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, want %d; stdout %q, want it to hold %q; stderr %q, want it to hold %q",
					code, tc.code, stdout.String(), tc.stdout, stderr.String(), tc.stderr)
			}
		})
	}
}

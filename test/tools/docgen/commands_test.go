package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docCommand is one command line of a ```sh block in the README or a page of docs/.
type docCommand struct {
	page, section, line string
}

// commandPages are the pages whose commands must run as printed: the README and docs/'s pages.
// The design records are history, and the reference pages are generated.
func commandPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(moduleRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(moduleRoot, "README.md")}, pages...)
}

// docCommands are the command lines of the ```sh blocks of a page, comments cut, each with the
// heading it is under.
func docCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(moduleRoot, path)
	var out []docCommand
	section, inSh, inOther := "", false, false
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			if inSh || inOther {
				inSh, inOther = false, false
			} else if line == "```sh" {
				inSh = true
			} else {
				inOther = true
			}
		case inSh:
			line, _, _ = strings.Cut(line, " #")
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, docCommand{page: filepath.ToSlash(rel), section: section, line: line})
			}
		case !inOther && strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	return out
}

// runAsPrinted are the sections whose commands a test runs as printed, every line of their first
// ```sh block, and that test.
var runAsPrinted = map[string]string{
	"docs/audit.md#Reading archives back": "TestDemo (test/demo), logs commands",
	"docs/audit.md#Export":                "TestDemo (test/demo), export commands",
}

// notYetRun are the sections whose commands no test runs as printed yet, and why: each is listed
// by this test's log, so that the gap stays in sight.
var notYetRun = map[string]string{
	"docs/audit.md#Verify the chain":             "needs a demo archiver that signs the chain head with a key whose pub.pem is at hand; `archiver audit verify` is proved by test/integration/audit and stack.Rig.AuditVerify",
	"docs/install-helm.md#Install":               helmNotRun,
	"docs/install-helm.md#Values":                helmNotRun,
	"docs/install-helm.md#Upgrade and uninstall": helmNotRun,
	"docs/audit.md#Policy":                       "annotates a namespace team-a as an operator named in jobvault-release-operators; the rule is proved by test/e2e/policy and TestArchiveNamespaceRetention",
}

// helmNotRun says why the Helm pages' commands are not run: the helm CLI is not on the testbed.
const helmNotRun = "the helm CLI is not on the testbed; the chart these values select is rendered with Helm's own packages, compared with config/ and dry-run against the API server by TestHelmChartMatchesConfig and TestHelmChartDryRun (test/e2e/deploy)"

var (
	makeLine      = regexp.MustCompile(`^make( [A-Z_]+=\S+)*((?: [a-z][a-z0-9-]*)+)( [A-Z_]+=\S+)*$`)
	kustomizeLine = regexp.MustCompile(`^kubectl apply --server-side -k (\S+)$`)
	makeTarget    = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
)

// TestDocCommands: every command in a ```sh block of the README or docs/ runs as printed. A make
// target must exist; a kustomization must exist (test/e2e/deploy renders and dry-runs each one
// under config/); any other command must be in a section whose commands a named test runs as
// printed. A command that none of these covers fails, until a test runs it.
func TestDocCommands(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(moduleRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	n := 0
	for _, page := range commandPages(t) {
		for _, c := range docCommands(t, page) {
			n++
			where := c.page + "#" + c.section
			if m := makeLine.FindStringSubmatch(c.line); m != nil {
				for _, target := range strings.Fields(m[2]) {
					if !targets[target] {
						t.Errorf("%s: %q: the Makefile has no target %s", where, c.line, target)
					}
				}
				continue
			}
			if m := kustomizeLine.FindStringSubmatch(c.line); m != nil {
				if !strings.HasPrefix(m[1], "config/") {
					t.Errorf("%s: %q: applies %s, outside config/ that test/e2e/deploy dry-runs", where, c.line, m[1])
				} else if _, err := os.Stat(filepath.Join(moduleRoot, m[1], "kustomization.yaml")); err != nil {
					t.Errorf("%s: %q: no kustomization: %v", where, c.line, err)
				}
				continue
			}
			if test, ok := runAsPrinted[where]; ok {
				t.Logf("%s: %q: run as printed by %s", where, c.line, test)
				continue
			}
			if why, ok := notYetRun[where]; ok {
				t.Logf("%s: %q: NOT run as printed: %s", where, c.line, why)
				continue
			}
			t.Errorf("%s: %q: no test runs it as printed; add one (and a rule here)", where, c.line)
		}
	}
	if n < 10 {
		t.Errorf("found %d commands in the README and docs/, want the quick start's, the install's and the audit examples", n)
	}
}

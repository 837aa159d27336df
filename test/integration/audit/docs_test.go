package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/cli"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/verify"
	"github.com/jobvault/jobvault/test/stack"
)

// TestAuditVerifyDocExamples runs the examples of docs/audit.md's "Verify the chain" as printed,
// through the command's Main, with the database from JOBVAULT_DB_DSN and the archiver's store
// flags, as the page says to pass them: the default cluster's whole chain with the public key
// (pub.pem in the working directory), part of cluster eu-1's chain, and the JSON report into a
// file (a trailing "> FILE", as the shell would). Each exits 0 on the untouched chains; the first
// exits 1, naming the manifest, once one of the default cluster's chain is replaced.
func TestAuditVerifyDocExamples(t *testing.T) {
	eu := stack.NewChainRig(t)
	eu.Build(t, 25, 4, 10)
	def := eu.ForCluster("", 25)
	def.Build(t, 6, 2, 3)
	t.Chdir(t.TempDir())
	stack.WritePublicKey(t, "pub.pem", def.Pub)
	t.Setenv("JOBVAULT_DB_DSN", eu.DSN)
	for _, e := range eu.StoreEnviron {
		k, v, _ := strings.Cut(e, "=")
		t.Setenv(k, v)
	}
	lines := stack.DocLines(stack.DocBlock(t, "docs/audit.md", "### Verify the chain", "sh"))
	if len(lines) != 3 {
		t.Fatalf("docs/audit.md's verify examples: %q, want the whole chain, a range and JSON", lines)
	}
	run := func(line string) (int, string) {
		args, redirect, _ := strings.Cut(line, " > ")
		fields := strings.Fields(args)
		if len(fields) < 3 || fields[0] != "archiver" || fields[1] != "audit" || fields[2] != "verify" {
			t.Fatalf("docs/audit.md example %q is not `archiver audit verify`", line)
		}
		var stdout, stderr bytes.Buffer
		code := cli.Main(t.Context(), append(fields[1:], eu.StoreArgs...), &stdout, &stderr)
		if redirect = strings.TrimSpace(redirect); redirect != "" {
			if err := os.WriteFile(redirect, stdout.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return code, stdout.String() + stderr.String()
	}
	for _, line := range lines {
		if code, out := run(line); code != cli.ExitOK {
			t.Errorf("docs/audit.md example %q: exit %d, want 0\n%s", line, code, out)
		}
	}
	var rep verify.ChainReport
	if raw, err := os.ReadFile("report.json"); err != nil || json.Unmarshal(raw, &rep) != nil || !rep.OK() || rep.Entries != 6 {
		t.Errorf("report.json of the default cluster's chain: %+v (%v), want 6 entries and no finding", rep, err)
	}

	// A manifest replaced behind the archiver's back: the first example now fails and names it.
	entry, _, err := def.Records.ChainEntry(t.Context(), def.Refs[2].UID)
	if err != nil {
		t.Fatal(err)
	}
	if err := def.Store.Put(t.Context(), entry.ManifestKey, strings.NewReader("{}"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, out := run(lines[0]); code != cli.ExitFailed || !strings.Contains(out, "manifest "+entry.ManifestKey) {
		t.Errorf("%q after the manifest of seq %d was replaced: exit %d, want 1 naming it\n%s", lines[0], entry.Seq, code, out)
	}
}

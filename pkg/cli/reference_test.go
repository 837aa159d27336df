package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/cli"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestReferenceUpToDate fails when docs/reference/cli.md is not what the command tree generates.
func TestReferenceUpToDate(t *testing.T) {
	var want bytes.Buffer
	if err := cli.WriteReference(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(testbed.ModuleRoot(), cli.ReferencePath))
	if err != nil {
		t.Fatalf("%v: generate it with go run ./pkg/cli/gendoc", err)
	}
	if diff := cmp.Diff(want.String(), string(got)); diff != "" {
		t.Errorf("%s is stale: run go run ./pkg/cli/gendoc (-generated +file):\n%s", cli.ReferencePath, diff)
	}
}

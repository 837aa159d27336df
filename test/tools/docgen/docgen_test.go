package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// moduleRoot is the module's root, from this package's directory.
const moduleRoot = "../../.."

// TestReferenceUpToDate fails when a page of docs/reference is not what the code generates:
// a flag, command, metric or name of the contract changed without `make docs`.
func TestReferenceUpToDate(t *testing.T) {
	pages, err := generate(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join(moduleRoot, referenceDir, name))
		if err != nil {
			t.Errorf("%s: %v (run make docs)", name, err)
			continue
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s/%s is stale; run make docs (-generated +file):\n%s", referenceDir, name, diff)
		}
	}
}

func TestParseHelp(t *testing.T) {
	text := "Usage: archiver audit COMMAND [flags]\n\nCommands:\n  verify  Recompute the chain.\n            archiver audit verify --from 1\n  export  Stream a view.\n\nRun 'archiver audit COMMAND -h'.\n" +
		"  -from int\n    \tFirst sequence number\n    \tto verify. (default 1)\n  -redact\n    \tRedact. (default true)\n"
	cmd := parseHelp("archiver audit", text)
	want := []flagDoc{{Name: "from", Type: "int", Usage: "First sequence number to verify. (default 1)"}, {Name: "redact", Type: "bool", Usage: "Redact. (default true)"}}
	if diff := cmp.Diff(want, cmd.Flags); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"verify", "export"}, subcommands(cmd.Name, cmd.Usage)); diff != "" {
		t.Errorf("subcommands (-want +got):\n%s", diff)
	}
	top := "Usage:\n  archiver [flags]              run the controller\n  archiver logs COMMAND ...     read archived logs back\n  archiver agent [flags]        the node agent\n\nFlags:"
	if diff := cmp.Diff([]string{"logs", "agent"}, subcommands("archiver", parseHelp("archiver", top).Usage)); diff != "" {
		t.Errorf("a program's subcommands (-want +got):\n%s", diff)
	}
}

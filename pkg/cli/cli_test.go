package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/pkg/cli"
	"github.com/jobvault/jobvault/pkg/inspect"
	"github.com/jobvault/jobvault/test/stack"
	"github.com/jobvault/jobvault/test/testbed"
)

// TestMain: the command runs against the testbed's real Postgres.
func TestMain(m *testing.M) { testbed.Main(m) }

// TestLogsCommand runs `archiver logs` through Main against an archive built as the archiver builds
// one (stack.NewJobArchive) in a real database and a filesystem store.
func TestLogsCommand(t *testing.T) {
	records, dsn := stack.OpenRecords(t)
	a, store := stack.NewJobArchive(t, records, true)
	// The DSN from the environment, as in the Deployment; no kubeconfig is needed.
	t.Setenv("JOBVAULT_DB_DSN", dsn)

	run := func(t *testing.T, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		var out, errOut bytes.Buffer
		code = cli.Main(t.Context(), append([]string{"logs"}, args...), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	if out, errOut, code := run(t, "help"); code != cli.ExitOK || !strings.Contains(out, "archiver logs") {
		t.Fatalf("help: exit %d, want 0 and the usage:\n%s%s", code, out, errOut)
	}
	storeFlags := []string{"--store-backend=fs", "--store-fs-root=" + a.Root}
	masterMain := a.Keys["train-master-0/"+a.Ref.UID+"-m0/main/current"]

	t.Run("ls", func(t *testing.T) {
		out, errOut, code := run(t, "ls", "--job-uid", a.Ref.UID)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		for _, k := range a.Keys {
			if !strings.Contains(out, k) {
				t.Errorf("ls output lacks %s:\n%s", k, out)
			}
		}
		byName, _, code := run(t, "ls", "--namespace", a.Ref.Namespace, "--job", a.Ref.Name, "--output", "json")
		var logs []inspect.Log
		if err := json.Unmarshal([]byte(byName), &logs); code != 0 || err != nil || len(logs) != 5 {
			t.Errorf("ls by name as JSON: exit %d, %v, %d logs:\n%s", code, err, len(logs), byName)
		}
	})

	t.Run("cat", func(t *testing.T) {
		out, errOut, code := run(t, append([]string{"cat", "--key", masterMain}, storeFlags...)...)
		if code != 0 || out != string(a.Content[masterMain]) {
			t.Errorf("cat --key: exit %d, %d bytes (want %d): %s", code, len(out), len(a.Content[masterMain]), errOut)
		}
		out, errOut, code = run(t, append([]string{"cat", "--job-uid", a.Ref.UID, "--pod", "train-master-0", "--container", "main"}, storeFlags...)...)
		if code != 0 || out != string(a.Content[masterMain]) {
			t.Errorf("cat --pod --container: exit %d, %d bytes (want %d): %s", code, len(out), len(a.Content[masterMain]), errOut)
		}
		_, errOut, code = run(t, append([]string{"cat", "--job-uid", a.Ref.UID, "--pod", a.WorkerUIDs[0], "--container", "main"}, storeFlags...)...)
		if code != 1 || !strings.Contains(errOut, "node node-1 is gone") {
			t.Errorf("cat of an unavailable log: exit %d, stderr %q; want 1 and the reason", code, errOut)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"verify"},
			{"verify", "--job-uid", a.Ref.UID, "--namespace", "x", "--job", "y"},
			{"cat", "--job-uid", a.Ref.UID},
			{"frobnicate"},
		} {
			if _, errOut, code := run(t, append(args, storeFlags...)...); code != 2 {
				t.Errorf("%q: exit %d, want 2 (usage): %s", args, code, errOut)
			}
		}
	})

	t.Run("verify", func(t *testing.T) {
		out, errOut, code := run(t, append([]string{"verify", "--job-uid", a.Ref.UID}, storeFlags...)...)
		if code != 0 || !strings.HasPrefix(out, "OK ") {
			t.Fatalf("verify of an intact archive: exit %d\n%s%s", code, out, errOut)
		}
		// Corrupt one object and delete another: both are printed, and the exit status is 1.
		stack.Put(t, store, masterMain, stack.GzipBytes(t, []byte("tampered\n")))
		workerMain := a.Keys["train-worker-0/"+a.WorkerUIDs[1]+"/main/current"]
		if err := os.Remove(filepath.Join(a.Root, filepath.FromSlash(workerMain))); err != nil {
			t.Fatal(err)
		}
		out, errOut, code = run(t, append([]string{"verify", "--namespace", a.Ref.Namespace, "--job", a.Ref.Name}, storeFlags...)...)
		if code != 1 {
			t.Errorf("verify of a damaged archive: exit %d, want 1\n%s%s", code, out, errOut)
		}
		for _, want := range []string{"MISMATCH", masterMain, "MISSING", workerMain, "FAILED: 2 problem(s)"} {
			if !strings.Contains(out, want) {
				t.Errorf("verify output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("the store or prefix the archive is not under", func(t *testing.T) {
		// With the prefix the job was archived under: as without one.
		if out, errOut, code := run(t, append([]string{"verify", "--job-uid", a.Ref.UID, "--store-prefix=" + stack.AuditLayout.Prefix}, storeFlags...)...); code == cli.ExitUsage {
			t.Errorf("verify with the recorded prefix: usage error\n%s%s", out, errOut)
		}
		location := store.URL(stack.Must(stack.AuditLayout.JobDir(a.Ref)) + "/")
		for _, tc := range []struct {
			flags []string
			says  string
		}{
			{append([]string{"--store-prefix=jobvault"}, storeFlags...), `--store-prefix is "jobvault"`},
			{[]string{"--store-backend=fs", "--store-fs-root=" + t.TempDir()}, "the --store-* flags name file://"},
		} {
			out, errOut, code := run(t, append([]string{"verify", "--job-uid", a.Ref.UID}, tc.flags...)...)
			if code != cli.ExitUsage || out != "" || !strings.Contains(errOut, "archived under "+location) || !strings.Contains(errOut, tc.says) {
				t.Errorf("verify %v: exit %d, stdout %q, stderr %q; want exit 2, nothing missing reported, and where the job was archived (%s): %s",
					tc.flags, code, out, errOut, location, tc.says)
			}
		}
	})
}

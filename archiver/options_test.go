package main

import (
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jobvault/jobvault/pkg/objstore"
)

// parseOptions parses args as the controller's command line and validates them as the pod
// podName, as parseFlags does with the real command line.
func parseOptions(t *testing.T, podName string, args ...string) (*options, error) {
	t.Helper()
	t.Setenv("JOBVAULT_DB_DSN", "") // the --db-dsn default; the tests give it or not
	o := newOptions()
	fs := flag.NewFlagSet("archiver", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return o, o.validate(fs, podName)
}

// valid are the flags a deployment must give: a database and a store.
func valid(t *testing.T) []string {
	return []string{"--db-dsn", "postgres://jobvault@db/jobvault", "--store-fs-root", t.TempDir()}
}

func TestOptionsDefaultsAreValid(t *testing.T) {
	o, err := parseOptions(t, "", valid(t)...)
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	if diff := cmp.Diff([]string{"kube-system", "jobvault-system"}, o.opts.ExcludeNamespaces); diff != "" {
		t.Errorf("excluded namespaces (-want +got):\n%s", diff)
	}
	if o.opts.Namespaces != nil || o.signingKey != nil || o.deprecated != nil || o.opts.Shard.Index != 0 {
		t.Errorf("defaults derived namespaces %v, a signing key %v, deprecated names %v, shard %d; want none",
			o.opts.Namespaces, o.signingKey != nil, o.deprecated, o.opts.Shard.Index)
	}
}

func TestOptionsReportEveryProblem(t *testing.T) {
	_, err := parseOptions(t, "",
		"--store-fs-root", t.TempDir(), // no --db-dsn
		"--store-lock-mode", objstore.LockGovernance, "--retention", "0",
		"--prune-period", "-1s", "--audit-digest-period", "0",
		"--audit-signing-key", filepath.Join(t.TempDir(), "absent.pem"),
		"--shard", "1", "--shard-from-pod-name", "--total-shards", "2",
		"--sweep-period", "1m", "--untracked-pod-sweep-period", "2m",
		"--log-deadline", "0")
	if err == nil {
		t.Fatal("validate succeeded, want errors")
	}
	for _, want := range []string{"--db-dsn", "--store-lock-mode governance needs a --retention", "--prune-period must not be negative",
		"--audit-digest-period must be positive", "--audit-signing-key", "--shard and --shard-from-pod-name are exclusive",
		"--sweep-period is the deprecated name of --untracked-pod-sweep-period", "log deadline must be positive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestOptionsDerived(t *testing.T) {
	o, err := parseOptions(t, "jobvault-archiver-2", append(valid(t),
		"--namespaces", " team-a, ,team-b", "--exclude-namespaces", "kube-system",
		"--shard-from-pod-name", "--total-shards", "3", "--resweep-period", "5m")...)
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	if diff := cmp.Diff([]string{"team-a", "team-b"}, o.opts.Namespaces); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"kube-system"}, o.opts.ExcludeNamespaces); diff != "" {
		t.Errorf("excluded namespaces (-want +got):\n%s", diff)
	}
	if o.opts.Shard.Index != 2 {
		t.Errorf("shard from pod jobvault-archiver-2 = %d, want 2", o.opts.Shard.Index)
	}
	if o.opts.MissedEventSweepPeriod != 5*time.Minute || !cmp.Equal(o.deprecated, []string{"resweep-period"}) {
		t.Errorf("--resweep-period 5m set the missed-event sweep period to %s, deprecated names %v; want 5m0s, [resweep-period]",
			o.opts.MissedEventSweepPeriod, o.deprecated)
	}

	if _, err := parseOptions(t, "archiver", append(valid(t), "--shard-from-pod-name")...); err == nil ||
		!strings.Contains(err.Error(), "--shard-from-pod-name") {
		t.Errorf("a pod name without an ordinal: validate = %v, want an error naming --shard-from-pod-name", err)
	}
}

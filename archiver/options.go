package main

import (
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/jobvault/jobvault/pkg/archiver"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/shard"
)

// options are the archiver controller's flags, as given and as derived from them (validate).
type options struct {
	opts                    archiver.Options
	store                   objstore.Config
	db                      db.Config
	excludeNamespaces       string
	namespaces              string
	leaderElect             bool
	leaderElectionNamespace string
	shardFromPodName        bool
	metricsAddr, probeAddr  string
	pprofAddr               string
	zap                     zap.Options
	auditSigningKey         string
	auditDigestPeriod       time.Duration
	prunePeriod             time.Duration
	signingKey              ed25519.PrivateKey
	// deprecated are the old names of renamed flags that were given (renamedFlags).
	deprecated []string
}

// renamedFlags maps the old name of each renamed flag to its name. The old names still work,
// deprecated: the two repair loops' periods were --sweep-period and --resweep-period, names that
// did not say how the loops differ.
var renamedFlags = map[string]string{
	"sweep-period":   "untracked-pod-sweep-period",
	"resweep-period": "missed-event-sweep-period",
}

// aliasFlag is the old name of a renamed flag: it sets the same value.
type aliasFlag struct{ flag.Value }

// String is the flag's value; "" for the zero aliasFlag the flag package makes for --help.
func (a *aliasFlag) String() string {
	if a == nil || a.Value == nil {
		return ""
	}
	return a.Value.String()
}

// renamed records which deprecated names were given, and refuses a setting given under both
// its names.
func (f *options) renamed(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var errs []error
	for _, old := range slices.Sorted(maps.Keys(renamedFlags)) {
		if !given[old] {
			continue
		}
		f.deprecated = append(f.deprecated, old)
		if given[renamedFlags[old]] {
			errs = append(errs, fmt.Errorf("--%s is the deprecated name of --%s: give one", old, renamedFlags[old]))
		}
	}
	return errors.Join(errs...)
}

// parseFlags reads the command line's flags and checks them (validate); $POD_NAME names the pod
// for --shard-from-pod-name.
func parseFlags() (*options, error) {
	f := newOptions()
	f.bindFlags(flag.CommandLine)
	flag.Parse()
	if err := f.validate(flag.CommandLine, os.Getenv("POD_NAME")); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return f, nil
}

// newOptions are the options before any flag is given: the defaults.
func newOptions() *options { return &options{opts: archiver.DefaultOptions()} }

// bindFlags defines the controller's flags on fs, and its usage text (which lists the
// subcommands too).
func (f *options) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.opts.Cluster, "cluster-name", "", "Name of this cluster in the records, for databases shared by several clusters.")
	f.db.BindFlags(fs)
	fs.BoolVar(&f.db.Migrate, "db-migrate", true, "Apply pending database migrations at start-up (under an advisory lock, safe with several replicas).")
	fs.DurationVar(&f.opts.LogDeadline, "log-deadline", f.opts.LogDeadline, "How long a container log that cannot be read is retried, from the container's end or the pod's deletion, before it is recorded as unavailable and the finalizer released.")
	fs.DurationVar(&f.opts.LogOpenTimeout, "log-open-timeout", f.opts.LogOpenTimeout, "Timeout of opening a container's log stream (a lost node's kubelet does not answer).")
	fs.DurationVar(&f.opts.TerminationMargin, "termination-margin", f.opts.TerminationMargin, "How long past the end of a deleted pod's grace period its containers may still show running before their logs are read as they are.")
	fs.DurationVar(&f.opts.NodeLostAfter, "node-lost-after", f.opts.NodeLostAfter, "How long a node may be NotReady before the pods being deleted on it are released at once, with what was captured and the rest recorded as a 'node lost' gap (a deleted Node counts at once).")
	fs.IntVar(&f.opts.MaxStreams, "max-streams", f.opts.MaxStreams, "Container logs followed at once, shared fairly between namespaces (one below its share takes a slot from one above); the others wait for a slot, those of ended containers first (and may lose output the node rotates or collects meanwhile).")
	fs.Int64Var(&f.opts.Capture.SegmentBytes, "capture-segment-bytes", f.opts.Capture.SegmentBytes, "A followed log is stored in segments of about this many uncompressed bytes (each capture holds one in memory, compressed).")
	fs.Int64Var(&f.opts.CaptureMemory, "capture-memory-bytes", 0, "Bytes that the segments of all followed logs may hold in memory together; a capture that would go past it stores its segment early instead (each still holds about 128 KiB whatever the bound, idle (TestFollowedCaptureHoldsLittle): its last lines' fingerprints, a stream reader, two goroutines). 0: a quarter of GOMEMLIMIT (which the archiver sets to 90% of its container's memory limit), or 512 MiB without one.")
	fs.DurationVar(&f.opts.Capture.SegmentAge, "capture-segment-age", f.opts.Capture.SegmentAge, "A followed log's segment is stored once this old, however small: a crash costs at most a re-read of that much output.")
	fs.Int64Var(&f.opts.Capture.NodeLogMaxSize, "node-log-max-size", f.opts.Capture.NodeLogMaxSize, "The nodes' log rotation size in bytes (the kubelet's containerLogMaxSize). A container log read only after its end (never followed) that comes within a tenth of it, and a follow stream that lagged and jumped by half of it or more at the container's peak rate (the node's reader skips rotated files a stream is more than one behind), are recorded with a 'possibly rotated before read' gap; a capture that began after its run could have written this much is recorded with a 'start unknown' one. 0 turns these checks off.")
	fs.DurationVar(&f.opts.Retention, "retention", f.opts.Retention, "How long final objects (log objects, job.json, manifest.json) are retained from their pod's or job's finalization: their retain-until date, which --store-lock-mode enforces in the store and after which the pruner deletes the job (--prune-period). A namespace's jobvault.io/retention annotation (a Go duration, e.g. 2160h) overrides it for its jobs and pods. 0: no retain-until date (no lock, never pruned).")
	fs.BoolVar(&f.opts.Redact, "redact", f.opts.Redact, "Record jobs with every string outside the allow-list of fields audits need (docs/audit.md, Secrets stay out) replaced by a marker, redacted:sha256: and the value's sha256 in hex; --redact=false records them as they are.")
	fs.DurationVar(&f.opts.UntrackedPodSweepPeriod, "untracked-pod-sweep-period", f.opts.UntrackedPodSweepPeriod, "How often the leader lists the API server for pods that hold the pod finalizer outside the archiver's view (their volcano.sh/job-name label removed: untracked) and lets them go, the first time at its start.")
	fs.DurationVar(&f.opts.MissedEventSweepPeriod, "missed-event-sweep-period", f.opts.MissedEventSweepPeriod, "How often the leader compares its cache with the records for tracked jobs and pods whose record is behind (a finished pod still held, a running container not captured, a job changed since it was recorded, a finalizable job still held) and enqueues them: repairs events that were missed.")
	for _, old := range slices.Sorted(maps.Keys(renamedFlags)) {
		fs.Var(&aliasFlag{fs.Lookup(renamedFlags[old]).Value}, old, fmt.Sprintf("Deprecated: the old name of --%s.", renamedFlags[old]))
	}
	fs.IntVar(&f.opts.PodWorkers, "pod-workers", f.opts.PodWorkers, "Pods reconciled in parallel (captures run beside them, bounded by --max-streams).")
	fs.IntVar(&f.opts.JobWorkers, "job-workers", f.opts.JobWorkers, "Jobs reconciled in parallel.")
	fs.StringVar(&f.excludeNamespaces, "exclude-namespaces", strings.Join(f.opts.ExcludeNamespaces, ","), "Comma-separated namespaces whose VcJobs are never tracked (keep in line with the webhook's namespaceSelector).")
	fs.StringVar(&f.namespaces, "namespaces", "", "Comma-separated namespaces to archive; empty for all. Lets several archivers shard a cluster by namespace.")
	fs.IntVar(&f.opts.Shard.Index, "shard", f.opts.Shard.Index, "This replica's shard, from 0 to --total-shards - 1: it archives the VcJobs whose UID hashes to it (FNV-1a modulo --total-shards) and their pods.")
	fs.IntVar(&f.opts.Shard.Total, "total-shards", f.opts.Shard.Total, "How many shards the VcJobs are split into, one archiver (with its own leader election) each. Every replica must be given the same count.")
	fs.BoolVar(&f.shardFromPodName, "shard-from-pod-name", false, "Take --shard from the ordinal at the end of $POD_NAME (a StatefulSet pod, jobvault-archiver-2 is shard 2) instead of the flag.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Elect a leader so only one replica archives at a time.")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease (default: the pod's namespace).")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&f.auditSigningKey, "audit-signing-key", "", "File of the ed25519 private key that signs the audit chain head every --audit-digest-period (PEM PKCS #8, a raw 32-byte seed or its 64 hex digits; mount it from a Secret). Empty: nothing is signed.")
	fs.DurationVar(&f.prunePeriod, "prune-period", time.Hour, "How often the leader deletes the rows and objects of finalized jobs past their retain-until date (--retention) that no legal hold (jobvault.io/legal-hold on the job or its namespace) holds; the deletion is recorded for audit verify. 0: never prune.")
	fs.DurationVar(&f.auditDigestPeriod, "audit-digest-period", audit.DefaultDigestPeriod, "How often the audit chain head is signed (with --audit-signing-key).")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "0", "Address of Go's /debug/pprof endpoints, for profiling; 0 disables them. They expose the process's memory: bind to localhost.")
	f.store.BindFlags(fs)
	f.opts.Layout.BindFlags(fs)
	f.zap.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage:\n  archiver [flags]              run the controller\n  archiver logs COMMAND ...     read archived logs back (ls, cat, verify); archiver logs --help\n  archiver audit COMMAND ...    the audit chain (verify, export); archiver audit --help\n  archiver agent [flags]        the node agent: capture logs from the node's files; archiver agent --help\n\nFlags:\n")
		fs.PrintDefaults()
	}
}

// validate derives what the flags fs parsed imply (the namespace lists, the shard of the pod
// podName, the signing key read from its file) and reports every problem at once.
func (f *options) validate(fs *flag.FlagSet, podName string) error {
	renamedErr := f.renamed(fs)
	f.opts.ExcludeNamespaces = splitList(f.excludeNamespaces)
	f.opts.Namespaces = splitList(f.namespaces)
	var auditErrs []error
	if f.store.LockMode != "" && f.opts.Retention <= 0 {
		auditErrs = append(auditErrs, fmt.Errorf("--store-lock-mode %s needs a --retention to lock objects for", f.store.LockMode))
	}
	var shardErr error
	if f.shardFromPodName {
		shardSet := false
		fs.Visit(func(fl *flag.Flag) { shardSet = shardSet || fl.Name == "shard" })
		if shardSet {
			shardErr = errors.New("--shard and --shard-from-pod-name are exclusive")
		} else if f.opts.Shard.Index, shardErr = shard.FromPodName(podName); shardErr != nil {
			shardErr = fmt.Errorf("--shard-from-pod-name: %w", shardErr)
		}
	}
	if f.prunePeriod < 0 {
		auditErrs = append(auditErrs, fmt.Errorf("--prune-period must not be negative, got %s", f.prunePeriod))
	}
	if f.auditDigestPeriod <= 0 {
		auditErrs = append(auditErrs, fmt.Errorf("--audit-digest-period must be positive, got %s", f.auditDigestPeriod))
	}
	if f.auditSigningKey != "" {
		var err error
		if f.signingKey, err = audit.LoadSigningKey(f.auditSigningKey); err != nil {
			auditErrs = append(auditErrs, fmt.Errorf("--audit-signing-key: %w", err))
		}
	}
	return errors.Join(f.db.Validate(), f.opts.Validate(), f.store.Validate(), shardErr, renamedErr, errors.Join(auditErrs...))
}

// splitList is the non-empty items of a comma-separated list, trimmed.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

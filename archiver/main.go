// Command archiver is jobvault's controller: it records every VcJob and phase transition in
// Postgres, streams the logs of every pod of a tracked job to object storage, and only then
// releases the finalizers the webhook stamped. `archiver --help` lists every flag.
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/jobvault/jobvault/pkg/archiver"
	"github.com/jobvault/jobvault/pkg/audit"
	"github.com/jobvault/jobvault/pkg/cli"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
	"github.com/jobvault/jobvault/pkg/periodic"
	"github.com/jobvault/jobvault/pkg/retention"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "logs" || os.Args[1] == "audit") {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := agentMain(ctx, os.Args[2:], os.Stderr)
		stop()
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "archiver agent:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "archiver:", err)
		os.Exit(1)
	}
}

// addPeriodic runs task every period on the leader, logged under name.
func addPeriodic(mgr ctrl.Manager, name string, period time.Duration, task periodic.Task) error {
	r, err := periodic.New(name, period, task, clock.RealClock{}, ctrl.Log.WithName(name))
	if err != nil {
		return err
	}
	return mgr.Add(r)
}

func run() error {
	f, err := parseFlags()
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	ctx := ctrl.SetupSignalHandler()
	log := ctrl.Log.WithName("setup")
	for _, old := range f.deprecated {
		log.Info("Deprecated flag name; it still works", "flag", "--"+old, "use", "--"+renamedFlags[old])
	}
	// A soft memory limit at 90% of the container's (its cgroup's), unless GOMEMLIMIT is set: the
	// cache is most of the heap, and the garbage collector alone lets the heap grow to twice what
	// is live before it collects (100,000 pods: 1.3 GiB of RSS for about 550 MiB live).
	if limit, err := memlimit.Set(memlimit.WithLogger(slog.New(logr.ToSlogHandler(log)))); err != nil {
		log.Info("No memory limit found for GOMEMLIMIT; the garbage collector paces by GOGC alone", "reason", err.Error())
	} else if limit != math.MaxInt64 {
		log.Info("Soft memory limit", "GOMEMLIMIT", limit)
	}
	if f.opts.CaptureMemory == 0 {
		f.opts.CaptureMemory = archiver.DefaultCaptureMemory(debug.SetMemoryLimit(-1))
	}
	log.Info("Memory of the captures' segments bounded", "bytes", f.opts.CaptureMemory)

	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), batchv1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	records, err := db.Open(ctx, f.db.DSN, f.db.Options)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer records.Close()
	store, err := objstore.New(ctx, f.store)
	if err != nil {
		return err
	}
	clientset, err := archiver.LogsClientset(cfg)
	if err != nil {
		return err
	}
	cacheOpts, err := archiver.CacheOptions(f.opts)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		MapperProvider:          archiver.NewRESTMapper,
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:  f.probeAddr,
		PprofBindAddress:        f.pprofAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        archiver.LeaderElectionID(f.opts.Shard),
		LeaderElectionNamespace: f.leaderElectionNamespace,
		// The leader steps down on SIGTERM at once, so a new replica takes over without waiting
		// for the lease to expire; nothing is in flight that a restart cannot redo.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	deps := archiver.Deps{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Records: records, Store: store, Logs: archiver.KubeLogs{Clientset: clientset, OpenTimeout: f.opts.LogOpenTimeout},
		Recorder: mgr.GetEventRecorderFor("jobvault-archiver"), Clock: clock.RealClock{}}
	if err := archiver.SetupWithManager(ctx, mgr, deps, f.opts); err != nil {
		return fmt.Errorf("set up controllers: %w", err)
	}
	// The chain's signer and the pruner work on the whole cluster's chain: with several shards,
	// only shard 0's leader runs them (one digest chain, one deletion of each job).
	clusterWide := f.opts.Shard.Index == 0
	if f.signingKey == nil {
		log.Info("Audit chain heads are NOT signed: no --audit-signing-key")
	} else if !clusterWide {
		log.Info("Audit chain heads are signed by shard 0")
	} else if err := addPeriodic(mgr, "audit-signer", f.auditDigestPeriod, archiver.SignerTask(&audit.Signer{Records: records, Store: store,
		Prefix: f.opts.Layout.Prefix, Cluster: f.opts.Cluster, Key: f.signingKey, Clock: clock.RealClock{}})); err != nil {
		return err
	} else {
		log.Info("Signing the audit chain head", "period", f.auditDigestPeriod, "keyID", audit.KeyID(f.signingKey.Public().(ed25519.PublicKey)))
	}
	if f.prunePeriod == 0 {
		log.Info("Retention pruning is off: --prune-period 0")
	} else if !clusterWide {
		log.Info("Retention pruning is done by shard 0")
	} else if err := addPeriodic(mgr, "pruner", f.prunePeriod, (&retention.Pruner{Records: records, Store: store, Cluster: f.opts.Cluster,
		Policy: fmt.Sprintf("--retention %s", f.opts.Retention), NamespaceHolds: retention.NamespaceHolds(mgr.GetAPIReader()),
		Clock: clock.RealClock{}}).Pass); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	// Readiness ("backends", the prober's last ping of both backends) comes with SetupWithManager.
	log.Info("Starting archiver", "store", store.URL(f.opts.Layout.Prefix), "logDeadline", f.opts.LogDeadline, "shard", f.opts.Shard.String())
	return mgr.Start(ctx)
}

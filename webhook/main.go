// Command webhook is jobvault's mutating admission webhook (pkg/admission): it stamps the tracking
// finalizers, labels and submitter annotations on new VcJobs and their pods. Stateless; run any
// number of replicas. It reads nothing from the API server: the manager runs no controllers and
// no leader election, and its cache stays empty.
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/jobvault/jobvault/pkg/admission"
)

func main() {
	var opts options
	opts.bindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	admission.TuneGC()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	if err := opts.validate(); err != nil {
		log.Error(err, "Invalid configuration")
		os.Exit(2)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Failed to load a client configuration")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: opts.metricsAddress},
		HealthProbeBindAddress: opts.healthProbeAddress,
		WebhookServer:          webhook.NewServer(admission.ServerOptions(opts.bindAddress, opts.port, opts.certDir, opts.enableHTTP2)),
	})
	if err != nil {
		log.Error(err, "Failed to create the manager")
		os.Exit(1)
	}
	if err := admission.SetupWithManager(mgr); err != nil {
		log.Error(err, "Failed to set up the admission webhooks")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		log.Error(err, "Failed to add the liveness check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		log.Error(err, "Failed to add the readiness check")
		os.Exit(1)
	}
	log.Info("Starting webhook", "port", opts.port, "certDir", opts.certDir, "http2", opts.enableHTTP2)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Webhook stopped")
		os.Exit(1)
	}
}

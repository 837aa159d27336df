package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/jobvault/jobvault/pkg/agent"
	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/objstore"
)

// agentMain runs the node agent (`archiver agent`, issue 25): it only wires flags, the database,
// the store and the endpoints; the agent lives in pkg/agent.
func agentMain(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := agent.DefaultConfig()
	var (
		dbc                    db.Config
		store                  objstore.Config
		metricsAddr, probeAddr string
		zo                     zap.Options
	)
	fs := flag.NewFlagSet("archiver agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.BindFlags(fs)
	dbc.BindFlags(fs)
	store.BindFlags(fs)
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz endpoint (healthy while heartbeats are recorded).")
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := errors.Join(cfg.Validate(), dbc.Validate(), store.Validate()); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	log := zap.New(zap.UseFlagOptions(&zo)).WithName("agent")
	ctrl.SetLogger(log)
	records, err := db.Open(ctx, dbc.DSN, dbc.Options) // never migrates: the agent's role cannot; the archiver does
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer records.Close()
	st, err := objstore.New(ctx, store)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := errors.Join(agent.Register(reg), reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return err
	}
	a, err := agent.New(cfg, records, st, log)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	serve(ctx, probeAddr, mux)
	if metricsAddr != "0" {
		m := http.NewServeMux()
		m.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		serve(ctx, metricsAddr, m)
	}
	log.Info("Starting agent", "node", cfg.Node, "podLogsDir", cfg.PodLogsDir, "maxHeldBytes", cfg.MaxHeldBytes, "store", st.URL(cfg.Layout.Prefix))
	return a.Run(ctx)
}

// serve serves h on addr until ctx ends.
func serve(ctx context.Context, addr string, h http.Handler) {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ctrl.Log.Error(err, "Serving failed", "addr", addr)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
}

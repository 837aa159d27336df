// Command apiserver serves jobvault's archive as the aggregated API archive.jobvault.io/v1alpha1,
// read-only (pkg/apiserver). It is a program of its own, not a mode of the archiver: linking
// k8s.io/apiserver into the archiver would install component-base's work queue metrics provider
// before controller-runtime's (the first one set wins), and the archiver's work queue series
// would leave its /metrics.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jobvault/jobvault/pkg/apiserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := apiserver.Main(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

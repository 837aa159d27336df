// Command kubectl-jobvault is the kubectl plugin that reads jobvault's archive with the user's own
// credentials: copy it onto the PATH and run `kubectl jobvault get jobs`, `describe job NAME`,
// `logs job/NAME` or `verify job NAME`. The program is package plugin.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/jobvault/jobvault/pkg/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := plugin.Main(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}

// Command pause is the sandbox ("pause") program of the testbed's real node: it holds a pod's
// namespaces and does nothing until it is told to stop (SIGTERM or SIGINT), as the Kubernetes
// pause image does. The testbed builds it static and packs it into an image (testbed.RealNode).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/jobvault/jobvault/certs/certgen"
)

// options are the webhook binary's flags.
type options struct {
	certDir            string
	port               int
	bindAddress        string
	metricsAddress     string
	healthProbeAddress string
	enableHTTP2        bool
}

func (o *options) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.certDir, "cert-dir", "/etc/jobvault/webhook/certs",
		"directory holding tls.crt and tls.key; rotated files are picked up without restart")
	fs.IntVar(&o.port, "port", 9443, "port the webhook server listens on")
	fs.StringVar(&o.bindAddress, "bind-address", "0.0.0.0", "IP address the webhook server listens on")
	fs.StringVar(&o.metricsAddress, "metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint, or "0" to disable it`)
	fs.StringVar(&o.healthProbeAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz, or "0" to disable them`)
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false,
		"also serve admission over HTTP/2; off by default (HTTP/2 stream-reset attacks, and HTTP/1.1 is faster here)")
}

// validate reports every problem at once.
func (o *options) validate() error {
	var problems []error
	if o.port < 1 || o.port > 65535 {
		problems = append(problems, fmt.Errorf("--port %d is not a TCP port (1-65535)", o.port))
	}
	if net.ParseIP(o.bindAddress) == nil {
		problems = append(problems, fmt.Errorf("--bind-address %q is not an IP address", o.bindAddress))
	}
	if err := validAddress(o.metricsAddress); err != nil {
		problems = append(problems, fmt.Errorf("--metrics-bind-address: %w", err))
	}
	if err := validAddress(o.healthProbeAddress); err != nil {
		problems = append(problems, fmt.Errorf("--health-probe-bind-address: %w", err))
	}
	// The server loads the pair only when it starts; fail here, with the rest, instead.
	if _, err := tls.LoadX509KeyPair(filepath.Join(o.certDir, certgen.CertFile), filepath.Join(o.certDir, certgen.KeyFile)); err != nil {
		problems = append(problems, fmt.Errorf("--cert-dir %s: load %s and %s: %w", o.certDir, certgen.CertFile, certgen.KeyFile, err))
	}
	return errors.Join(problems...)
}

// validAddress accepts "0" (disabled) or host:port.
func validAddress(addr string) error {
	if addr == "0" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		return fmt.Errorf("host %q in %q is not an IP address", host, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q in %q is not a TCP port", port, addr)
	}
	return nil
}

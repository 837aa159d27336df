// Command certs mints a CA and a serving certificate for the jobvault webhook (see config/README.md):
//
//	go run ./certs --out /tmp/jobvault-certs
//
// It writes tls.crt, tls.key and ca.crt into --out and prints the base64 caBundle on stdout (and
// nothing else there, so CA_BUNDLE=$(go run ./certs --out DIR) works).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/jobvault/jobvault/certs/certgen"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "certs:", err)
		}
		os.Exit(2)
	}
}

// listFlag collects a repeatable, comma-separable flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		out, caDir, bundleEnv string
		o                     certgen.Options
		dnsNames, ips         listFlag
	)
	fs.StringVar(&out, "out", "", "directory to write tls.crt, tls.key and ca.crt into (required; keep it out of the repository)")
	fs.StringVar(&o.Service, "service", certgen.DefaultService, "name of the webhook's Service")
	fs.StringVar(&o.Namespace, "namespace", certgen.DefaultNamespace, "namespace of the webhook's Service")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", certgen.DefaultClusterDomain, "cluster DNS domain")
	fs.Var(&dnsNames, "dns-name", "extra DNS name for the serving certificate (repeatable, comma-separated)")
	fs.Var(&ips, "ip", "extra IP address for the serving certificate, besides 127.0.0.1 and ::1 (repeatable, comma-separated)")
	fs.DurationVar(&o.Validity, "validity", certgen.DefaultValidity, "validity of the serving certificate")
	fs.StringVar(&caDir, "ca-dir", "", "keep the CA here (ca.crt, ca.key): reused if present, created otherwise, so that later runs rotate the serving certificate without changing the caBundle; default: a new CA each run, its key discarded")
	fs.StringVar(&bundleEnv, "ca-bundle-env", "", "also write caBundle=<base64> to this file, e.g. config/selfsigned/ca-bundle.env")
	if err := fs.Parse(args); err != nil {
		return err
	}

	var problems []error
	if out == "" {
		problems = append(problems, errors.New("--out is required"))
	}
	if fs.NArg() > 0 {
		problems = append(problems, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if o.Validity <= 0 {
		problems = append(problems, fmt.Errorf("--validity must be positive, got %v", o.Validity))
	}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			problems = append(problems, fmt.Errorf("--ip %q is not an IP address", s))
			continue
		}
		o.IPs = append(o.IPs, ip)
	}
	o.DNSNames = dnsNames
	if err := errors.Join(problems...); err != nil {
		return err
	}

	ca, err := loadOrCreateCA(caDir, stderr)
	if err != nil {
		return err
	}
	bundle, err := ca.Issue(o)
	if err != nil {
		return err
	}
	if err := bundle.WriteDir(out); err != nil {
		return err
	}
	if bundleEnv != "" {
		if err := certgen.WriteFileAtomic(bundleEnv, []byte("caBundle="+bundle.CABundle()+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "wrote %s, %s and %s to %s for %s; IPs %v\n",
		certgen.CertFile, certgen.KeyFile, certgen.CACertFile, out, strings.Join(o.AllDNSNames(), ", "), o.AllIPs())
	fmt.Fprintln(stdout, bundle.CABundle())
	return nil
}

// loadOrCreateCA reuses the CA kept in dir, or creates one and keeps it there. With no dir, the CA
// lives only for this run.
func loadOrCreateCA(dir string, log io.Writer) (*certgen.CA, error) {
	if dir == "" {
		return certgen.NewCA("jobvault-webhook-ca", 0)
	}
	certPath, keyPath := filepath.Join(dir, certgen.CACertFile), filepath.Join(dir, certgen.CAKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		fmt.Fprintf(log, "reusing the CA in %s\n", dir)
		return certgen.LoadCA(certPEM, keyPEM)
	case !errors.Is(certErr, os.ErrNotExist) || !errors.Is(keyErr, os.ErrNotExist):
		return nil, fmt.Errorf("--ca-dir %s must hold both %s and %s or neither: %w", dir, certgen.CACertFile, certgen.CAKeyFile, errors.Join(certErr, keyErr))
	}
	ca, err := certgen.NewCA("jobvault-webhook-ca", 0)
	if err != nil {
		return nil, err
	}
	keyPEM, err = ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA directory: %w", err)
	}
	if err := certgen.WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := certgen.WriteFileAtomic(certPath, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "created a CA in %s\n", dir)
	return ca, nil
}

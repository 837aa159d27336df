package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/jobvault/jobvault/certs/certgen"
)

func TestOptionsDefaultsAreValidWithCerts(t *testing.T) {
	dir := t.TempDir()
	b, err := certgen.Generate(certgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	var o options
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	o.bindFlags(fs)
	if err := fs.Parse([]string{"--cert-dir", dir, "--bind-address", "127.0.0.1", "--metrics-bind-address", "0"}); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
}

func TestOptionsReportEveryProblem(t *testing.T) {
	o := options{
		certDir:            t.TempDir(),
		port:               70000,
		bindAddress:        "example.com",
		metricsAddress:     "8080",
		healthProbeAddress: "1.2.3.4:x",
	}
	err := o.validate()
	if err == nil {
		t.Fatal("validate succeeded, want errors")
	}
	for _, want := range []string{"--port 70000", `--bind-address "example.com"`, "--metrics-bind-address", "--health-probe-bind-address", "--cert-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

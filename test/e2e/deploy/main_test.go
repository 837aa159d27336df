// Package deploy checks the deployment manifests under config/ (the kustomizations, and the Helm
// chart against them) against the real API server and the real binaries, and config/monitoring
// against Prometheus' parsers, the running programs' /metrics and the runbook in
// docs/operations.md. (The flag reference, docs/reference/flags.md, is generated from the
// binaries' --help and checked by test/tools/docgen.)
package deploy

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

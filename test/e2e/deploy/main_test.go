// Package deploy checks the deployment manifests under config/ (the kustomizations, and the Helm
// chart against them) against the real API server and the real binaries, and the README's flag
// reference against the binaries' --help.
package deploy

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

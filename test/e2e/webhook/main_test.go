// Package webhook tests the admission webhook against the real kube-apiserver and the real Volcano
// controller and admission webhook: each test serves its own webhook in this process
// (stack.ServeWebhook), registered for its namespaces only, and one test talks to its HTTPS
// endpoint directly.
package webhook

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

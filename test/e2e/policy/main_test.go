// Package policy tests config/policy's ValidatingAdmissionPolicies on the real API server: every
// rule as the users it concerns (a tenant, an operator named in the parameters by user or group, an
// unnamed cluster admin, the archiver's service account), each refusal with its message and
// nothing changed, each allowed action passing; a tenant's kubectl habits; and the archiver,
// Volcano and the garbage collector archiving, releasing and deleting jobs under them.
package policy

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

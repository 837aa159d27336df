// Package export tests `archiver audit export` (pkg/audit/export, pkg/cli) against a real
// Postgres holding records written through the archiver's own write path (pkg/db).
package export

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

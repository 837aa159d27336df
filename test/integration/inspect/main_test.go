// Package inspect tests the auditors' inspection tool (pkg/inspect and `archiver logs`) against a
// real Postgres and the filesystem store.
package inspect

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// Package archiver tests the archiver binary end to end, behind the webhook binary: jobs that
// complete, fail and restart, are deleted while running, have several containers, outlive a
// stopped archiver or have unreadable logs, on every store backend (stack.Rig).
//
// Each test has a rig of its own (namespace, archiver, database, store), so most run in parallel.
// Those that take the webhook down, count what the whole cluster serves, set the environment or
// load the machine on purpose do not, and say so.
package archiver

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

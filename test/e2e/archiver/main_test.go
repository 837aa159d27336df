// Package archiver tests the archiver binary end to end, behind the webhook binary: jobs that
// complete, fail and restart, are deleted while running, have several containers, outlive a
// stopped archiver or have unreadable logs, on every store backend (stack.Rig).
package archiver

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

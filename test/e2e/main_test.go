// Package e2e holds the end-to-end suites: every test runs against the real parts of the testbed
// (kube-apiserver, Volcano, KWOK, Postgres, MinIO, the GCS emulator).
package e2e

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

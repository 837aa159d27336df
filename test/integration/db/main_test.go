// Package db is the database conformance suite: every case runs against a real Postgres from the
// testbed, each in a fresh empty database.
package db

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

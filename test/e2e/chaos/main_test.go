// Package chaos tests the archiver through failures: MinIO and then Postgres down while jobs
// finish, and the archiver killed in the middle of an upload.
package chaos

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

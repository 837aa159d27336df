// Package chaos tests the archiver through failures: kube-apiserver restarted while the archiver
// follows 100 containers (first, so that the tests after it run on the restarted cluster), MinIO
// and then Postgres down while jobs finish, and the archiver killed in the middle of an upload.
package chaos

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

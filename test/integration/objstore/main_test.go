// Package objstore runs the object store conformance suite against real services: MinIO for the
// S3 backend and fake-gcs-server for the GCS backend.
package objstore

import (
	"testing"

	"github.com/jobvault/jobvault/test/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

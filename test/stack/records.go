package stack

import (
	"testing"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/test/testbed"
)

// OpenRecords opens a migrated database on a fresh Postgres database, closed at the end of the
// test, and returns it with the database's DSN.
func OpenRecords(t testing.TB) (*db.DB, string) {
	t.Helper()
	dsn := testbed.Postgres(t)
	records, err := db.Open(t.Context(), dsn, db.Options{Migrate: true})
	if err != nil {
		t.Fatalf("open database: %v", err)
	}
	t.Cleanup(func() { records.Close() })
	return records, dsn
}

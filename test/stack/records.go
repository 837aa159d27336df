package stack

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

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

// LoginRole creates a login role that is a member of group (the migrations' group roles cannot
// log in) on dsn's server, and returns dsn as that role, so that a test runs with exactly the
// rights the group gives. The role is dropped when the test ends.
func LoginRole(t TB, dsn, group string) string {
	t.Helper()
	admin, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("jv_test_%s_%d", strings.TrimPrefix(group, "jobvault_"), rand.Uint32())
	if _, err := admin.ExecContext(t.Context(), fmt.Sprintf(`CREATE ROLE %s LOGIN IN ROLE %s`, name, group)); err != nil {
		t.Fatalf("create login role in %s: %v", group, err)
	}
	t.Cleanup(func() { // registered before the role's users start, so run after they stopped
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		admin, err := sql.Open("postgres", dsn)
		if err == nil {
			defer admin.Close()
			_, err = admin.ExecContext(ctx, `DROP ROLE IF EXISTS `+name)
		}
		if err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	return u.String()
}

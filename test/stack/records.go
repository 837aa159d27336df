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
	"github.com/jobvault/jobvault/pkg/record"
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

// LoginRole creates a login role that is a member of groups (the migrations' group roles cannot
// log in) on dsn's server, and returns dsn as that role, so that a test runs with exactly the
// rights the groups give. The role is dropped when the test ends.
func LoginRole(t TB, dsn string, groups ...string) string {
	t.Helper()
	admin, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	short := make([]string, len(groups))
	for i, g := range groups {
		short[i] = strings.TrimPrefix(g, "jobvault_")
	}
	name := fmt.Sprintf("jv_test_%s_%d", strings.Join(short, "_"), rand.Uint32())
	if _, err := admin.ExecContext(t.Context(), fmt.Sprintf(`CREATE ROLE %s LOGIN IN ROLE %s`, name, strings.Join(groups, ", "))); err != nil {
		t.Fatalf("create login role in %s: %v", strings.Join(groups, ", "), err)
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
	return DSNAs(t, dsn, name)
}

// DSNAs is dsn with user as its user.
func DSNAs(t TB, dsn, user string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}

// PutSealedGap records g in dsn's database under a job already sealed, where db.PutGap refuses
// it (db.ErrFinalized): the row an archiver that recorded the gap before the seal would have
// left, for tests that need a gap in an archive the real archiver built. The chain's record
// digest of the job does not cover it.
func PutSealedGap(t TB, dsn string, g record.Gap) {
	t.Helper()
	admin, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var before any
	if !g.Before.IsZero() {
		before = g.Before.UnixNano()
	}
	if _, err := admin.ExecContext(t.Context(), `INSERT INTO log_gaps (pod_uid, container, run, after_ns, before_ns, reason, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, g.PodUID, g.Container, g.Run, g.After.UnixNano(), before, string(g.Reason), g.Detail); err != nil {
		t.Fatalf("record the gap of %s/%s/%d: %v", g.PodUID, g.Container, g.Run, err)
	}
}

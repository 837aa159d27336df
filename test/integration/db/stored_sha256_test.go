package db

import (
	"errors"
	"strings"
	"testing"

	"github.com/lib/pq/pqerror"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/pkg/record"
)

// TestDBStoredSHA256IsOnlyEverDropped: a stored log's stored_sha256 (migration 0017: what the
// store checked at a whole write, which the seal trusts instead of reading the object back) is
// recorded with the write that makes the log stored, and never set or changed afterwards: a
// second stored write that does not bring the same one drops it, so that the seal reads back.
// The database refuses anything else, for the table's owner too; its down migration keeps every
// row.
func TestDBStoredSHA256IsOnlyEverDropped(t *testing.T) {
	ctx := t.Context()
	records, c := openAt(t, db.LatestVersion)
	mustUpsertJob(t, records, newJob("u1").build())
	if err := records.UpsertPod(ctx, newPod("p1", "u1")); err != nil {
		t.Fatal(err)
	}
	checked, other := strings.Repeat("01", 32), strings.Repeat("02", 32)
	withHash := func(container, hash string) record.LogObject {
		l := storedLog("p1", container, record.InstanceCurrent)
		l.StoredSHA256 = hash
		return l
	}
	stored := func(container string) string {
		t.Helper()
		logs, err := records.PodLogObjects(ctx, "p1")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range logs {
			if l.Container == container {
				return l.StoredSHA256
			}
		}
		t.Fatalf("no log row of container %s", container)
		return ""
	}
	for _, tc := range []struct {
		name   string
		writes []record.LogObject
		want   string
	}{
		{"recorded, and again", []record.LogObject{withHash("a", checked), withHash("a", checked)}, checked},
		{"then written without it", []record.LogObject{withHash("b", checked), withHash("b", "")}, ""},
		{"then with another", []record.LogObject{withHash("c", checked), withHash("c", other)}, ""},
		{"not set later", []record.LogObject{withHash("d", ""), withHash("d", checked)}, ""},
		{"dropped for good", []record.LogObject{withHash("e", checked), withHash("e", other), withHash("e", checked)}, ""},
		{"an unavailable log stored", []record.LogObject{{PodUID: "p1", Container: "f", ContainerType: record.ContainerRegular,
			Instance: record.InstanceCurrent, State: record.LogUnavailable, Reason: "node gone"}, withHash("f", checked)}, checked},
	} {
		for _, l := range tc.writes {
			if err := records.PutLogObject(ctx, l); err != nil {
				t.Fatalf("%s: PutLogObject(%s with %q): %v", tc.name, l, l.StoredSHA256, err)
			}
		}
		if got := stored(tc.writes[0].Container); got != tc.want {
			t.Errorf("%s: stored sha256 %q, want %q", tc.name, got, tc.want)
		}
	}

	for name, l := range map[string]record.LogObject{
		"not hex": withHash("g", "XYZ"),
		"not stored": {PodUID: "p1", Container: "g", ContainerType: record.ContainerRegular, Instance: record.InstanceCurrent,
			State: record.LogUnavailable, Reason: "node gone", StoredSHA256: checked},
	} {
		if err := records.PutLogObject(ctx, l); !errors.Is(err, db.ErrInvalid) {
			t.Errorf("PutLogObject with a stored sha256 %s = %v, want ErrInvalid", name, err)
		}
	}

	// The owner of the table (not the archiver's role) may drop it, and nothing else.
	for _, stmt := range []string{
		`UPDATE log_objects SET stored_sha256 = repeat('03', 32) WHERE container = 'a'`,
		`UPDATE log_objects SET stored_sha256 = repeat('03', 32) WHERE container = 'b'`,
		`UPDATE log_objects SET stored_sha256 = NULL, bytes = 1 WHERE container = 'a'`,
	} {
		if _, err := c.ExecContext(ctx, stmt); sqlState(err) != pqerror.RestrictViolation {
			t.Errorf("%s = %v, want SQLSTATE 23001", stmt, err)
		}
	}
	if _, err := c.ExecContext(ctx, `UPDATE log_objects SET stored_sha256 = NULL WHERE container = 'a'`); err != nil {
		t.Errorf("dropping a stored sha256: %v", err)
	}
	if got := stored("a"); got != "" {
		t.Errorf("stored sha256 after it was dropped: %q", got)
	}

	n := queryInt(t, c, `SELECT count(*) FROM log_objects`)
	if err := records.MigrateTo(ctx, versionBefore(t, 17)); err != nil {
		t.Fatalf("down migration: %v", err)
	}
	if got := queryInt(t, c, `SELECT count(*) FROM log_objects`); got != n {
		t.Errorf("log rows after the down migration = %d, want %d", got, n)
	}
	if err := records.MigrateTo(ctx, db.LatestVersion); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
	if got := stored("f"); got != "" {
		t.Errorf("stored sha256 after down and up = %q, want none (no write stands behind it any more)", got)
	}
}

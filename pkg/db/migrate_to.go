package db

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
)

// Versions lists the versions of the embedded migrations, in order.
func Versions() []uint {
	entries, _ := fs.ReadDir(migrations, "migrations") // embedded: cannot fail
	var vs []uint
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".up.sql")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(strings.SplitN(name, "_", 2)[0], 10, 32)
		if err == nil {
			vs = append(vs, uint(v))
		}
	}
	slices.Sort(vs)
	return vs
}

// MigrateTo moves the schema up or down to version, one of Versions. For benchmarks that compare
// a schema with and without a migration on the same data, and for operators who must step back;
// the archiver itself only calls Migrate. Serialised like Migrate.
func (d *DB) MigrateTo(ctx context.Context, version uint) error {
	if !slices.Contains(Versions(), version) {
		return fmt.Errorf("migrate database to %d: %w: no such migration (have %v)", version, ErrInvalid, Versions())
	}
	err := d.withMigrator(ctx, func(m *migrate.Migrate) error {
		if err := m.Migrate(version); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate database to %d: %w", version, err)
	}
	return nil
}

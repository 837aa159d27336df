// Package db is jobvault's Postgres store: the record of every tracked VcJob, its phase transitions,
// its pods and their archived logs, and the audit views over them. All SQL in jobvault lives here,
// behind database/sql with lib/pq; the schema is a set of versioned migrations embedded in the
// binary and applied with golang-migrate.
//
// Every write is an idempotent upsert keyed by Kubernetes UIDs, so the archiver can repeat any step
// after a crash: a repeated write changes nothing (not even updated_at), "unknown" inputs (empty
// strings, nil pointers) never erase recorded values, and states only move forward (a job's archive
// state never returns to pending, a stored log is never downgraded, a terminal phase is never
// replaced by a stale non-terminal one).
//
// Phase transitions, stored log rows and log gaps are append-only (migration 0005's triggers):
// changing or deleting one fails with ErrAppendOnly, except deletion by the retention pruner in a
// transaction that ran SET LOCAL jobvault.prune = 'on'.
//
// Errors are translated by SQLSTATE: errors.Is(err, ErrNotFound), ErrInvalid, ErrConflict,
// ErrAppendOnly.
//
// Every new phase transition is announced with NOTIFY on NotifyChannel; see Notification.
package db

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratedb "github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/lib/pq"
)

// LatestVersion is the schema version the embedded migrations lead to. A test keeps it in step
// with the migrations directory.
const LatestVersion = 19

// migrationsTable records the applied schema version (golang-migrate's bookkeeping).
const migrationsTable = "schema_migrations"

//go:embed migrations/*.sql
var migrations embed.FS

// Defaults of Options.
const (
	DefaultMaxOpenConns    = 10
	DefaultConnMaxLifetime = 30 * time.Minute
	DefaultConnMaxIdleTime = 5 * time.Minute
	DefaultTimeout         = 30 * time.Second
)

// Options tune Open. The zero value is usable: no migration, default pool sizes.
type Options struct {
	// Migrate applies pending migrations before Open returns. Safe with any number of replicas
	// starting at once: migrations run under a Postgres advisory lock.
	Migrate bool
	// MaxOpenConns bounds the connection pool; DefaultMaxOpenConns if 0.
	MaxOpenConns int
	// MaxIdleConns bounds idle connections; MaxOpenConns if 0.
	MaxIdleConns int
	// ConnMaxLifetime recycles connections (for failovers and load balancers);
	// DefaultConnMaxLifetime if 0.
	ConnMaxLifetime time.Duration
	// ConnMaxIdleTime closes connections idle this long; DefaultConnMaxIdleTime if 0.
	ConnMaxIdleTime time.Duration
	// Timeout bounds each call of a DB method (each query, or each page of a listing), on top of
	// the caller's context, so that a hung server fails the call instead of blocking its caller
	// forever; DefaultTimeout if 0. Migrations are not bounded by it: see Migrate.
	Timeout time.Duration
	// Unprepared runs every statement unprepared (design record 0013), for a pooler in
	// transaction mode that does not keep prepared statements (PgBouncer before 1.21): its server
	// connections would mix up the statement names of several clients.
	Unprepared bool
}

// Config is how a program reaches the database: the DSN and the pool options. BindFlags fills it
// from the command line.
type Config struct {
	// DSN is a postgres:// URL or key=value string, without password: lib/pq reads PGPASSWORD or
	// PGPASSFILE.
	DSN string
	Options
}

// BindFlags registers --db-dsn (default $JOBVAULT_DB_DSN), --db-timeout, --db-max-open-conns and
// --db-unprepared on fs, writing into c.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DSN, "db-dsn", os.Getenv("JOBVAULT_DB_DSN"), "Postgres connection string (URL or key=value), without password: lib/pq reads PGPASSWORD or PGPASSFILE. Default $JOBVAULT_DB_DSN.")
	fs.DurationVar(&c.Timeout, "db-timeout", DefaultTimeout, "Timeout of each database call.")
	fs.IntVar(&c.MaxOpenConns, "db-max-open-conns", DefaultMaxOpenConns, "Database connections open at most (reconciles and captures share them; each replica holds up to this many of the server's max_connections).")
	fs.BoolVar(&c.Unprepared, "db-unprepared", false, "Run every database statement unprepared, for a pooler in transaction mode that does not keep prepared statements (PgBouncer before 1.21).")
}

// Validate reports every problem of the configuration at once, naming the flag to fix.
func (c Config) Validate() error {
	var errs []error
	if c.DSN == "" {
		errs = append(errs, errors.New("--db-dsn (or $JOBVAULT_DB_DSN) is required"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("--db-timeout %s is negative", c.Timeout))
	}
	if c.MaxOpenConns < 1 {
		errs = append(errs, fmt.Errorf("--db-max-open-conns must be at least 1, got %d", c.MaxOpenConns))
	}
	return errors.Join(errs...)
}

func (o Options) validate() error {
	var problems []string
	if o.MaxOpenConns < 0 {
		problems = append(problems, fmt.Sprintf("MaxOpenConns %d is negative", o.MaxOpenConns))
	}
	if o.MaxIdleConns < 0 {
		problems = append(problems, fmt.Sprintf("MaxIdleConns %d is negative", o.MaxIdleConns))
	}
	if o.ConnMaxLifetime < 0 {
		problems = append(problems, fmt.Sprintf("ConnMaxLifetime %s is negative", o.ConnMaxLifetime))
	}
	if o.ConnMaxIdleTime < 0 {
		problems = append(problems, fmt.Sprintf("ConnMaxIdleTime %s is negative", o.ConnMaxIdleTime))
	}
	if o.Timeout < 0 {
		problems = append(problems, fmt.Sprintf("Timeout %s is negative", o.Timeout))
	}
	return invalid("options", problems)
}

// DB is a handle on the jobvault database. It is safe for concurrent use.
type DB struct {
	db      *sql.DB
	timeout time.Duration
	stmts   stmtCache
}

// Open connects to the database at dsn (a postgres:// URL or key=value string, as lib/pq accepts),
// checks that it answers and, with opts.Migrate, brings the schema to LatestVersion.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	if dsn == "" {
		return nil, fmt.Errorf("open database: %w: empty DSN", ErrInvalid)
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	// The DSN is never part of an error: it may hold a password.
	cfg, err := pq.NewConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: parse DSN: %w", err)
	}
	// One round trip per statement: lib/pq otherwise prepares every statement with arguments in
	// a round trip of its own before it runs it (Parse+Describe, then Bind+Execute), which
	// doubled the archiver's database round trips. Arguments still go as text, but []byte, which
	// goes as binary: only bytea columns take []byte here (JSON goes as text, see rawJSON).
	cfg.BinaryParameters = true
	connector, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB := sql.OpenDB(connector)
	maxOpen := cmp.Or(opts.MaxOpenConns, DefaultMaxOpenConns)
	sqlDB.SetMaxOpenConns(maxOpen)
	sqlDB.SetMaxIdleConns(cmp.Or(opts.MaxIdleConns, maxOpen))
	sqlDB.SetConnMaxLifetime(cmp.Or(opts.ConnMaxLifetime, DefaultConnMaxLifetime))
	sqlDB.SetConnMaxIdleTime(cmp.Or(opts.ConnMaxIdleTime, DefaultConnMaxIdleTime))

	d := &DB{db: sqlDB, timeout: cmp.Or(opts.Timeout, DefaultTimeout), stmts: stmtCache{off: opts.Unprepared}}
	if err := d.Ping(ctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	if opts.Migrate {
		if err := d.Migrate(ctx); err != nil {
			sqlDB.Close()
			return nil, fmt.Errorf("open database: %w", err)
		}
	}
	return d, nil
}

// bound limits one call to the configured timeout.
func (d *DB) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

// Ping checks that the database answers; for readiness probes.
func (d *DB) Ping(ctx context.Context) error {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if err := d.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// Close closes every connection of the pool.
func (d *DB) Close() error {
	d.stmts.close()
	return d.db.Close()
}

// Migrate applies every embedded migration not applied yet; a no-op when the schema is at
// LatestVersion. Concurrent callers, in this process or in other replicas, are serialised by a
// Postgres advisory lock, so exactly one of them applies each migration.
//
// ctx bounds the wait for the lock, not the migration itself: once it runs, a migration is not
// interrupted (cancelling it would leave the version dirty, see ErrDirty).
func (d *DB) Migrate(ctx context.Context) error {
	err := d.withMigrator(ctx, func(m *migrate.Migrate) error {
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate database up: %w", err)
	}
	return nil
}

// MigrateDown reverts every migration, dropping all jobvault tables, views and functions with
// their data. For tests and for operators uninstalling jobvault; the archiver never calls it.
func (d *DB) MigrateDown(ctx context.Context) error {
	err := d.withMigrator(ctx, func(m *migrate.Migrate) error {
		if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate database down: %w", err)
	}
	return nil
}

// Version returns the schema version applied (0 when none) and whether a migration failed part-way
// (dirty).
func (d *DB) Version(ctx context.Context) (version uint, dirty bool, err error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	err = d.withMigrator(ctx, func(m *migrate.Migrate) error {
		var err error
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			version, dirty, err = 0, false, nil
		}
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	return version, dirty, nil
}

// withMigrator runs fn with a golang-migrate instance over the embedded migrations, on one
// connection that holds the migration advisory lock for the whole call.
//
// golang-migrate's postgres driver takes the same lock itself, but waits for it without a context
// (forever, or until its own 15s lock timeout gives up). Taking it first here, with ctx, makes the
// wait cancellable and unbounded by that timeout; advisory locks are re-entrant per session, so the
// driver's own Lock and Unlock on this connection then nest inside ours.
func (d *DB) withMigrator(ctx context.Context, fn func(*migrate.Migrate) error) (err error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close() // Also closed by the driver below; a second Close is harmless.

	var dbName, schema sql.NullString
	if err := conn.QueryRowContext(ctx, `SELECT current_database(), current_schema()`).Scan(&dbName, &schema); err != nil {
		return err
	}
	if !schema.Valid {
		return errors.New("no current schema: check search_path")
	}
	// The same key golang-migrate's postgres driver derives for this database and table.
	lockID, err := migratedb.GenerateAdvisoryLockId(dbName.String, schema.String, migrationsTable)
	if err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1::bigint)`, lockID); err != nil {
		// A cancellation can race the grant: drop the session rather than pool a connection that
		// might hold the lock.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return fmt.Errorf("acquire migration lock: %w", err)
	}
	var m *migrate.Migrate
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.ExecContext(unlockCtx, `SELECT pg_advisory_unlock($1::bigint)`, lockID); uerr != nil {
			// Never return a connection that may still hold the lock to the pool: closing the
			// session releases it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			err = errors.Join(err, fmt.Errorf("release migration lock: %w", uerr))
		}
		// After the unlock: the driver's Close closes conn. Its errors are only about returning
		// conn to the pool; the work is done or failed already.
		if m != nil {
			_, _ = m.Close()
		}
	}()

	drv, err := postgres.WithConnection(ctx, conn, &postgres.Config{
		DatabaseName:    dbName.String,
		SchemaName:      schema.String,
		MigrationsTable: migrationsTable,
	})
	if err != nil {
		return err
	}
	src, err := iofs.New(migrations, "migrations")
	if err != nil {
		return err
	}
	m, err = migrate.NewWithInstance("iofs", src, dbName.String, drv)
	if err != nil {
		return err
	}

	if err := fn(m); err != nil {
		var dirty migrate.ErrDirty
		if errors.As(err, &dirty) {
			return fmt.Errorf("%w at version %d: a migration failed part-way; it ran in one transaction, so the schema is still at the version before it: check, then force the version and retry", ErrDirty, dirty.Version)
		}
		return err
	}
	return nil
}

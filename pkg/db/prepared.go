package db

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"

	"github.com/jobvault/jobvault/pkg/metrics"
)

// The statements the archiver runs for every pod and job (a run's start, its log's record, a
// job's row, its seal's read and its finalization) run as prepared statements (issue 28):
// Postgres parses, analyzes and rewrites an unnamed statement at every call, and in the drain of
// a burst that was about a third of its CPU (perf: the parser, the copies of parse trees, the
// catalog lookups), more than executing those statements. A prepared statement is parsed once per
// connection; database/sql prepares it on each connection the first time it runs there.
//
// What a deployment must allow: named prepared statements on each session. A pooler in front of
// Postgres in transaction mode must keep them (PgBouncer 1.21 and later: max_prepared_statements),
// or the archiver runs with --db-unprepared (Options.Unprepared).

// maxPrepared bounds the statements kept prepared. Only fixed statements are run prepared, fewer
// than this; the bound is there so that a statement built from a caller's input by mistake could
// not grow every connection's server-side memory without end: past it, statements run unprepared.
const maxPrepared = 64

// stmtCache is the DB's prepared statements, by query text.
type stmtCache struct {
	mu    sync.Mutex
	stmts map[string]*sql.Stmt // nil while being prepared
	// off: statements run unprepared from now on (the DB is closed, or its server cannot keep
	// them: see unusable).
	off bool
}

// stmt is query prepared on db, or nil while it is not yet (the caller runs it unprepared). A
// statement is prepared in the background, on a connection of its own: a caller inside a
// transaction holds its connection, and preparing while every connection of the pool is held so
// would wait for itself.
func (c *stmtCache) stmt(db *sql.DB, query string, timeout time.Duration) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[query]; ok || c.off || len(c.stmts) >= maxPrepared {
		return st
	}
	if c.stmts == nil {
		c.stmts = map[string]*sql.Stmt{}
	}
	c.stmts[query] = nil
	go c.prepare(db, query, timeout)
	return nil
}

// prepare prepares query on db and keeps it; on failure it forgets it, to be tried again by a
// later call (a fault of the statement itself shows in the calls that run it unprepared).
func (c *stmtCache) prepare(db *sql.DB, query string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := db.PrepareContext(ctx, query)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		delete(c.stmts, query)
	case c.off:
		st.Close()
	default:
		c.stmts[query] = st
		metrics.StatementsPreparedTotal.Inc()
	}
}

// close closes every prepared statement; later statements run unprepared. It closes them
// unlocked: a statement's Close waits for its calls on the pool, which may wait for a connection
// that a transaction holds while it asks the cache for its next statement.
func (c *stmtCache) close() {
	c.mu.Lock()
	stmts := c.stmts
	c.stmts, c.off = nil, true
	c.mu.Unlock()
	for _, st := range stmts {
		if st != nil {
			st.Close()
		}
	}
}

// unusable reports whether err says that the server lost a statement prepared on a session, or
// can no longer run it as prepared: a pooler between the archiver and Postgres that does not keep
// prepared statements (PgBouncer before 1.21 in transaction mode, a DISCARD ALL), or a migration
// that changed the columns a prepared statement returns ("cached plan must not change result
// type").
func unusable(err error) bool {
	e := pq.As(err)
	return e != nil && (e.Code == pqerror.InvalidSQLStatementName || e.Code == pqerror.FeatureNotSupported)
}

// check turns preparation off for good when err says the server cannot run prepared statements
// (unusable): the call that failed fails, and is tried again by its caller, unprepared like every
// later one. It returns err.
func (d *DB) check(err error) error {
	if unusable(err) {
		d.stmts.close()
	}
	return err
}

// prepared is a querier that runs each statement prepared in tx: prepared on its connection inside
// the transaction. The archiver's calls on the pool run unprepared: database/sql would prepare a
// statement on each connection it runs on outside any transaction, which Postgres counts as one.
type prepared struct {
	d  *DB
	tx *sql.Tx
}

// prepared returns the querier that runs statements prepared in tx.
func (d *DB) prepared(tx *sql.Tx) querier { return prepared{d, tx} }

// stmt is query prepared for p's transaction, or nil.
func (p prepared) stmt(ctx context.Context, query string) *sql.Stmt {
	if st := p.d.stmts.stmt(p.d.db, query, p.d.timeout); st != nil {
		return p.tx.StmtContext(ctx, st) // prepared on the transaction's connection once; closed with it
	}
	return nil
}

func (p prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.tx.QueryContext(ctx, query, args...)
}

func (p prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.tx.QueryRowContext(ctx, query, args...)
}

func (p prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.tx.ExecContext(ctx, query, args...)
}

package dbgen

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lib/pq"
)

// ddl is one index or constraint of a table, as Postgres itself prints it.
type ddl struct{ table, name, def string }

// savedSchema is what dropIndexes removed, to put back as it was.
type savedSchema struct{ foreign, keys, indexes []ddl }

// dropIndexes drops the indexes, primary and unique keys of the generated tables and every foreign
// key on or to them, returning their definitions (whatever the migrations made them).
func dropIndexes(ctx context.Context, conn *sql.Conn) (savedSchema, error) {
	var s savedSchema
	read := func(into *[]ddl, q string) error {
		rows, err := conn.QueryContext(ctx, q, pq.StringArray(tables))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var d ddl
			if err := rows.Scan(&d.table, &d.name, &d.def); err != nil {
				return err
			}
			*into = append(*into, d)
		}
		return rows.Err()
	}
	err := read(&s.foreign, `
SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE contype = 'f' AND (conrelid::regclass::text = ANY($1) OR confrelid::regclass::text = ANY($1)) ORDER BY 1, 2`)
	if err == nil {
		err = read(&s.keys, `
SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE contype IN ('p', 'u') AND conrelid::regclass::text = ANY($1) ORDER BY 1, 2`)
	}
	if err == nil {
		err = read(&s.indexes, `
SELECT i.indrelid::regclass::text, c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid::regclass::text = ANY($1)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.contype IN ('p', 'u'))
ORDER BY 1, 2`)
	}
	if err != nil {
		return s, fmt.Errorf("read indexes: %w", err)
	}
	// Autovacuum would scan the tables over and over while they fill; one VACUUM follows the load.
	for _, t := range tables {
		if err := execDDL(ctx, conn, `ALTER TABLE `+t+` SET (autovacuum_enabled = false)`); err != nil {
			return s, err
		}
	}
	for _, d := range s.foreign {
		if err := execDDL(ctx, conn, fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %s`, d.table, pq.QuoteIdentifier(d.name))); err != nil {
			return s, err
		}
	}
	for _, d := range s.indexes {
		if err := execDDL(ctx, conn, `DROP INDEX `+pq.QuoteIdentifier(d.name)); err != nil {
			return s, err
		}
	}
	for _, d := range s.keys {
		if err := execDDL(ctx, conn, fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %s`, d.table, pq.QuoteIdentifier(d.name))); err != nil {
			return s, err
		}
	}
	return s, nil
}

// restore is the DDL that rebuilds what dropIndexes dropped, in phases whose statements may run
// in parallel: keys, then indexes, then foreign keys, which Postgres validates against every row
// (proving the generator's references whole), and autovacuum back on.
func (s savedSchema) restore() [][]string {
	var keys, indexes, foreign, autovacuum []string
	for _, d := range s.keys {
		keys = append(keys, fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`, d.table, pq.QuoteIdentifier(d.name), d.def))
	}
	for _, d := range s.indexes {
		indexes = append(indexes, d.def)
	}
	for _, d := range s.foreign {
		foreign = append(foreign, fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`, d.table, pq.QuoteIdentifier(d.name), d.def))
	}
	for _, t := range tables {
		autovacuum = append(autovacuum, `ALTER TABLE `+t+` RESET (autovacuum_enabled)`)
	}
	return [][]string{keys, indexes, foreign, autovacuum}
}

func execDDL(ctx context.Context, conn *sql.Conn, q string) error {
	if _, err := conn.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}

// Command dbgen loads a jobvault database with synthetic history at audit scale (see package
// test/dbgen): `go run ./test/tools/dbgen --db-dsn DSN`. The database is migrated first and must
// hold no jobs. Sizes come from JOBVAULT_BENCH_DB_JOBS, _TRANSITIONS and _LOGS (1M, 10M, 20M).
// `make bench-db` loads a testbed Postgres itself; this is for loading one of your own.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/jobvault/jobvault/pkg/db"
	"github.com/jobvault/jobvault/test/dbgen"
)

func main() {
	dsn := flag.String("db-dsn", os.Getenv("JOBVAULT_DB_DSN"), "Postgres connection string of the database to load. Default $JOBVAULT_DB_DSN.")
	seed := flag.Int("seed", 0, "Seed of every drawn value: the same seed and sizes load the same rows.")
	flag.Parse()
	if err := run(*dsn, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "dbgen:", err)
		os.Exit(1)
	}
}

func run(dsn string, seed int) error {
	if dsn == "" {
		return fmt.Errorf("--db-dsn (or $JOBVAULT_DB_DSN) is required")
	}
	cfg, err := dbgen.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.Seed = seed
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	records, err := db.Open(ctx, dsn, db.Options{Migrate: true})
	if err != nil {
		return err
	}
	records.Close()
	sqlDB, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	st, err := dbgen.Load(ctx, sqlDB, cfg, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Println("dbgen:", st)
	return nil
}

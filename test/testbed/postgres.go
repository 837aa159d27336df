package testbed

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the driver jobvault itself uses
)

// PostgresServer is a throwaway Postgres 15 cluster: one initdb per test binary, one database per test.
type PostgresServer struct {
	Port    int
	Proc    *Process
	restart func() error
}

// Stop stops the shared Postgres server (outage tests); Start brings it back with the same data.
func (s *PostgresServer) Stop() { s.Proc.Stop() }

// Start restarts a stopped Postgres server.
func (s *PostgresServer) Start(t T) {
	t.Helper()
	if err := s.restart(); err != nil {
		t.Fatal(err)
	}
}

// AdminDSN is the DSN of the cluster's postgres database.
func (s *PostgresServer) AdminDSN() string { return s.DSN("postgres") }

// DSN is the DSN of database db.
func (s *PostgresServer) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

var (
	pgOnce  once[*PostgresServer]
	dbCount atomic.Int64
)

// PostgresCluster returns the shared Postgres server, starting it on first use.
func PostgresCluster(t T) *PostgresServer {
	t.Helper()
	s, err := pgOnce.get("Postgres", func() (*PostgresServer, error) { return startPostgres(filepath.Join(WorkDir(), "postgres")) })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// NewPostgres starts a Postgres server of the test's own, with the shared server's settings and
// then settings ("name=value" each), stopped when the test ends: for a count that the other tests'
// databases must not reach (autovacuum's workers visit every database of a server, and process
// the catalogs all its databases share).
func NewPostgres(t T, settings ...string) *PostgresServer {
	t.Helper()
	dir, err := os.MkdirTemp(WorkDir(), "pg-") // short: its socket's path must fit 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // after the server stopped (cleanups run last first)
	s, err := startPostgres(dir, settings...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Postgres returns the DSN of a new, empty database on the shared server for this test, dropped
// when the test ends.
func Postgres(t T) string {
	t.Helper()
	return PostgresCluster(t).Database(t)
}

// Database returns the DSN of a new, empty database on s for this test, dropped when the test ends.
func (s *PostgresServer) Database(t T) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", dbCount.Add(1), sanitize(t.Name(), 40))
	db, err := sql.Open("postgres", s.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE DATABASE "` + name + `"`); err != nil {
		t.Fatalf("testbed postgres: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("postgres", s.AdminDSN())
		if err == nil {
			_, _ = db.Exec(`DROP DATABASE IF EXISTS "` + name + `" WITH (FORCE)`)
			db.Close()
		}
	})
	return s.DSN(name)
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

func sanitize(s string, max int) string {
	s = strings.Trim(nonWord.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > max {
		s = s[:max]
	}
	return strings.Trim(s, "-")
}

// pgCredential runs Postgres as the postgres user when we are root: Postgres refuses to run as root.
func pgCredential(dir string) (*syscall.SysProcAttr, error) {
	if os.Getuid() != 0 {
		return &syscall.SysProcAttr{}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres refuses to run as root and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	}); err != nil {
		return nil, err
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
}

func pgBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("testbed part postgres: %s not found on PATH or in /usr/lib/postgresql/*/bin: install Postgres 15 (apt-get install postgresql-15)", name)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startPostgres makes a Postgres cluster in dir and starts it with settings added to the
// testbed's own.
func startPostgres(dir string, settings ...string) (*PostgresServer, error) {
	initdb, err := pgBinary("initdb")
	if err != nil {
		return nil, err
	}
	postgres, err := pgBinary("postgres")
	if err != nil {
		return nil, err
	}
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "run")
	if err := os.MkdirAll(sock, 0o700); err != nil {
		return nil, err
	}
	attr, err := pgCredential(dir)
	if err != nil {
		return nil, fmt.Errorf("testbed part postgres: %w", err)
	}
	init := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	init.SysProcAttr = attr
	if out, err := init.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testbed part postgres: initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &PostgresServer{Port: port}
	s.restart = func() error {
		args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", sock,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=300"}
		for _, kv := range settings {
			args = append(args, "-c", kv)
		}
		cmd := exec.Command(postgres, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: attr.Credential}
		p, err := startProcess("postgres", cmd)
		if err != nil {
			return err
		}
		onStop(p.Stop)
		s.Proc = p
		return p.waitFor(30*time.Second, s.ping)
	}
	if err := s.restart(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *PostgresServer) ping() error {
	db, err := sql.Open("postgres", s.AdminDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

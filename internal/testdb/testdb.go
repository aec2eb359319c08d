// Package testdb gives tests fresh, isolated stores: a SQLite file in a
// temporary directory, or a PostgreSQL schema of their own, dropped when
// the test ends.
//
// PostgreSQL is found through OPLEDGER_TEST_POSTGRES (default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable). When no server
// answers, Postgres tests skip with a loud message, except under CI=true,
// where they fail: a missing server there is a broken pipeline, not a pass.
//
// Allowed imports: pgx, testing helpers.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPostgres is used when OPLEDGER_TEST_POSTGRES is unset.
const DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// PostgresBase is the DSN of the test server.
func PostgresBase() string {
	if dsn := os.Getenv("OPLEDGER_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return DefaultPostgres
}

var (
	reachOnce sync.Once
	reachErr  error
)

// RequirePostgres skips t (loudly) when no PostgreSQL answers, or fails it
// under CI=true.
func RequirePostgres(t testing.TB) {
	t.Helper()
	reachOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, PostgresBase())
		if err != nil {
			reachErr = err
			if os.Getenv("CI") != "true" {
				fmt.Fprintf(os.Stderr, "\n*** POSTGRES TESTS SKIPPED: no server at %s: %v ***\n"+
					"*** set OPLEDGER_TEST_POSTGRES or start PostgreSQL to run them ***\n\n", Redact(PostgresBase()), err)
			}
			return
		}
		reachErr = conn.Close(ctx)
	})
	if reachErr == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("PostgreSQL is required under CI=true but %s is unreachable: %v", Redact(PostgresBase()), reachErr)
	}
	t.Skipf("POSTGRES TESTS SKIPPED: %s is unreachable (%v); set OPLEDGER_TEST_POSTGRES or start PostgreSQL", Redact(PostgresBase()), reachErr)
}

// Redact hides a password in a URL DSN.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		return u.Redacted()
	}
	return dsn
}

// AdminExec runs one statement on a connection of its own.
func AdminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, PostgresBase())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// PostgresDSN creates an empty schema owned by t, dropped with everything
// in it when t ends, and returns a DSN whose search_path is that schema.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	RequirePostgres(t)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema := "opltest_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := AdminExec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := AdminExec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(t, PostgresBase(), schema)
}

// WithSearchPath returns dsn with its search_path set to schema.
func WithSearchPath(t testing.TB, dsn, schema string) string {
	t.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		t.Fatalf("OPLEDGER_TEST_POSTGRES must be a postgres:// URL, got %q", Redact(dsn))
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", Redact(dsn), err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// SQLiteDSN returns the DSN of a new SQLite file in t's temporary directory.
func SQLiteDSN(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
}

// Store names a kind of store and how to get a fresh one.
type Store struct {
	Name   string
	NewDSN func(t testing.TB) string
}

// Stores lists both stores, for tests that must pass on each.
func Stores() []Store {
	return []Store{{"sqlite", SQLiteDSN}, {"postgres", PostgresDSN}}
}

// WaitBlockedBy returns once some session of the test server waits for a
// lock that holder's session holds; it fails the test, naming what, if
// none does within 30 s (a guard, not a wait: it polls the server).
func WaitBlockedBy(t testing.TB, holder *pgx.Conn, what string) {
	t.Helper()
	waitLocks(t, `SELECT count(*) > 0 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder.PgConn().PID(), what)
}

// WaitBlocked returns once the session of waiter, which runs a
// statement in another goroutine, waits for a lock another session
// holds; it fails the test as WaitBlockedBy does.
func WaitBlocked(t testing.TB, waiterPID uint32, what string) {
	t.Helper()
	waitLocks(t, `SELECT cardinality(pg_blocking_pids($1)) > 0`, waiterPID, what)
}

// waitLocks polls the test server with q, a query of one pid's locks
// answering true or false, until it answers true.
func waitLocks(t testing.TB, q string, pid uint32, what string) {
	t.Helper()
	ctx := context.Background()
	watcher, err := pgx.Connect(ctx, PostgresBase())
	if err != nil {
		t.Fatalf("connect a watcher: %v", err)
	}
	defer watcher.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var blocked bool
		if err := watcher.QueryRow(ctx, q, pid).Scan(&blocked); err != nil {
			t.Fatalf("read the server's locks: %v", err)
		}
		if blocked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never waited for the lock", what)
		}
	}
}

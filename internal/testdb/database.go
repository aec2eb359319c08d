package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// databasePrefix is what PostgresDatabase accepts as a prefix: the start
// of a plain, lower-case SQL identifier, short enough for the suffix.
var databasePrefix = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// databaseDDLTimeout bounds a CREATE or DROP DATABASE of a test. Dropping
// a database makes the server checkpoint, which writes every dirty buffer
// of every database: while other packages' tests load the server (the
// query-plan tests insert 100,000 rows), that has taken more than 30 s on
// a 2-core machine.
const databaseDDLTimeout = 3 * time.Minute

// PostgresDatabase creates an empty database of t's own on the test server,
// named prefix, an underscore and a random suffix, and returns a DSN of it
// (the server's DSN with the database replaced and any search_path left
// out, so that the ledger uses its public schema). The database is
// dropped when t ends, with any session still connected to it.
//
// A test that reads the server's per-database statistics uses it rather
// than a schema (PostgresDSN): pg_stat_database then counts only the
// test's own sessions, as DatabaseDeadlocks reads them. prefix is a
// lower-case identifier of at most 40 bytes.
func PostgresDatabase(t testing.TB, prefix string) string {
	t.Helper()
	if !databasePrefix.MatchString(prefix) {
		t.Fatalf("PostgresDatabase: prefix %q is not a lower-case identifier of at most 40 bytes", prefix)
	}
	RequirePostgres(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	u, err := url.Parse(PostgresBase())
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("OPLEDGER_TEST_POSTGRES must be a postgres:// URL, got %q", Redact(PostgresBase()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), databaseDDLTimeout)
	defer cancel()
	if err := AdminExec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), databaseDDLTimeout)
		defer cancel()
		if err := AdminExec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String()
}

// DatabaseDeadlocks returns how many deadlocks the server has detected in
// the database of dsn (pg_stat_database.deadlocks), counting every session
// that has been connected to it. Call it once the test's own sessions are
// closed: it waits (polling the server, for at most 30 s) until no session
// is connected to the database, since a session reports its statistics no
// later than when it ends and the server drops it from pg_stat_activity
// only after that report, and it then reads the counter from a fresh
// snapshot of the statistics. It fails t if a session stays connected.
func DatabaseDeadlocks(t testing.TB, dsn string) int64 {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", Redact(dsn), err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" {
		t.Fatalf("DatabaseDeadlocks: %s names no database", Redact(dsn))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The watcher connects to the server's own database, not to the one
	// it waits to be left alone.
	conn, err := pgx.Connect(ctx, PostgresBase())
	if err != nil {
		t.Fatalf("connect to read pg_stat_database: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var sessions int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, name).Scan(&sessions); err != nil {
			t.Fatalf("count the sessions on %s: %v", name, err)
		}
		if sessions == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DatabaseDeadlocks: %d sessions are still connected to %s after 30 s", sessions, name)
		}
	}
	// A session adds a deadlock it was chosen to break to counts of its
	// own, and reports them to the shared statistics when it is idle
	// (at most once a second) and, forced, as it exits, before it leaves
	// pg_stat_activity; so every session has reported once none is left.
	// (pg_stat_force_next_flush acts on the calling session only: it
	// cannot make another session report.) This session has read no
	// statistics yet, but start from a fresh snapshot all the same:
	// stats_fetch_consistency may keep what a transaction read first.
	if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatalf("clear the statistics snapshot: %v", err)
	}
	var deadlocks int64
	err = conn.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = $1`, name).Scan(&deadlocks)
	if err != nil {
		t.Fatalf("read pg_stat_database for %s: %v", name, err)
	}
	return deadlocks
}

package sqlitestore

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/migrate"
)

// migrateTo applies the embedded migrations up to version last to the
// database file at path, as Migrate would have when they were the newest.
func migrateTo(t *testing.T, path string, last int) {
	t.Helper()
	ctx := context.Background()
	db, err := openRawDB(path)
	require.NoError(t, err)
	defer db.Close()
	migs, err := migrate.Load(migrationsFS, "migrations")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `CREATE TABLE schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`)
	require.NoError(t, err)
	for _, m := range migs {
		if m.Version > last {
			break
		}
		_, err := db.ExecContext(ctx, m.SQL)
		require.NoError(t, err, m.Name)
		_, err = db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)`, m.Version, m.Name)
		require.NoError(t, err)
	}
}

// migrationsAfter names the embedded migrations newer than version last:
// those Migrate applies to a database at that version.
func migrationsAfter(t *testing.T, last int) []string {
	t.Helper()
	migs, err := migrate.Load(migrationsFS, "migrations")
	require.NoError(t, err)
	var names []string
	pending, err := migrate.Pending(migs, last)
	require.NoError(t, err)
	for _, m := range pending {
		names = append(names, m.Name)
	}
	return names
}

// openMigrated opens the store on the database file at path, at version
// last, and migrates it: it must apply every newer migration, the first
// being first. The store is closed when the test ends.
func openMigrated(t *testing.T, path string, last int, first string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	var applied []string
	require.NoError(t, s.Migrate(context.Background(), func(_, _ int, name string) { applied = append(applied, name) }))
	require.Equal(t, migrationsAfter(t, last), applied)
	require.Equal(t, first, applied[0])
	return s
}

// atVersion creates a database file migrated up to version last and opens
// it without the store, returning its path, the connection (closed when the
// test ends; close it before opening the store) and a runner of statements
// that fails the test on error.
func atVersion(t *testing.T, last int) (string, *sql.DB, func(q string, args ...any)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	migrateTo(t, path, last)
	db, err := openRawDB(path)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return path, db, func(q string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(context.Background(), q, args...)
		require.NoError(t, err, q)
	}
}

// TestMigration005KeepsRows migrates a version-4 database holding
// operations, attempts and timeline entries to 005: every row survives
// with its id, the dropped index and the AUTOINCREMENT bookkeeping are
// gone, and new timeline entries get ids after the old ones.
func TestMigration005KeepsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 4)
	for _, k := range []string{"a", "b"} {
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			revision, created_at, updated_at) VALUES ('t', ?, 'act', 'dest', 1, 'fp', X'7B7D', 'in_progress', 1, 1, 1)`, k)
		exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, outcome, response)
			VALUES (?, 't', ?, 1, 1, 'w', 1, 2, 'succeeded', X'01')`, "att-"+k, k)
	}
	// Timeline ids with a gap, and the largest id deleted afterwards, so
	// that sqlite_sequence (5) is ahead of the largest id left (4).
	for i, e := range []struct {
		id  int64
		key string
	}{{1, "a"}, {2, "b"}, {4, "a"}, {5, "b"}} {
		exec(`INSERT INTO timeline (id, tenant, key, at, actor, event, evidence) VALUES (?, 't', ?, ?, 'x', ?, 'ev')`,
			e.id, e.key, i, "e"+string(rune('0'+e.id)))
	}
	exec(`DELETE FROM timeline WHERE id = 5`)
	var seq int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = 'timeline'`).Scan(&seq))
	require.Equal(t, int64(5), seq)
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 4, "005_lighter_writes.sql")

	// Rows and ids survive.
	var tl []*store.TimelineEntry
	var attempts []*store.Attempt
	read := func(key string) {
		t.Helper()
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			var err error
			if tl, err = r.ListTimeline(ctx, "t", key); err != nil {
				return err
			}
			attempts, err = r.ListAttempts(ctx, "t", key)
			return err
		}))
	}
	read("a")
	require.Len(t, tl, 2)
	require.Equal(t, []int64{1, 4}, []int64{tl[0].ID, tl[1].ID})
	require.Equal(t, []string{"e1", "e4"}, []string{tl[0].Event, tl[1].Event})
	require.Len(t, attempts, 1)
	require.Equal(t, &store.Attempt{ID: "att-a", Tenant: "t", Key: "a", Destination: "dest", Number: 1, FencingToken: 1, Worker: "w",
		ClaimedAt: fromMicros(1), LeaseExpiresAt: fromMicros(2), Outcome: "succeeded", Response: []byte{1}}, attempts[0])
	read("b")
	require.Len(t, tl, 1)
	require.Equal(t, int64(2), tl[0].ID)

	// The schema is the new one.
	schema := func(q string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, s.reader.QueryRowContext(ctx, q, args...).Scan(&n))
		return n
	}
	require.Zero(t, schema(`SELECT COUNT(*) FROM sqlite_master WHERE name IN ('attempts_outcome', 'timeline_new', 'attempts_new')`))
	// Migration 008 keyed both tables by their operation instead of the
	// indexes 005 made.
	require.Zero(t, schema(`SELECT COUNT(*) FROM sqlite_master WHERE name IN ('timeline_operation', 'attempts_operation')`))
	require.Zero(t, schema(`SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'timeline'`))
	require.Zero(t, schema(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'timeline' AND sql LIKE '%AUTOINCREMENT%'`))
	require.Equal(t, 1, schema(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'attempts' AND sql LIKE '%WITHOUT ROWID%'`))
	require.Equal(t, "ok", func() string {
		var res string
		require.NoError(t, s.reader.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&res))
		return res
	}())

	// New writes work: entries order after the old ones of their
	// operation, an attempt id stays unique within its operation.
	now := time.Now().UTC().Truncate(time.Microsecond)
	var ids []int64
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, key := range []string{"b", "a"} {
			e := &store.TimelineEntry{Tenant: "t", Key: key, At: now, Actor: "x", Event: "new " + key}
			if err := tx.AppendTimeline(ctx, e); err != nil {
				return err
			}
			ids = append(ids, e.ID)
		}
		return tx.InsertAttempt(ctx, &store.Attempt{ID: "att-a2", Tenant: "t", Key: "a", Destination: "dest", Number: 2, FencingToken: 2,
			Worker: "w", ClaimedAt: now, LeaseExpiresAt: now})
	}))
	require.Equal(t, []int64{3, 5}, ids, "each operation's largest id plus one")
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertAttempt(ctx, &store.Attempt{ID: "att-a2", Tenant: "t", Key: "a", Number: 3, FencingToken: 3,
			Worker: "w", ClaimedAt: now, LeaseExpiresAt: now})
	})
	require.ErrorIs(t, err, store.ErrConflict, "attempt ids stay unique within their operation")
	read("a")
	require.Equal(t, []string{"e1", "e4", "new a"}, []string{tl[0].Event, tl[1].Event, tl[2].Event})
	require.Equal(t, []string{"att-a", "att-a2"}, []string{attempts[0].ID, attempts[1].ID})
	read("b")
	require.Equal(t, []string{"e2", "new b"}, []string{tl[0].Event, tl[1].Event})

	// Stats still counts attempts by destination and outcome.
	var st *store.Stats
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		st, err = r.Stats(ctx, "t", nil)
		return err
	}))
	require.Equal(t, []store.AttemptCount{{Destination: "dest", Outcome: "", Count: 1}, {Destination: "dest", Outcome: "succeeded", Count: 2}}, st.Attempts)
}

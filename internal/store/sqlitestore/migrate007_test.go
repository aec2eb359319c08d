package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration007NumbersOperations migrates a version-6 database to 007:
// operations get row ids in the order they were recorded, whatever the
// order of their keys; every attempt and timeline entry names its
// operation's id (one whose operation is gone gets 0) and is listed with
// it; new writes, and the deletion of an operation with its history, work
// on the new schema.
func TestMigration007NumbersOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 6)
	// Keys in the reverse of the order they were recorded in.
	for i, k := range []string{"c", "b", "a"} {
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			revision, created_at, updated_at, protected_until) VALUES ('t', ?, 'act', 'dest', 1, 'fp', X'7B7D', 'in_progress', 1, ?, ?, ?)`,
			k, 10+i, 20+i, 30+i)
		exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, destination)
			VALUES (?, 't', ?, 1, 1, 'w', 1, 2, 'dest')`, "att-"+k, k)
		exec(`INSERT INTO timeline (tenant, key, at, actor, event) VALUES ('t', ?, ?, 'x', ?)`, k, i, "recorded "+k)
	}
	exec(`INSERT INTO timeline (tenant, key, at, actor, event) VALUES ('t', 'c', 9, 'x', 'claimed c')`)
	exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at)
		VALUES ('att-gone', 't', 'gone', 1, 1, 'w', 1, 2)`)
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 6, "007_operation_ids.sql")

	query := func(q string, args ...any) map[string]int64 {
		t.Helper()
		rows, err := s.reader.QueryContext(ctx, q, args...)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var k string
			var v int64
			require.NoError(t, rows.Scan(&k, &v))
			out[k] = v
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.Equal(t, map[string]int64{"c": 1, "b": 2, "a": 3}, query(`SELECT key, id FROM operations`), "ids in the order of created_at")
	require.Equal(t, map[string]int64{"att-c": 1, "att-b": 2, "att-a": 3, "att-gone": 0}, query(`SELECT id, operation_id FROM attempts`))
	require.Equal(t, map[string]int64{"recorded c": 1, "recorded b": 2, "recorded a": 3, "claimed c": 1},
		query(`SELECT event, operation_id FROM timeline`))

	// Every column survives the copy.
	var op *store.Operation
	var attempts []*store.Attempt
	var tl []*store.TimelineEntry
	read := func(key string) {
		t.Helper()
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			var err error
			if op, err = r.GetOperation(ctx, "t", key); err != nil {
				return err
			}
			if attempts, err = r.ListAttempts(ctx, "t", key); err != nil {
				return err
			}
			tl, err = r.ListTimeline(ctx, "t", key)
			return err
		}))
	}
	read("c")
	require.Equal(t, &store.Operation{Tenant: "t", Key: "c", Action: "act", Destination: "dest", Version: 1, Fingerprint: "fp",
		Payload: []byte("{}"), SensitiveFields: []string{}, State: "in_progress", Revision: 1, CreatedAt: fromMicros(10),
		UpdatedAt: fromMicros(20), ProtectedUntil: fromMicros(30),
		StateSince: fromMicros(20)}, op) // 023: no entry into its state, so its last change
	require.Len(t, attempts, 1)
	require.Equal(t, "att-c", attempts[0].ID)
	require.Equal(t, []string{"recorded c", "claimed c"}, []string{tl[0].Event, tl[1].Event})

	// The schema is the new one.
	schema := func(q string) int {
		t.Helper()
		var n int
		require.NoError(t, s.reader.QueryRowContext(ctx, q).Scan(&n))
		return n
	}
	require.Zero(t, schema(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'operations_new'`))
	require.Zero(t, schema(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'operations' AND sql LIKE '%WITHOUT ROWID%'`))
	require.Equal(t, 1, schema(`SELECT COUNT(*) FROM sqlite_master WHERE name = 'operations_key' AND sql LIKE 'CREATE UNIQUE INDEX%'`))
	require.Equal(t, 9, schema(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'operations' AND sql IS NOT NULL`),
		"operations_key and the eight indexes of migrations 001, 002 and 006, two of which 010 replaces by one, and 014's")
	var check string
	require.NoError(t, s.reader.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check))
	require.Equal(t, "ok", check)

	// New writes: a new operation gets the next id, its attempt and entry
	// name it; a key is still unique; deleting an operation deletes its
	// history and nothing else.
	now := time.Now().UTC().Truncate(time.Microsecond)
	newOp := &store.Operation{Tenant: "t", Key: "0-new", Action: "act", Destination: "dest", Version: 1, Fingerprint: "fp",
		Payload: []byte("{}"), State: "in_progress", Revision: 1, CreatedAt: now, UpdatedAt: now}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertOperation(ctx, newOp); err != nil {
			return err
		}
		if err := tx.InsertAttempt(ctx, &store.Attempt{ID: "att-new", Tenant: "t", Key: "0-new", Number: 1, FencingToken: 1,
			Worker: "w", ClaimedAt: now, LeaseExpiresAt: now}); err != nil {
			return err
		}
		return tx.AppendTimeline(ctx, &store.TimelineEntry{Tenant: "t", Key: "0-new", At: now, Actor: "x", Event: "recorded new"})
	}))
	require.Equal(t, int64(4), query(`SELECT key, id FROM operations WHERE key = '0-new'`)["0-new"])
	require.Equal(t, int64(4), query(`SELECT id, operation_id FROM attempts WHERE id = 'att-new'`)["att-new"])
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return tx.InsertOperation(ctx, newOp) })
	require.ErrorIs(t, err, store.ErrConflict, "(tenant, key) stays unique")
	// An entry for an operation this transaction did not write looks its
	// id up; one for no operation at all fails.
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.AppendTimeline(ctx, &store.TimelineEntry{Tenant: "t", Key: "b", At: now, Actor: "x", Event: "note b"})
	}))
	read("b")
	require.Equal(t, []string{"recorded b", "note b"}, []string{tl[0].Event, tl[1].Event})
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.AppendTimeline(ctx, &store.TimelineEntry{Tenant: "t", Key: "nowhere", At: now, Actor: "x", Event: "lost"})
	})
	require.ErrorContains(t, err, "NOT NULL")
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.(*sqlTx).deleteOperation(ctx, "t", "c", 1)
	}))
	require.Equal(t, map[string]int64{"att-b": 2, "att-a": 3, "att-gone": 0, "att-new": 4}, query(`SELECT id, operation_id FROM attempts`))
	require.Equal(t, map[string]int64{"recorded b": 2, "note b": 2, "recorded a": 3, "recorded new": 4}, query(`SELECT event, operation_id FROM timeline`))
}

package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration011KeysHistoryByOperation migrates a version-10 schema with
// history to 011: attempts and timeline keep one index each, their primary
// key by (tenant, key, id); the history reads as it did, in the same
// order, and writes after the migration extend it.
func TestMigration011KeysHistoryByOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, conn, exec := schemaAtVersion(t, 10)
	for _, key := range []string{"a", "b"} {
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			revision, created_at, updated_at) VALUES ('t', $1, 'act', 'dest', 1, 'fp', '\x7b7d', 'in_progress', 1, now(), now())`, key)
	}
	// Attempts inserted out of their number's order; ListAttempts orders by number.
	for _, a := range []struct {
		key, id string
		number  int
	}{{"a", "01B", 2}, {"a", "01A", 1}, {"b", "01C", 1}} {
		exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, destination)
			VALUES ($1, 't', $2, $3, 1, 'w', now(), now() + interval '1 minute', 'dest')`, a.id, a.key, a.number)
	}
	for _, e := range []struct{ key, event string }{{"a", "recorded"}, {"b", "recorded"}, {"a", "claimed"}, {"a", "retried"}} {
		exec(`INSERT INTO timeline (tenant, key, at, actor, event) VALUES ('t', $1, now(), 'w', $2)`, e.key, e.event)
	}

	s := migrateFrom(t, dsn, 10, "011_history_by_operation.sql")

	rows, err := conn.Query(ctx, `SELECT tablename || ' ' || indexname || ': ' || indexdef FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename IN ('attempts', 'timeline') ORDER BY tablename`)
	require.NoError(t, err)
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, defs, 2, "one index per table: %v", defs)
	require.Contains(t, defs[0], "attempts attempts_pkey: CREATE UNIQUE INDEX")
	require.Contains(t, defs[0], "(tenant, key, id)")
	require.Contains(t, defs[1], "timeline timeline_pkey: CREATE UNIQUE INDEX")
	require.Contains(t, defs[1], "(tenant, key, id)")

	var before []int64
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		tl, err := r.ListTimeline(ctx, "t", "a")
		require.NoError(t, err)
		var events []string
		for _, e := range tl {
			events = append(events, e.Event)
			before = append(before, e.ID)
		}
		require.Equal(t, []string{"recorded", "claimed", "retried"}, events)
		require.IsIncreasing(t, before)
		as, err := r.ListAttempts(ctx, "t", "a")
		require.NoError(t, err)
		require.Len(t, as, 2)
		require.Equal(t, []string{"01A", "01B"}, []string{as[0].ID, as[1].ID})
		_, err = r.GetAttempt(ctx, "t", "b", "01A")
		require.ErrorIs(t, err, store.ErrNotFound, "an attempt is found under its own operation only")
		return nil
	}))

	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		a, err := tx.GetAttempt(ctx, "t", "a", "01B")
		require.NoError(t, err)
		a.Outcome, a.FinishedAt = "succeeded", time.Now()
		require.NoError(t, tx.UpdateAttempt(ctx, a))
		return tx.AppendTimeline(ctx, &store.TimelineEntry{Tenant: "t", Key: "a", At: time.Now(), Actor: "w", Event: "succeeded"})
	}))
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.UpdateAttempt(ctx, &store.Attempt{ID: "01C", Tenant: "t", Key: "a"})
	})
	require.ErrorIs(t, err, store.ErrNotFound, "another operation's attempt is not updated")
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		a, err := r.GetAttempt(ctx, "t", "a", "01B")
		require.NoError(t, err)
		require.Equal(t, "succeeded", a.Outcome)
		b, err := r.GetAttempt(ctx, "t", "b", "01C")
		require.NoError(t, err)
		require.Empty(t, b.Outcome)
		tl, err := r.ListTimeline(ctx, "t", "a")
		require.NoError(t, err)
		require.Len(t, tl, 4)
		require.Equal(t, "succeeded", tl[3].Event)
		require.Greater(t, tl[3].ID, before[2])
		return nil
	}))
}

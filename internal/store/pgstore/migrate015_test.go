package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration015CarriesEffects migrates a version-14 schema holding
// tombstones to 015: their effects become the running totals and the
// tombstones are marked counted. A tombstone written without the mark, as
// a process of an earlier release still running after the migration
// writes it, is counted from its row and carried into the totals when it
// is forgotten; forgetting tombstones changes no total, and replacing one
// moves its effects.
func TestMigration015CarriesEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, conn, exec := schemaAtVersion(t, 14)
	tombstone := `INSERT INTO tombstones (tenant, key, fingerprint, state, duplicate_effects, created_at, finished_at, compacted_at)
		VALUES ($1, $2, 'fp', $3, $4, now(), now(), now() - interval '1 day')`
	exec(tombstone, "t", "a", "succeeded", 1)
	exec(tombstone, "t", "b", "failed", 0)
	exec(tombstone, "t", "d", "succeeded", 2)
	exec(tombstone, "u", "c", "succeeded", 0)

	s := migrateFrom(t, dsn, 14, "015_compacted_effects.sql")
	want := func(tenant string, confirmed, duplicates int, msg string) {
		t.Helper()
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			st, err := r.Stats(ctx, tenant, nil)
			require.NoError(t, err)
			require.Equal(t, [2]int{confirmed, duplicates}, [2]int{st.ConfirmedEffects, st.DuplicateEffects},
				"%s: tenant %q, confirmed and duplicate effects", msg, tenant)
			return nil
		}))
	}
	want("t", 2, 3, "migrated")
	want("u", 1, 0, "migrated")
	want("", 3, 3, "migrated")
	var uncounted int
	require.NoError(t, conn.QueryRow(ctx, `SELECT COUNT(*) FROM tombstones WHERE NOT counted`).Scan(&uncounted))
	require.Zero(t, uncounted, "the tombstones there were are in the totals")

	// A tombstone of an earlier release, which does not name the column.
	exec(tombstone, "t", "e", "succeeded", 1)
	want("t", 3, 4, "with a tombstone of an earlier release")

	update := func(fn func(tx store.Tx) error) {
		t.Helper()
		require.NoError(t, s.Update(ctx, func(_ context.Context, tx store.Tx) error { return fn(tx) }))
	}
	// Forgetting every tombstone keeps every total.
	update(func(tx store.Tx) error {
		n, err := tx.DeleteTombstonesBefore(ctx, time.Now())
		require.Equal(t, 5, n)
		return err
	})
	want("t", 3, 4, "tombstones forgotten")
	want("u", 1, 0, "tombstones forgotten")
	want("", 4, 4, "tombstones forgotten")

	// Compaction writes counted tombstones and carries their effects;
	// replacing one takes the old effects out.
	now := time.Now().Add(-time.Hour)
	tb := &store.Tombstone{Tenant: "t", Key: "f", Fingerprint: "fp", State: "succeeded", CreatedAt: now, FinishedAt: now, CompactedAt: now}
	update(func(tx store.Tx) error { return tx.UpsertTombstone(ctx, tb) })
	want("t", 4, 4, "a compacted operation")
	tb.State, tb.DuplicateEffects = "failed", 2
	update(func(tx store.Tx) error { return tx.UpsertTombstone(ctx, tb) })
	want("t", 3, 6, "its tombstone replaced")
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		got, err := r.GetTombstone(ctx, "t", "f")
		require.NoError(t, err)
		require.Equal(t, "failed", got.State)
		return nil
	}))
	update(func(tx store.Tx) error {
		n, err := tx.DeleteTombstonesBefore(ctx, time.Now())
		require.Equal(t, 1, n)
		return err
	})
	want("t", 3, 6, "counted tombstone forgotten")
}

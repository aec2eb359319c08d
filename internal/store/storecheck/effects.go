// Package storecheck holds checks that both store drivers' own tests run
// at the store.Store level, below the public API the conformance suite
// (storetest) drives: checks of migrations, on schemas a driver's test
// prepares by hand in its own SQL.
//
// Allowed imports: internal/store, testing helpers.
package storecheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// OldTombstones writes tombstones as a release before migration 015 did,
// without the counted mark: the driver's raw SQL, before the migration
// and after it.
type OldTombstones func(tenant, key, state string, duplicates int)

// SeedEffects writes the tombstones CompactedEffects expects, before the
// migration.
func SeedEffects(write OldTombstones) {
	write("t", "a", "succeeded", 1)
	write("t", "b", "failed", 0)
	write("t", "d", "succeeded", 2)
	write("u", "c", "succeeded", 0)
}

// CompactedEffects checks migration 015 on s, migrated from a schema
// seeded by SeedEffects: the tombstones' effects became the running
// totals and none is left uncounted (uncounted counts the tombstones
// without the mark). A tombstone written afterwards without the mark, as a
// process of an earlier release writes it, is counted from its row and
// carried into the totals when it is forgotten; forgetting tombstones
// changes no total, and replacing one moves its effects. Each tombstone
// written by write must be compacted before now.
func CompactedEffects(t *testing.T, s store.Store, write OldTombstones, uncounted func() int) {
	t.Helper()
	ctx := context.Background()
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
	update := func(fn func(tx store.Tx) error) {
		t.Helper()
		require.NoError(t, s.Update(ctx, func(_ context.Context, tx store.Tx) error { return fn(tx) }))
	}
	want("t", 2, 3, "migrated")
	want("u", 1, 0, "migrated")
	want("", 3, 3, "migrated")
	require.Zero(t, uncounted(), "the tombstones there were are in the totals")

	write("t", "e", "succeeded", 1)
	want("t", 3, 4, "with a tombstone of an earlier release")

	// Forgetting every tombstone keeps every total, also a batch at a
	// time: only the batch's effects are carried.
	update(func(tx store.Tx) error {
		n, err := tx.DeleteTombstonesBefore(ctx, time.Now(), 2)
		require.Equal(t, 2, n, "a batch of 2")
		return err
	})
	want("", 4, 4, "two tombstones forgotten")
	update(func(tx store.Tx) error {
		n, err := tx.DeleteTombstonesBefore(ctx, time.Now(), 1000)
		require.Equal(t, 3, n, "the rest")
		return err
	})
	want("t", 3, 4, "tombstones forgotten")
	want("u", 1, 0, "tombstones forgotten")
	want("", 4, 4, "tombstones forgotten")

	// Compaction writes counted tombstones and carries their effects;
	// replacing one takes the old effects out.
	at := time.Now().Add(-time.Hour)
	tb := &store.Tombstone{Tenant: "t", Key: "f", Fingerprint: "fp", State: "succeeded", CreatedAt: at, FinishedAt: at, CompactedAt: at}
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
		n, err := tx.DeleteTombstonesBefore(ctx, time.Now(), 1000)
		require.Equal(t, 1, n)
		return err
	})
	want("t", 3, 6, "counted tombstone forgotten")
}

package storecheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// CompactOperations checks store.Tx.CompactOperations on s, a migrated,
// empty store: a batch with one lost revision writes nothing and fails
// with store.ErrConflict; the batch as it is replaces each operation with
// its tombstone, deletes its attempts and timeline, and keeps the
// confirmed and duplicate effects Stats counts, also for a key whose
// tombstone it replaces.
func CompactOperations(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	type seed struct {
		tenant, key, state string
		duplicates         int
	}
	seeds := []seed{{"t", "a", "succeeded", 1}, {"t", "b", "failed", 0}, {"t", "c", "succeeded", 0}, {"u", "d", "succeeded", 2}}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, sd := range seeds {
			if err := tx.InsertOperation(ctx, &store.Operation{Tenant: sd.tenant, Key: sd.key, Action: "a", Destination: "crm",
				Version: 1, Fingerprint: "fp-" + sd.key, State: sd.state, DuplicateEffects: sd.duplicates, Revision: 3,
				CreatedAt: at, UpdatedAt: at}); err != nil {
				return err
			}
			if err := tx.InsertAttempt(ctx, &store.Attempt{ID: "A-" + sd.key, Tenant: sd.tenant, Key: sd.key,
				Destination: "crm", Number: 1, FencingToken: 1, ClaimedAt: at, LeaseExpiresAt: at, FinishedAt: at,
				Outcome: "succeeded"}); err != nil {
				return err
			}
			if err := tx.AppendTimeline(ctx, &store.TimelineEntry{Tenant: sd.tenant, Key: sd.key, At: at, Actor: "w",
				Event: "recorded"}); err != nil {
				return err
			}
		}
		// A tombstone under c already, with effects of its own, which the
		// compaction replaces (compaction itself never meets one).
		return tx.UpsertTombstone(ctx, &store.Tombstone{Tenant: "t", Key: "c", Fingerprint: "old", State: "succeeded",
			DuplicateEffects: 5, CreatedAt: at, FinishedAt: at, CompactedAt: at})
	}))
	effects := func() [2]int {
		t.Helper()
		var got [2]int
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			st, err := r.Stats(ctx, "", nil)
			got = [2]int{st.ConfirmedEffects, st.DuplicateEffects}
			return err
		}))
		return got
	}
	require.Equal(t, [2]int{4, 8}, effects(), "the live operations' effects and those of c's tombstone")
	// The live operations' effects, without the tombstone of c, which
	// compaction replaces.
	want := [2]int{3, 3}

	batch := make([]store.Compaction, len(seeds))
	for i, sd := range seeds {
		batch[i] = store.Compaction{Revision: 3, Tombstone: store.Tombstone{Tenant: sd.tenant, Key: sd.key,
			Fingerprint: "fp-" + sd.key, State: sd.state, DuplicateEffects: sd.duplicates, Version: 1,
			CreatedAt: at, FinishedAt: at, CompactedAt: at.Add(time.Minute)}}
	}
	lost := append([]store.Compaction(nil), batch...)
	lost[1].Revision = 2
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return tx.CompactOperations(ctx, lost) })
	require.ErrorIs(t, err, store.ErrConflict, "b's revision moved on")
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		for _, sd := range seeds {
			_, err := r.GetOperation(ctx, sd.tenant, sd.key)
			require.NoError(t, err, "%s is still an operation", sd.key)
		}
		_, err := r.GetTombstone(ctx, "t", "a")
		require.ErrorIs(t, err, store.ErrNotFound, "no tombstone written")
		return nil
	}))

	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return tx.CompactOperations(ctx, batch) }))
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		for _, c := range batch {
			_, err := r.GetOperation(ctx, c.Tenant, c.Key)
			require.ErrorIs(t, err, store.ErrNotFound, "%s is compacted", c.Key)
			got, err := r.GetTombstone(ctx, c.Tenant, c.Key)
			require.NoError(t, err)
			require.Equal(t, c.Tombstone, *got, fmt.Sprintf("the tombstone of %s", c.Key))
			attempts, err := r.ListAttempts(ctx, c.Tenant, c.Key)
			require.NoError(t, err)
			require.Empty(t, attempts)
			timeline, err := r.ListTimeline(ctx, c.Tenant, c.Key)
			require.NoError(t, err)
			require.Empty(t, timeline)
		}
		return nil
	}))
	require.Equal(t, want, effects(), "confirmed and duplicate effects, each once")
}

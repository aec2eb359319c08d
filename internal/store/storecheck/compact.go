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

// FinalBeforePages checks store.Reader.FinalBefore on s, a migrated, empty
// store: paged by the row it returned last, it lists every final
// operation once, also those updated after they entered their state (a
// late report, a repeat naming an owner), whose updated_at and
// state_since differ. Each row carries the operation's updated_at, the
// time its pages are sorted by.
func FinalBeforePages(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	keys := []string{"a", "b", "c", "d", "e"}
	updated := map[string]time.Time{}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for i, key := range keys {
			// Entered its state at at, changed later (e and a last).
			updated[key] = at.Add(time.Duration((i+1)%len(keys)+1) * time.Second)
			if err := tx.InsertOperation(ctx, &store.Operation{Tenant: "t", Key: key, Action: "a", Destination: "crm",
				Version: 1, Fingerprint: "fp-" + key, State: "succeeded", Revision: 2,
				CreatedAt: at, StateSince: at, UpdatedAt: updated[key]}); err != nil {
				return err
			}
		}
		// Not final, and final but too recent: never listed.
		if err := tx.InsertOperation(ctx, &store.Operation{Tenant: "t", Key: "pending", Action: "a", Destination: "crm",
			Version: 1, Fingerprint: "fp", State: "pending", Revision: 1, CreatedAt: at, StateSince: at, UpdatedAt: at}); err != nil {
			return err
		}
		return tx.InsertOperation(ctx, &store.Operation{Tenant: "t", Key: "recent", Action: "a", Destination: "crm",
			Version: 1, Fingerprint: "fp", State: "failed", Revision: 1, CreatedAt: at, StateSince: at, UpdatedAt: at.Add(time.Hour)})
	}))
	var listed []string
	var after store.FinalRow
	for page := 0; ; page++ {
		require.Less(t, page, len(keys), "the pages must end: listed %v", listed)
		var rows []store.FinalRow
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			var err error
			rows, err = r.FinalBefore(ctx, store.FinalParams{Before: at.Add(time.Minute), After: after, Limit: 2})
			return err
		}))
		for _, row := range rows {
			require.True(t, row.UpdatedAt.Equal(updated[row.Key]), "%s: the row must carry updated_at %s; it carries %s", row.Key, updated[row.Key], row.UpdatedAt)
			listed = append(listed, row.Key)
		}
		if len(rows) < 2 {
			break
		}
		after = rows[len(rows)-1]
	}
	require.Equal(t, []string{"e", "a", "b", "c", "d"}, listed, "each once, by updated_at")
}

package pgstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestWriteBatchIsHeldUntilNextStatementOrCommit checks the pipelined
// writes: they are visible to the transaction's next statement, a lost
// revision check fails the whole transaction with store.ErrConflict even
// though it is only discovered with COMMIT, and an attempt update that
// finds no row fails with store.ErrNotFound, committing nothing.
func TestWriteBatchIsHeldUntilNextStatementOrCommit(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	var op *store.Operation
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		op = &store.Operation{Tenant: "t", Key: "k", Action: "a", Destination: "d", Version: 1, Fingerprint: "f",
			State: "pending", Revision: 1, CreatedAt: now, UpdatedAt: now}
		e := &store.TimelineEntry{Tenant: "t", Key: "k", At: now, Actor: "w", Event: "recorded", ToState: "pending"}
		if err := store.WriteAll(ctx, tx, []store.Write{{InsertOperation: op}, {AppendTimeline: e}}); err != nil {
			return err
		}
		got, err := tx.GetOperation(ctx, "t", "k") // sends the held writes first
		require.NoError(t, err)
		require.Equal(t, "pending", got.State)
		require.NotZero(t, e.ID, "timeline id set once sent")
		return nil
	}))

	attempt := &store.Attempt{ID: "A1", Tenant: "t", Key: "k", Number: 1, FencingToken: 1, Worker: "w",
		ClaimedAt: op.CreatedAt, LeaseExpiresAt: op.CreatedAt}
	stale := *op
	stale.State, stale.Revision = "in_progress", 8
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return store.WriteAll(ctx, tx, []store.Write{{InsertAttempt: attempt}, {UpdateOperation: &stale, PrevRevision: 7},
			{AppendTimeline: &store.TimelineEntry{Tenant: "t", Key: "k", Actor: "w", Event: "claimed"}}})
	})
	require.ErrorIs(t, err, store.ErrConflict)

	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return store.WriteAll(ctx, tx, []store.Write{{InsertAttempt: attempt}, {UpdateAttempt: &store.Attempt{ID: "missing"}}})
	})
	require.ErrorIs(t, err, store.ErrNotFound)

	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		got, err := r.GetOperation(ctx, "t", "k")
		require.NoError(t, err)
		require.EqualValues(t, 1, got.Revision, "the failed transactions changed nothing")
		attempts, err := r.ListAttempts(ctx, "t", "k")
		require.NoError(t, err)
		require.Empty(t, attempts, "the attempt written before the failed check was not committed")
		tl, err := r.ListTimeline(ctx, "t", "k")
		require.NoError(t, err)
		require.Len(t, tl, 1)
		return nil
	}))

	// The revision check passes with the right previous revision; the
	// timeline entries of one transition keep their order.
	next := *op
	next.State, next.Revision = "in_progress", 2
	var entries []*store.TimelineEntry
	ws := []store.Write{{InsertAttempt: attempt}, {UpdateOperation: &next, PrevRevision: 1}}
	for _, ev := range []string{"first", "second", "third"} {
		e := &store.TimelineEntry{Tenant: "t", Key: "k", At: op.CreatedAt, Actor: "w", Event: ev}
		entries = append(entries, e)
		ws = append(ws, store.Write{AppendTimeline: e})
	}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return store.WriteAll(ctx, tx, ws)
	}))
	require.Less(t, entries[0].ID, entries[1].ID)
	require.Less(t, entries[1].ID, entries[2].ID)
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		got, err := r.GetOperation(ctx, "t", "k")
		require.NoError(t, err)
		require.Equal(t, "in_progress", got.State)
		attempts, err := r.ListAttempts(ctx, "t", "k")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		tl, err := r.ListTimeline(ctx, "t", "k")
		require.NoError(t, err)
		require.Len(t, tl, 4)
		for i, ev := range []string{"recorded", "first", "second", "third"} {
			require.Equal(t, ev, tl[i].Event)
			if i > 0 {
				require.Equal(t, entries[i-1].ID, tl[i].ID)
			}
		}
		return nil
	}))
}

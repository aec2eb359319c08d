package storecheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// LastTimelineEntry checks store.Reader.LastTimelineEntry on s, a
// migrated, empty store: it returns the entry ListTimeline lists last,
// every field as ListTimeline reads it, in the transaction that appended
// it and after, and ErrNotFound for an operation without entries,
// another tenant's key and a key never recorded.
func LastTimelineEntry(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	insert := func(ctx context.Context, tx store.Tx, tenant, key string) error {
		return tx.InsertOperation(ctx, &store.Operation{Tenant: tenant, Key: key, Action: "a", Destination: "crm",
			Version: 1, Fingerprint: "fp", State: "uncertain", Revision: 1, CreatedAt: at, UpdatedAt: at})
	}
	entries := []store.TimelineEntry{
		{Event: "recorded", ToState: "pending", Actor: "w1"},
		{Event: "claimed", FromState: "pending", ToState: "in_progress", Actor: "w1", AttemptID: "a1"},
		{Event: "reconcile deferred", Actor: "reconciler (token t1)", Evidence: "next check at x; lookup failed"},
	}
	last := func(r store.Reader, tenant, key string) (*store.TimelineEntry, error) {
		return r.LastTimelineEntry(ctx, tenant, key)
	}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, k := range [][2]string{{"t", "op"}, {"t", "bare"}, {"u", "other"}} {
			if err := insert(ctx, tx, k[0], k[1]); err != nil {
				return err
			}
		}
		for i, e := range entries {
			e.Tenant, e.Key, e.At = "t", "op", at.Add(time.Duration(i)*time.Second)
			if err := tx.AppendTimeline(ctx, &e); err != nil {
				return err
			}
			got, err := last(tx, "t", "op")
			require.NoError(t, err)
			require.Equal(t, e.Event, got.Event, "the entry this transaction appended last")
		}
		return tx.AppendTimeline(ctx, &store.TimelineEntry{Tenant: "u", Key: "other", At: at.Add(time.Minute), Event: "recorded", ToState: "pending"})
	}))
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		all, err := r.ListTimeline(ctx, "t", "op")
		require.NoError(t, err)
		require.Len(t, all, len(entries))
		got, err := last(r, "t", "op")
		require.NoError(t, err)
		require.Equal(t, all[len(all)-1], got, "as ListTimeline lists it last")
		require.Equal(t, "reconciler (token t1)", got.Actor)
		require.Equal(t, "next check at x; lookup failed", got.Evidence)
		require.True(t, at.Add(2*time.Second).Equal(got.At))

		for _, k := range [][2]string{{"t", "bare"}, {"t", "other"}, {"u", "op"}, {"t", "never"}} {
			_, err := last(r, k[0], k[1])
			require.ErrorIs(t, err, store.ErrNotFound, "%s/%s", k[0], k[1])
		}
		return nil
	}))
}

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

// CountTimeline checks store.Reader.CountTimeline on s, a migrated,
// empty store: it counts the entries of the event whose reason (the
// evidence after its first "; ") starts with the text, after the
// operation's newest entry into the state (all of them when it has none),
// in the transaction that appended them and after; the text is matched as
// it is (no pattern), at the reason's start only (the phrase further on,
// or in an evidence without "; ", does not count), and the entries of
// other operations, tenants and events never count.
func CountTimeline(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	const deferred, failed = "reconcile deferred", "lookup failed: "
	entries := []store.TimelineEntry{
		{Event: "recorded", ToState: "pending"},
		{Event: "claimed", FromState: "pending", ToState: "in_progress"},
		{Event: "reported", FromState: "in_progress", ToState: "uncertain"},
		{Event: deferred, Evidence: "next check at x; " + failed + "503"},
		{Event: deferred, Evidence: "next check at x; destination not configured"},
		{Event: "lookup proved absence", FromState: "uncertain", ToState: "pending", Evidence: failed + "not a deferral"},
		{Event: "claimed", FromState: "pending", ToState: "in_progress"},
		{Event: "reported", FromState: "in_progress", ToState: "uncertain"},
		{Event: deferred, Evidence: "next check at x; " + failed + "timeout"},
		{Event: "lookup empty within visibility delay", Evidence: failed + "another event"},
		{Event: deferred, Evidence: "next check at x; nothing found, its log says " + failed + "index rebuilding"},
		{Event: deferred, Evidence: "next check at x; nothing found; " + failed + "a later reason"},
		{Event: deferred, Evidence: failed + "no next check before it"},
		{Event: deferred, Evidence: "next check at x; " + failed + "50% of _ done"},
	}
	count := func(r store.Reader, tenant, key, reason string) int {
		t.Helper()
		n, err := r.CountTimeline(ctx, store.TimelineCount{Tenant: tenant, Key: key, SinceState: "uncertain", Event: deferred, ReasonPrefix: reason})
		require.NoError(t, err)
		return n
	}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, k := range [][2]string{{"t", "op"}, {"t", "bare"}, {"t", "never"}, {"u", "op"}} {
			if err := tx.InsertOperation(ctx, &store.Operation{Tenant: k[0], Key: k[1], Action: "a", Destination: "crm",
				Version: 1, Fingerprint: "fp", State: "uncertain", Revision: 1, CreatedAt: at, UpdatedAt: at}); err != nil {
				return err
			}
		}
		want := []int{0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 2}
		for i, e := range entries {
			e.Tenant, e.Key, e.At = "t", "op", at.Add(time.Duration(i)*time.Second)
			if err := tx.AppendTimeline(ctx, &e); err != nil {
				return err
			}
			require.Equal(t, want[i], count(tx, "t", "op", failed), "in the transaction, after entry %d (%s)", i, e.Event)
		}
		// Another tenant's operation of the same key, and one never
		// uncertain: all of its entries count.
		for i, ev := range []string{"next check at x; " + failed + "1", "next check at x; " + failed + "2", "next check at x; " + failed + "3"} {
			if err := tx.AppendTimeline(ctx, &store.TimelineEntry{Tenant: "u", Key: "op", At: at.Add(time.Duration(i) * time.Second),
				Event: deferred, Evidence: ev}); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		require.Equal(t, 2, count(r, "t", "op", failed), "this spell's failures, not the earlier spell's")
		require.Equal(t, 5, count(r, "t", "op", ""), "every deferral of this spell")
		require.Equal(t, 1, count(r, "t", "op", failed+"50% of _"), "the text as it is")
		require.Equal(t, 0, count(r, "t", "op", failed+"50%_of"), "no pattern")
		require.Equal(t, 0, count(r, "t", "op", "50% of _"), "at the start of the reason only")
		require.Equal(t, 1, count(r, "t", "op", "nothing found, its log"), "the reason starts after the first \"; \"")
		require.Equal(t, 0, count(r, "t", "op", "LOOKUP FAILED"), "byte for byte")
		require.Equal(t, 3, count(r, "u", "op", failed), "no entry into the state: all of them")
		for _, k := range [][2]string{{"t", "bare"}, {"t", "never"}, {"t", "gone"}, {"v", "op"}} {
			require.Zero(t, count(r, k[0], k[1], failed), "%s/%s", k[0], k[1])
		}
		return nil
	}))
}

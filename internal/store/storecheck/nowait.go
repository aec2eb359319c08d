package storecheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// GetOperationNoWait checks GetOperationNoWait on s, a migrated, empty
// store. It reads as GetOperation does: store.ErrNotFound for a key with
// no operation (a tombstone's too), and a stored row, which the
// transaction can then update. hold, when not nil, takes the lock of an
// operation's row from a connection of its own and returns its release
// (a store whose transactions lock rows, PostgreSQL): a row held so fails
// with store.ErrConflict at once, and the operation is unchanged.
func GetOperationNoWait(t *testing.T, s store.Store, hold func(tenant, key string) (release func())) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	op := &store.Operation{Tenant: "t", Key: "op", Action: "a", Destination: "crm",
		Version: 1, Fingerprint: "fp", State: "pending", Revision: 1, CreatedAt: at, UpdatedAt: at}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.GetOperationNoWait(ctx, "t", "op")
		require.ErrorIs(t, err, store.ErrNotFound, "no operation")
		if err := tx.UpsertTombstone(ctx, &store.Tombstone{Tenant: "t", Key: "gone", Fingerprint: "fp", State: "succeeded",
			CreatedAt: at, FinishedAt: at, CompactedAt: at}); err != nil {
			return err
		}
		_, err = tx.GetOperationNoWait(ctx, "t", "gone")
		require.ErrorIs(t, err, store.ErrNotFound, "a tombstone is no operation")
		if err := tx.InsertOperation(ctx, op); err != nil {
			return err
		}
		got, err := tx.GetOperationNoWait(ctx, "t", "op")
		require.NoError(t, err, "written earlier in the transaction (a store that holds writes back sends them first)")
		require.Equal(t, "fp", got.Fingerprint)
		return nil
	}))
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		got, err := tx.GetOperationNoWait(ctx, "t", "op")
		require.NoError(t, err)
		require.Equal(t, "fp", got.Fingerprint)
		_, err = tx.GetOperationNoWait(ctx, "u", "op")
		require.ErrorIs(t, err, store.ErrNotFound, "another tenant's key")
		got.Owner, got.Revision = "ops", 2
		return tx.UpdateOperation(ctx, got, 1)
	}))
	if hold == nil {
		return
	}
	release := hold("t", "op")
	// Bounded only so that a store that waits fails the check rather
	// than hang it: the row is released after the transaction.
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := s.Update(waitCtx, func(ctx context.Context, tx store.Tx) error {
		_, err := tx.GetOperationNoWait(ctx, "t", "op")
		return err
	})
	release()
	require.ErrorIs(t, err, store.ErrConflict, "a row another transaction holds")
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		got, err := r.GetOperation(ctx, "t", "op")
		require.NoError(t, err)
		require.Equal(t, "ops", got.Owner)
		require.Equal(t, int64(2), got.Revision)
		return nil
	}))
}

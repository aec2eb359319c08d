package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// TestLockTimeoutIsBusy: with a lock_timeout in the DSN, a write that
// waits longer for a row lock another session holds fails with
// store.ErrBusy and writes nothing, while a shared transaction meeting its
// own groupLockTimeout (shorter than the DSN's here) still reports
// store.ErrConflict, so that its caller decides again.
func TestLockTimeoutIsBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t) + "&lock_timeout=1s"
	s, err := Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, s.WriteConditional(ctx, request("k", "first", 0).decide))

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var one int
	require.NoError(t, tx.QueryRow(ctx, `SELECT 1 FROM operations WHERE tenant = 't' AND key = 'k' FOR UPDATE`).Scan(&one))

	err = s.WriteConditional(ctx, request("k", "second", 1).decide)
	require.ErrorIs(t, err, store.ErrConflict, "groupLockTimeout")
	require.NotErrorIs(t, err, store.ErrBusy)

	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		op, err := tx.GetOperation(ctx, "t", "k")
		if err != nil {
			return err
		}
		prev := op.Revision
		op.Revision++
		op.UpdatedAt = time.Now()
		return tx.UpdateOperation(ctx, op, prev)
	})
	require.ErrorIs(t, err, store.ErrBusy)
	require.NotErrorIs(t, err, store.ErrConflict)
	require.ErrorContains(t, err, "SQLSTATE 55P03")
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		op, err := r.GetOperation(ctx, "t", "k")
		require.NoError(t, err)
		require.Equal(t, int64(1), op.Revision, "nothing written")
		return nil
	}))
}

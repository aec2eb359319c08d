package pgstore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// TestConnectionLostBeforeCommit: a pooled connection that the server's
// going away killed is handed out once more (the pool checks only those
// idle for over a second). A read on it, or a transaction that loses it
// before its COMMIT is sent, recorded nothing and is store.ErrUnavailable,
// as when no connection can be made (the API's 503, not a 500); a
// transaction that loses it in the COMMIT's round trip may have committed,
// and is not.
func TestConnectionLostBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := testdb.PostgresDSN(t)
	check, err := Open(ctx, direct)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, check.Close()) })
	require.NoError(t, check.Migrate(ctx, nil))
	require.NoError(t, writeInTime(ctx, check, request("k", "first", 0).decide))
	revision := func() int64 {
		t.Helper()
		var rev int64
		require.NoError(t, check.View(ctx, func(ctx context.Context, r store.Reader) error {
			op, err := r.GetOperation(ctx, "t", "k")
			if err == nil {
				rev = op.Revision
			}
			return err
		}))
		return rev
	}
	// relayed opens a store through a relay, with one connection that has
	// been used once, and the relay's cut.
	relayed := func(t *testing.T) (*Store, func()) {
		dsn, cut := testdb.UnreachablePostgres(t, direct+"&pool_max_conns=1", "relay-pw")
		s, err := Open(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		require.Equal(t, int32(1), s.pool.Stat().TotalConns())
		return s, cut
	}
	bump := func(ctx context.Context, tx store.Tx) (*store.Operation, error) {
		op, err := tx.GetOperation(ctx, "t", "k")
		if err != nil {
			return nil, err
		}
		prev := op.Revision
		op.Revision++
		return op, tx.UpdateOperation(ctx, op, prev)
	}

	t.Run("Read", func(t *testing.T) {
		s, cut := relayed(t)
		cut()
		err := s.View(ctx, func(ctx context.Context, r store.Reader) error {
			_, err := r.GetOperation(ctx, "t", "k")
			return err
		})
		require.ErrorIs(t, err, store.ErrUnavailable)
	})
	t.Run("InTransaction", func(t *testing.T) {
		s, cut := relayed(t)
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := bump(ctx, tx); err != nil {
				return err
			}
			cut()
			_, err := tx.GetOperation(ctx, "t", "other") // sends the update, then reads
			return err
		})
		require.ErrorIs(t, err, store.ErrUnavailable)
		require.Equal(t, int64(1), revision(), "nothing recorded")
	})
	t.Run("AtCommit", func(t *testing.T) {
		s, cut := relayed(t)
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := bump(ctx, tx) // goes out with COMMIT
			cut()
			return err
		})
		require.ErrorContains(t, err, "commit: ")
		require.NotErrorIs(t, err, store.ErrUnavailable, "it may have committed")
	})
}

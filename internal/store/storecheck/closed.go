package storecheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// ClosedInFlight checks that a read of s, a migrated store, that is
// running when s is closed fails with store.ErrClosed, as a call after
// Close does, rather than with the driver's own words for a closed
// connection: a caller that stops on ErrClosed stops on it too.
func ClosedInFlight(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	err := s.View(ctx, func(ctx context.Context, r store.Reader) error {
		require.NoError(t, s.Close())
		_, err := r.GetOperation(ctx, "t", "op")
		return err
	})
	require.ErrorIs(t, err, store.ErrClosed)
}

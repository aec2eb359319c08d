package reconciler_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/reconciler"
)

// TestBatchSizeBounded: a pass takes its batch with
// opledger.Ledger.ReconcileQueue, whose Limit is at most
// opledger.MaxListLimit. A BatchSize above it is refused by New, with an
// error matching opledger.ErrInvalidInput, rather than failing every pass
// of a reconciler that then settles nothing; the most is taken.
func TestBatchSizeBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	set, err := destination.NewSet(&panickyLookup{})
	require.NoError(t, err)
	_, err = reconciler.New(l, reconciler.Config{Destinations: set, BatchSize: opledger.MaxListLimit + 1})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.EqualError(t, err, "reconciler: invalid input: BatchSize is 501: it must be at most 500 (opledger.MaxListLimit)")
	r, err := reconciler.New(l, reconciler.Config{Destinations: set, BatchSize: opledger.MaxListLimit})
	require.NoError(t, err)
	_, err = r.RunOnce(ctx)
	require.NoError(t, err, "a pass of the most takes its batch")
}

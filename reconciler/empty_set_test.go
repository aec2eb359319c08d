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

// TestEmptyDestinationSetRefused: a reconciler takes only its
// destinations' uncertain operations, leaving the others to whoever
// reconciles them. With an empty set its queue asked for no destination
// in particular, which the ledger reads as any: it took every uncertain
// operation in the store, of destinations another process reconciles,
// and put each off by UnknownRecheck with a timeline note, pass after
// pass. An empty set is refused, as a nil one is.
func TestEmptyDestinationSetRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	empty, err := destination.NewSet()
	require.NoError(t, err)
	_, err = reconciler.New(l, reconciler.Config{Destinations: empty})
	require.EqualError(t, err, "reconciler: no destinations configured: the set is empty, and a reconciler takes only its own destinations' operations")
}

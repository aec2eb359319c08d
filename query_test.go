package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestHistoryOfUnknownKey: Attempts and Timeline of a key the ledger does
// not hold (a typo, another tenant's) fail with ErrNotFound, as Get does,
// instead of looking like an operation without history; an operation not
// yet claimed has no attempts and no error.
func TestHistoryOfUnknownKey(t *testing.T) {
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			_, _, err = l.Record(ctx, opledger.Intent{Key: "k:1", Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)

			attempts, err := l.Attempts(ctx, "k:1")
			require.NoError(t, err)
			require.Empty(t, attempts, "recorded, never claimed")
			timeline, err := l.Timeline(ctx, "k:1")
			require.NoError(t, err)
			require.NotEmpty(t, timeline)

			acme, err := l.WithTenant("acme")
			require.NoError(t, err)
			for name, ledger := range map[string]*opledger.Ledger{"a typo": l, "another tenant's": acme} {
				key := "k:1"
				if ledger == l {
					key = "k:2"
				}
				_, err = ledger.Attempts(ctx, key)
				require.ErrorIs(t, err, opledger.ErrNotFound, name)
				_, err = ledger.Timeline(ctx, key)
				require.ErrorIs(t, err, opledger.ErrNotFound, name)
			}
		})
	}
}

// TestWrongTokenSaysSo: a dispatch with a token the attempt was never
// issued says that, not that the attempt no longer holds the operation
// (it does).
func TestWrongTokenSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	c, err := l.Claim(ctx, "k:1", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "k:1", Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "k:1", c.AttemptID, c.FencingToken+7)
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
	require.ErrorContains(t, err, "is not attempt "+c.AttemptID+"'s (it was issued token")
	require.NotContains(t, err.Error(), "no longer holds")
	op, err := l.Dispatch(ctx, "k:1", c.AttemptID, c.FencingToken)
	require.NoError(t, err, "the claim still holds")
	require.True(t, op.Dispatched)
}

package opledger_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestLeaseBounded: a lease longer than MaxLease, as an option, for one
// claim or as an extension, is refused: it would keep a dead worker's
// operation in_progress, out of reach of ExpireLeases, for as long.
func TestLeaseBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
	_, err := opledger.Open(ctx, dsn, opledger.Options{Lease: opledger.MaxLease + time.Second})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "Options.Lease is 168h0m1s: it must be at most 168h0m0s (MaxLease)")
	l, err := opledger.Open(ctx, dsn, opledger.Options{Lease: opledger.MaxLease})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	const key = "intake:L1:create"
	_, _, err = l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":1}`)})
	require.NoError(t, err)
	_, err = l.Claim(ctx, key, opledger.ClaimOptions{Lease: 1 << 62})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "it must be at most 168h0m0s (MaxLease)")
	op, err := l.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State, "refused: not claimed")
	c, err := l.Claim(ctx, key, opledger.ClaimOptions{Lease: time.Minute})
	require.NoError(t, err)
	_, err = l.ExtendLease(ctx, key, c.AttemptID, c.FencingToken, opledger.MaxLease+time.Second)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	op, err = l.ExtendLease(ctx, key, c.AttemptID, c.FencingToken, opledger.MaxLease)
	require.NoError(t, err)
	require.True(t, op.LeaseExpiresAt.After(c.LeaseExpiresAt))
}

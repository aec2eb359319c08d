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

// TestPageLimitChecked: a negative Limit is refused like one above the
// most, never taken for the default; 0 is the default. ReconcileQueue's
// Limit is bounded by MaxListLimit too, as a list's page is: without a
// bound, one call read and decoded every uncertain operation of the store
// in one read transaction.
func TestPageLimitChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	for _, limit := range []int{-1, opledger.MaxListLimit + 1} {
		_, err = l.List(ctx, opledger.ListOptions{Limit: limit})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "List %d", limit)
		require.ErrorContains(t, err, "it must be from 1 to 500 (0 means 50)")
		_, err = l.ListEvents(ctx, opledger.EventListOptions{Limit: limit})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "ListEvents %d", limit)
	}
	_, err = l.ListWorkflows(ctx, opledger.WorkflowListOptions{Limit: -1})
	require.ErrorContains(t, err, "it must be from 1 to 200 (0 means 50)")
	for _, limit := range []int{-1, opledger.MaxListLimit + 1} {
		_, err = l.ReconcileQueue(ctx, opledger.ReconcileQueueOptions{Limit: limit})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "ReconcileQueue %d", limit)
		require.ErrorContains(t, err, "it must be from 1 to 500 (0 means 100)")
	}
	_, err = l.ReconcileQueue(ctx, opledger.ReconcileQueueOptions{Limit: opledger.MaxListLimit})
	require.NoError(t, err, "the most is a limit too")
	_, err = l.List(ctx, opledger.ListOptions{})
	require.NoError(t, err, "0 is the default")
}

package opledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestGroupDecisionAfterLockWait: on PostgreSQL a transition decided in
// a shared transaction (group commit) is decided at the clock read when
// the transaction began. A statement that then waits for a row lock
// longer than the lease had left must not write that old decision: a
// dispatch mark whose lease ran out while it waited is refused, as the
// ordinary path refuses it, and the worker does not call.
func TestGroupDecisionAfterLockWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Worker: "w1", Lease: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	const key = "crm:locked"
	in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm"}
	c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in}) // kept: the dispatch goes through the group writer
	require.NoError(t, err)

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close(ctx) })
	_, err = holder.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SELECT 1 FROM operations WHERE key = $1 FOR UPDATE`, key) // changes nothing
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := l.Dispatch(ctx, key, c.AttemptID, c.FencingToken)
		done <- err
	}()
	testdb.WaitBlockedBy(t, holder, "the dispatch mark")
	// Until the lease has ended on the database's clock.
	_, err = holder.Exec(ctx, `SELECT pg_sleep(GREATEST(0, EXTRACT(EPOCH FROM $1::timestamptz - clock_timestamp())) + 0.05)`, c.LeaseExpiresAt)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `COMMIT`)
	require.NoError(t, err)

	err = <-done
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "a dispatch mark written after its lease ran out")
	op, err := l.Get(ctx, key)
	require.NoError(t, err)
	require.False(t, op.Dispatched)
	require.Equal(t, opledger.StatePending, op.State, "its lease is settled: nothing was sent")
}

package executor_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestClaimBoundedOnHungStore: a worker's claim (ClaimNext) had no
// deadline of its own. On PostgreSQL, with the operations table locked
// by another session (a LOCK TABLE of an operator's migration or
// maintenance; the DSN sets no lock_timeout), the worker waited for it
// for ever, holding no claim and logging nothing, and Stop waited for
// it until its deadline and 5 s more. The claim is now bounded by the
// lease (a claim answered past it would be expired already): the step
// returns while the lock is still held, with a store_busy error, and a
// running worker logs it by the outage rule (WARN "store unavailable,
// backing off", problem=store_busy) and backs off, as for any store
// that cannot take its claims.
func TestClaimBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, _, s, sink, ex := hungStoreExecutor(t, "store unavailable, backing off")

	_, unlock := testdb.HoldTableLock(t, dsn, "operations")
	defer unlock()

	stepped := runOnceAside(ctx, ex)
	var err error
	select {
	case res := <-stepped:
		err = res.err
	case <-time.After(time.Minute):
		// A failure guard only: with the bound the step returns within
		// a lease, without it never.
		t.Fatal("the claim still waits for the table lock")
	}
	require.ErrorContains(t, err, "claim next")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, opledger.ErrStoreBusy, "a store_busy problem, by the outage rule")

	// A running worker says so by the outage rule, and Stop does not wait
	// for its claim past the lease: the lock is still held throughout.
	ex.SetPause(func(stop context.Context, _ time.Duration) { <-stop.Done() })
	require.NoError(t, ex.Start(ctx))
	rec := sink.Waited(t)
	require.Equal(t, slog.LevelWarn, rec.Level)
	require.Equal(t, "store_busy", testrig.Attr(t, rec, "problem").String())
	require.NoError(t, ex.Stop(ctx))
	unlock()
	require.Zero(t, s.n.Load(), "nothing was claimed, nothing sent")
}

package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// hungStoreExecutor is what the tests of a hung store share: a ledger on
// a fresh PostgreSQL schema (at dsn), the slow destination, and an
// executor of one worker with a 1 s lease and a 500 ms call timeout,
// without the lease sweep, whose log goes to sink (which waits for
// message: testrig.NewRecordSink).
func hungStoreExecutor(t *testing.T, message string) (dsn string, l *opledger.Ledger, s *slow, sink *testrig.RecordSink, ex *executor.Executor) {
	t.Helper()
	dsn = testdb.PostgresDSN(t)
	l, err := opledger.Open(context.Background(), dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	s = newSlow()
	set, err := destination.NewSet(s)
	require.NoError(t, err)
	sink = testrig.NewRecordSink(message)
	ex, err = executor.New(l, executor.Config{Destinations: set, Workers: 1, Lease: time.Second,
		CallTimeout: 500 * time.Millisecond, SweepInterval: -1, Logger: slog.New(sink)})
	require.NoError(t, err)
	return dsn, l, s, sink, ex
}

// TestDispatchBoundedOnHungStore: the dispatch mark, the release or
// report that settles a claim whose mark failed, and the release of a
// claim given back before dispatch had no deadline of their own. On
// PostgreSQL, with the operation's row locked by another session (a
// client's long transaction; the DSN sets no lock_timeout), the worker
// waited for them for ever, holding the claim: no worker to spare, and
// an executor that stopped only when Stop gave up on the store. The mark
// is now bounded by the claim's lease, the rest by a lease each: past
// it, another worker may claim the operation anyway. The step returns
// while the lock is still held, with nothing sent (the claim is left to
// its lease).
func TestDispatchBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// stop says whether the step's context ends at its dispatch, so
		// that the claim is given back (release) rather than marked.
		stop bool
		want string
	}{
		{name: "mark", want: "dispatch attempt"},
		{name: "release", stop: true, want: "release attempt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn, l, s, _, ex := hungStoreExecutor(t, "")
			op, _, err := l.Record(ctx, opledger.Intent{Key: "hung:1", Action: "create", Destination: "slow", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)

			// Between the claim and its dispatch, another session takes
			// the operation's row lock.
			stepCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			atDispatch, locked := make(chan struct{}), make(chan struct{})
			ex.SetBeforeDispatch(func(context.Context) {
				close(atDispatch)
				<-locked
				if tc.stop {
					cancel()
				}
			})
			stepped := runOnceAside(stepCtx, ex)
			<-atDispatch
			unlock := testdb.HoldLock(t, dsn, op.Tenant, "hung:1")
			defer unlock()
			close(locked)

			select {
			case res := <-stepped:
				err = res.err
			case <-time.After(time.Minute):
				// A failure guard only: with the bounds the step returns
				// within two leases, without them never.
				t.Fatal("the step still waits for the row lock")
			}
			require.ErrorContains(t, err, tc.want)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotContains(t, err.Error(), "hung:1", "no operation key in the error")
			unlock()
			require.Zero(t, s.n.Load(), "nothing was sent")
			got, err := l.Get(ctx, "hung:1")
			require.NoError(t, err)
			require.False(t, got.Dispatched, "the mark did not land")
		})
	}
}

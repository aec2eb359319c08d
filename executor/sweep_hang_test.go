package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestSweepBoundedOnHungStore: the executor's own lease sweep
// (Config.SweepInterval) had no deadline. On PostgreSQL, with the
// operations table locked by another session (the DSN sets no
// lock_timeout), and on SQLite, with the file's lock held by another
// process past a long SQLiteBusyTimeout, a turn waited for the lock as
// long as it was held, and with it every later turn, logging nothing.
// A turn is now bounded by the sweep's interval (5 s at least), as
// Maintain's are: one given up is a store_busy failure, logged by the
// outage rule (WARN at the first), and once the lock is released the
// sweep settles the expired lease.
func TestSweepBoundedOnHungStore(t *testing.T) {
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			var offset atomic.Int64
			l, err := opledger.Open(ctx, dsn, opledger.Options{Lease: time.Minute,
				SQLiteBusyTimeout: time.Hour, // a write waits for the lock as long as it is held
				Clock:             func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			// Of a destination the executor does not call: its workers
			// leave it to the sweep.
			lost, err := l.Claim(ctx, "k:lost", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "k:lost", Action: "create",
				Destination: "crm", Payload: json.RawMessage(`{}`)}})
			require.NoError(t, err)
			offset.Add(int64(time.Hour)) // k:lost's lease is over

			release := testdb.HoldWrites(t, dsn)
			defer release()

			set, err := destination.NewSet(newSlow())
			require.NoError(t, err)
			var logs testrig.LogBuffer
			ex, err := executor.New(l, executor.Config{Destinations: set, Workers: 1, Lease: time.Second,
				SweepInterval: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			require.NoError(t, ex.Start(ctx))
			stopped := false
			defer func() {
				if !stopped {
					require.NoError(t, ex.Stop(ctx))
				}
			}()
			// A failure guard only: with the bound the turn ends within
			// its deadline, without it never while the lock is held.
			require.Eventually(t, func() bool {
				return strings.Contains(logs.String(), `level=WARN msg="expire leases" component=executor problem=store_busy failures=1 `)
			}, time.Minute, time.Millisecond, "the sweep still waits for the lock:\n%s", &logs)

			release()
			require.Eventually(t, func() bool {
				out := logs.String()
				return strings.Contains(out, `msg="settled expired leases" component=executor count=1`) &&
					strings.Contains(out, `msg="expire leases: store reachable again"`)
			}, time.Minute, time.Millisecond, "the sweep ran again once the lock was released:\n%s", &logs)
			stopped = true
			require.NoError(t, ex.Stop(ctx))

			op, err := l.Get(ctx, "k:lost")
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)
			attempts, err := l.Attempts(ctx, "k:lost")
			require.NoError(t, err)
			require.Equal(t, lost.AttemptID, attempts[0].ID)
			require.Equal(t, opledger.AttemptAbandoned, attempts[0].Outcome)
			require.NotContains(t, logs.String(), "level=ERROR")
		})
	}
}

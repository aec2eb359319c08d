package opledger_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestCompactConcurrently: two processes compacting one ledger at the same
// time (two Ledgers on one store) compact each finished operation once
// between them, and the running totals keep every attempt and confirmed
// effect exactly once. Compaction writes operations in batches, so the
// two runs meet on the same rows: on PostgreSQL each skips those the
// other holds, on SQLite they take turns at the writer, and a batch
// whose transaction fails anyway is compacted one operation at a time;
// neither run fails.
func TestCompactConcurrently(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			var offset atomic.Int64
			opts := opledger.Options{Retention: time.Hour,
				Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }}
			var ledgers [2]*opledger.Ledger
			for i := range ledgers {
				l, err := opledger.Open(ctx, dsn, opts)
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				ledgers[i] = l
			}
			const n = 600
			for i := range n {
				key := fmt.Sprintf("order:%03d", i)
				c, err := ledgers[i%2].Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{
					Key: key, Action: "create", Destination: fmt.Sprintf("crm%d", i%3)}})
				require.NoError(t, err)
				report := opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "ref:" + key}
				if i%4 == 0 {
					report = opledger.Report{Outcome: opledger.OutcomeRejected, Error: "refused"}
				}
				_, err = ledgers[i%2].Report(ctx, key, c.AttemptID, c.FencingToken, report)
				require.NoError(t, err)
			}
			before, err := ledgers[0].Stats(ctx, true)
			require.NoError(t, err)
			require.Equal(t, n, before.AttemptsTotal)

			offset.Store(int64(2 * time.Hour))
			var results [2]opledger.CompactResult
			var errs [2]error
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, l := range ledgers {
				wg.Go(func() {
					<-start
					results[i], errs[i] = l.Compact(ctx)
				})
			}
			close(start)
			wg.Wait()
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.Equal(t, n, results[0].Tombstoned+results[1].Tombstoned, "each operation compacted once")

			after, err := ledgers[1].Stats(ctx, true)
			require.NoError(t, err)
			for state, count := range after.OperationsByState {
				require.Zero(t, count, "%s operations left", state)
			}
			require.Equal(t, before.Attempts, after.Attempts, "attempts by destination and outcome")
			require.Equal(t, before.AttemptsTotal, after.AttemptsTotal)
			require.Equal(t, before.ConfirmedEffects, after.ConfirmedEffects)
			require.Equal(t, n-n/4, after.ConfirmedEffects)
			for _, key := range []string{"order:000", "order:001", fmt.Sprintf("order:%03d", n-1)} {
				op, err := ledgers[0].Get(ctx, key)
				require.NoError(t, err)
				require.True(t, op.Tombstoned, key)
			}
		})
	}
}

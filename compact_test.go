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

// TestCompactMasksASensitiveRef: a destination reference made of a
// sensitive value is shown masked while the operation is kept, and its
// tombstone keeps it masked, since the tombstone no longer has the
// sensitive fields that say what to mask: compaction never shows it in
// clear, and past retention the ledger no longer holds it. A reference
// with nothing sensitive in it, or only a short value inside it (more
// likely chance than the value), is kept as it was, for repeats.
func TestCompactMasksASensitiveRef(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var offset atomic.Int64
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Retention: time.Hour,
				Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			for key, ref := range map[string]string{"contact:1": "contact/ana@example.invalid", "contact:2": "C-2", "charge:3": "ch_3P1234abc"} {
				c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "create", Destination: "crm",
					Payload: []byte(`{"email":"ana@example.invalid","cvv":"123"}`), SensitiveFields: []string{"email", "cvv"}}})
				require.NoError(t, err)
				_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: ref})
				require.NoError(t, err)
			}
			op, err := l.Get(ctx, "contact:1")
			require.NoError(t, err)
			require.Equal(t, "contact/***", op.Masked().DestinationRef)

			offset.Store(int64(2 * time.Hour))
			res, err := l.Compact(ctx)
			require.NoError(t, err)
			require.Equal(t, 3, res.Tombstoned)
			op, err = l.Get(ctx, "contact:1")
			require.NoError(t, err)
			require.True(t, op.Tombstoned)
			require.Equal(t, "contact/***", op.DestinationRef, "kept masked")
			require.Equal(t, "contact/***", op.Masked().DestinationRef, "and shown masked")
			op, err = l.Get(ctx, "contact:2")
			require.NoError(t, err)
			require.Equal(t, "C-2", op.DestinationRef, "nothing sensitive in it: kept for repeats")
			op, err = l.Get(ctx, "charge:3")
			require.NoError(t, err)
			require.Equal(t, "ch_3P1234abc", op.DestinationRef, "a three-byte value inside it is kept: masking it would break the reference")
		})
	}
}

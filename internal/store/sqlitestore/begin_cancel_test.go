package sqlitestore

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestWriteCancelledAsItBeginsLeavesNoTransaction: the SQLite driver
// answers a statement with its context's error when the context ends as
// the statement completes, a BEGIN IMMEDIATE that did begin among them.
// The batch's BEGIN runs under its leader's context, and a failed BEGIN
// was not rolled back: the transaction it had opened stayed open on the
// writer connection, every later write of the store failed ("cannot
// start a transaction within a transaction") and SQLite's lock stayed
// held against every other process, until the process ended. (Seen as
// an abandoned call's outcome failing to record for two minutes after
// the executor cancelled a lease extension: executor's
// TestAbandonedCallKeepsItsClaim.) Writes whose contexts end at every
// moment around their BEGIN now leave the writer usable: the next write
// succeeds.
func TestWriteCancelledAsItBeginsLeavesNoTransaction(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	ctx := context.Background()
	noop := func(context.Context, store.Tx) error { return nil }
	for i := range 3000 {
		wctx, cancel := context.WithCancel(ctx)
		cancelled := make(chan struct{})
		go func() {
			defer close(cancelled)
			for range i % 64 { // a little later each time, around the BEGIN
				runtime.Gosched()
			}
			cancel()
		}()
		_ = s.Update(wctx, noop) // cancelled or not: either is right
		<-cancelled
		require.NoError(t, s.Update(ctx, noop), "the write after write %d, whose context ended as it began", i+1)
	}
}

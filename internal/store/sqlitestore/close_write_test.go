package sqlitestore

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestCloseWaitsForTheWriteUnderWay: Close that came while a group
// commit ran used to close the write statements and the write connection
// under it; a statement of the batch then ran on freed memory (a fault
// that killed the process, seen when a ledger closed while an abandoned
// call noted itself) or failed. Close now waits for the writer: the write
// under way commits, a write queued behind it gets ErrClosed without
// running, and Close returns after both.
func TestCloseWaitsForTheWriteUnderWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	entered, release := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		wrote <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			close(entered)
			<-release
			_, err := tx.(*sqlTx).q.ExecContext(ctx, `CREATE TABLE under_way (x)`)
			return err
		})
	}()
	<-entered // the writer is s's: the next write queues
	queued := make(chan error, 1)
	ran := false
	go func() {
		queued <- s.Update(ctx, func(context.Context, store.Tx) error { ran = true; return nil })
	}()
	waitQueued(t, s, 1)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.closed.Load() {
		runtime.Gosched()
	}
	select {
	case err := <-closed:
		close(release)
		t.Fatalf("Close returned (%v) while a write ran", err)
	default:
	}
	close(release)
	require.NoError(t, <-wrote, "the write under way commits")
	require.ErrorIs(t, <-queued, store.ErrClosed)
	require.False(t, ran, "the queued write did not run")
	require.NoError(t, <-closed)
	require.ErrorIs(t, s.Update(ctx, func(context.Context, store.Tx) error { return nil }), store.ErrClosed)
}

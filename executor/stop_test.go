package executor_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
)

// TestStopWhenTheStoreHangs: a worker blocked on a store that does not
// answer (another session holds a lock on the operations table) does not
// hold Stop past its deadline and the grace after it: Stop returns, with
// its context's error, while the lock is still held (it used to wait for
// the lock, however long).
func TestStopWhenTheStoreHangs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	set, err := destination.NewSet(answeringDest{})
	require.NoError(t, err)
	ex, err := executor.New(l, executor.Config{Destinations: set, Workers: 1, PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close(ctx) })
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE operations IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	require.NoError(t, ex.Start(ctx))

	testdb.WaitBlockedBy(t, holder, "the worker's claim")

	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- ex.Stop(stopCtx) }()
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// No call was running: the worker waited for the store.
		require.ErrorContains(t, err, "stop executor: at the deadline, writes to the store still waiting 5s later cut off")
		require.NotContains(t, err.Error(), "call in flight")
	case <-time.After(time.Minute):
		require.NoError(t, tx.Rollback(ctx))
		<-stopped
		t.Fatal("Stop waited for the lock to be released")
	}
	require.NoError(t, tx.Rollback(ctx), "the lock was still held when Stop returned")
}

package sqlitestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// TestKilledInsideWriteTransaction kills (SIGKILL) a process in the middle
// of a write transaction on a shared file, while it holds the file's
// write lock (ledger.db-writelock) and SQLite's, and has written a row
// it has not committed. Another process's write, already queued for the
// lock, is then made at once, not refused as busy: the kernel drops a
// killed process's flock (docs/scaling.md); and the dead transaction's row
// is not in the file, which is sound: nothing half written.
func TestKilledInsideWriteTransaction(t *testing.T) {
	skipWithoutFlock(t)
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(ctx, path, Options{BusyTimeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "before", "h-before") }))

	kill := testdb.StartInside(t, "TestKilledInsideWriteTransactionChild", "OPLEDGER_TX_KILL_PATH="+path)
	waitHeldOn(t, path+WriteLockSuffix)

	waitsBefore := s.WriteLockWaits().Waits
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "after", "h-after") })
	}()
	waitBlockedOn(t, path+WriteLockSuffix, 1) // queued behind the child

	kill()

	require.NoError(t, <-done, "the queued write is made once the killed process's lock is gone")
	require.Equal(t, waitsBefore+1, s.WriteLockWaits().Waits, "it waited in the queue")
	require.Zero(t, s.WriteLockWaits().TimedOut)
	ids := tokenIDs(t, s)
	require.True(t, ids["before"] && ids["after"], "%v", ids)
	require.False(t, ids["uncommitted"], "the killed transaction's row is not in the file")

	db, err := openRawDB(path)
	require.NoError(t, err)
	defer db.Close()
	var check string
	require.NoError(t, db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check))
	require.Equal(t, "ok", check)
}

// TestKilledInsideWriteTransactionChild writes a row inside a write
// transaction on the file TestKilledInsideWriteTransaction names, says
// so, and waits there until it is killed.
func TestKilledInsideWriteTransactionChild(t *testing.T) {
	path := os.Getenv("OPLEDGER_TX_KILL_PATH")
	if path == "" {
		t.Skip("run by TestKilledInsideWriteTransaction")
	}
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := insertToken(ctx, tx, "uncommitted", "h-uncommitted"); err != nil {
			return err
		}
		fmt.Println(testdb.InsideLine)
		_, _ = os.Stdin.Read(make([]byte, 1))
		return fmt.Errorf("the child was not killed")
	})
	t.Fatal(err)
}

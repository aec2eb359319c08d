package sqlitestore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
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

	child := exec.Command(os.Args[0], "-test.run=^TestKilledInsideWriteTransactionChild$", "-test.count=1")
	child.Env = append(os.Environ(), "OPLEDGER_TX_KILL_PATH="+path)
	stdin, err := child.StdinPipe() // the child blocks reading it until killed
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	sc := bufio.NewScanner(stdout)
	inside := false
	for sc.Scan() {
		if sc.Text() == "INSIDE" {
			inside = true
			break
		}
	}
	require.True(t, inside, "the child never reported its transaction")
	waitHeldOn(t, path+WriteLockSuffix)

	waitsBefore := s.WriteLockWaits().Waits
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "after", "h-after") })
	}()
	waitBlockedOn(t, path+WriteLockSuffix, 1) // queued behind the child

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	killed = true
	err = child.Wait()
	require.Error(t, err)
	ws := child.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child died of SIGKILL: %v", err)

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
		fmt.Println("INSIDE")
		_, _ = os.Stdin.Read(make([]byte, 1))
		return fmt.Errorf("the child was not killed")
	})
	t.Fatal(err)
}

package opledger_test

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWriteLockWaits: a SQLite ledger counts its writes that queued
// behind another process's (here a flock of the file's write lock file
// held by the test, as another process's store holds it), those that gave
// up, and how long they waited; PostgreSQL has no such lock.
func TestWriteLockWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	quick, err := opledger.Open(ctx, dsn, opledger.Options{SQLiteBusyTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { quick.Close() })
	patient, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { patient.Close() })
	w, ok := quick.WriteLockWaits()
	require.True(t, ok)
	require.Equal(t, opledger.WriteLockWaits{}, w, "Open's writes found the lock free")

	path, _ := sqlitestore.DSNPath(dsn)
	other, err := os.Open(path + sqlitestore.WriteLockSuffix)
	require.NoError(t, err, "made by Open's first write")
	defer other.Close()
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_EX))
	intent := func(key string) opledger.Intent {
		return opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}
	}
	_, _, err = quick.Record(ctx, intent("waits:gave-up"))
	require.ErrorIs(t, err, opledger.ErrStoreBusy)
	require.ErrorContains(t, err, sqlitestore.WriteLockSuffix+" for longer than the busy timeout, 200ms")
	w, _ = quick.WriteLockWaits()
	require.Equal(t, int64(1), w.Waits)
	require.Equal(t, int64(1), w.TimedOut)
	require.GreaterOrEqual(t, w.Waited, 200*time.Millisecond)

	done := make(chan error, 1)
	go func() {
		_, _, err := patient.Record(ctx, intent("waits:queued"))
		done <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if w, _ := patient.WriteLockWaits(); w.Waits == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the write did not queue")
		runtime.Gosched()
	}
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_UN))
	require.NoError(t, <-done)
	w, _ = patient.WriteLockWaits()
	require.Equal(t, int64(1), w.Waits)
	require.Zero(t, w.TimedOut)
	_, err = patient.Get(ctx, "waits:queued")
	require.NoError(t, err)
	_, err = patient.Get(ctx, "waits:gave-up")
	require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")
}

// TestWriteLockWaitsPostgres: PostgreSQL has no file write lock to count.
func TestWriteLockWaitsPostgres(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.PostgresDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	w, ok := l.WriteLockWaits()
	require.False(t, ok)
	require.Zero(t, w)
}

package sqlitestore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/opledger/opledger/internal/store"
)

// recoveringElsewhere leaves the ledger at path as while another process
// rebuilds its WAL index: the index's header is inconsistent (its two
// copies differ, as in the middle of a write of it that a crash cut
// short), and the recovery lock of the -shm file is held. Every read
// then waits out its busy timeout for that recovery and fails with
// SQLITE_BUSY_RECOVERY. The lock is an open file description lock, which
// SQLite's own POSIX locks in this process conflict with, as with
// another process's.
func recoveringElsewhere(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path+"-shm", os.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	const recoverLock = 120 + 2 // WALINDEX_LOCK_OFFSET + WAL_RECOVER_LOCK
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: recoverLock, Len: 1}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk))
	var change [4]byte // iChange, of the header's first copy
	_, err = f.ReadAt(change[:], 8)
	require.NoError(t, err)
	change[0]++
	_, err = f.WriteAt(change[:], 8)
	require.NoError(t, err)
}

// TestSchemaVersionWhileTheIndexIsRecoveredIsBusy: the schema version
// (which Ledger.Ping, and so GET /readyz, reads) waited past the busy
// timeout for another process's recovery of the WAL index says so as
// store.ErrBusy (the API's 503, not a 500), as every read and write does.
func TestSchemaVersionWhileTheIndexIsRecoveredIsBusy(t *testing.T) {
	ctx := context.Background()
	s, path := openBusyStore(t, 50*time.Millisecond)
	recoveringElsewhere(t, path)

	_, _, err := s.SchemaVersion(ctx)
	require.ErrorIs(t, err, store.ErrBusy)
	require.ErrorContains(t, err, "read schema version: database is locked", "SQLite's own words are kept")
}

package sqlitestore

import (
	"context"
	"database/sql"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// The tests below hold the file's lock (a writeLock of their own, as
// another opledger process would) and SQLite's lock (holdSQLiteLock, as a
// sqlite3 shell would), both from outside the store under test, and run
// one at a time: they measure waits.

// TestWriteWaitsOneBusyTimeoutInAll: a write that queued on the file's
// lock and then finds SQLite's lock held by a writer that does not queue
// waits for it only what is left of the busy timeout. It fails with
// store.ErrBusy, saying so, nothing written, about one busy timeout after
// it began, where it used to wait a second busy timeout in BEGIN.
func TestWriteWaitsOneBusyTimeoutInAll(t *testing.T) {
	skipWithoutFlock(t)
	ctx := context.Background()
	const busy = time.Second
	s, path := openBusyStore(t, busy)
	other := newWriteLock(path)
	t.Cleanup(func() { other.close() })
	mustLock(t, other)
	release := holdSQLiteLock(t, path)

	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "late", "h-late") })
	}()
	waitBlockedOn(t, path+WriteLockSuffix, 1)
	// The write queues (waitBlockedOn); holding the file's lock until
	// three quarters of the busy timeout have passed spends that much
	// of its budget. A timer, not a synchronisation.
	time.Sleep(time.Until(start.Add(busy * 3 / 4)))
	other.unlock()
	err := <-done
	elapsed := time.Since(start)
	release()

	// A bound on what the write waits, not on speed: 750 ms queued and
	// the 250 ms left for SQLite's lock. Before, it waited a whole busy
	// timeout again for SQLite's lock, 1.75 s or more in all; the bound
	// leaves half a second for a loaded machine.
	require.Less(t, elapsed, busy*3/2, "the write waited more than the busy timeout, in all")
	require.GreaterOrEqual(t, elapsed, busy-10*time.Millisecond, "the write gave up before its busy timeout")
	require.ErrorIs(t, err, store.ErrBusy)
	require.Regexp(t, `^`+regexp.QuoteMeta(store.ErrBusy.Error()+" (begin: another process held SQLite's lock on "+path+" for the ")+
		`\d+ms left of the busy timeout, 1s, after \d+ms queued on `+regexp.QuoteMeta(path+WriteLockSuffix+": database is locked"), err.Error())
	require.NotContains(t, tokenIDs(t, s), "late", "nothing written")
	requireBusyTimeout(t, s, busy)

	// With both locks free again, the same write goes through.
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "late", "h-late") }))
	require.Contains(t, tokenIDs(t, s), "late")
}

// TestWriteServedWithinTheBusyTimeoutLeft: a write that queued on the
// file's lock and then waits for SQLite's lock, held by a writer that does
// not queue, is made once that writer lets go within what is left of the
// busy timeout; the writer connection's busy timeout is whole again after.
func TestWriteServedWithinTheBusyTimeoutLeft(t *testing.T) {
	skipWithoutFlock(t)
	ctx := context.Background()
	const busy = 5 * time.Second
	s, path := openBusyStore(t, busy)
	other := newWriteLock(path)
	t.Cleanup(func() { other.close() })
	mustLock(t, other)
	release := holdSQLiteLock(t, path)

	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "served", "h-served") })
	}()
	waitBlockedOn(t, path+WriteLockSuffix, 1)
	// Timers, not synchronisations: the write queues (waitBlockedOn) for
	// 100 ms of its budget, then holds the file's lock (waitHeldOn) and
	// waits in BEGIN for SQLite's lock, which is let go 100 ms later.
	time.Sleep(time.Until(start.Add(100 * time.Millisecond)))
	other.unlock()
	waitHeldOn(t, path+WriteLockSuffix)
	time.Sleep(100 * time.Millisecond)
	release()
	require.NoError(t, <-done)
	require.Less(t, time.Since(start), busy, "served before the busy timeout ran out")
	require.Contains(t, tokenIDs(t, s), "served")
	requireBusyTimeout(t, s, busy)
}

// TestWriteRerunWithinTheBusyTimeoutLeft: a batch that queued on the
// file's lock and must run again (a conditional write broken after its
// operation's write, see TestConditionalWritesShareBatch) begins its
// second transaction within what is left of the busy timeout too, and
// every caller gets its own outcome.
func TestWriteRerunWithinTheBusyTimeoutLeft(t *testing.T) {
	skipWithoutFlock(t)
	ctx := context.Background()
	const busy = 5 * time.Second
	s, path := openBusyStore(t, busy)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	other := newWriteLock(path)
	t.Cleanup(func() { other.close() })
	mustLock(t, other)

	before := s.group.commits.Load()
	s.wlock <- struct{}{} // hold the writer: both callers share a batch
	var broken, token error
	var wg sync.WaitGroup
	wg.Go(func() {
		broken = s.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
			// A new key, but its attempt twice: fails after the
			// operation's insert.
			return []store.Write{{InsertOperation: condOp("broken", 1, at)},
				{InsertAttempt: condAttempt("broken", "broken/1", at)}, {InsertAttempt: condAttempt("broken", "broken/1", at)}}, nil
		})
	})
	wg.Go(func() {
		token = s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "rerun", "h-rerun") })
	})
	waitQueued(t, s, 2)
	start := time.Now()
	<-s.wlock
	waitBlockedOn(t, path+WriteLockSuffix, 1)
	// A timer, not a synchronisation: 50 ms of the budget spent queued.
	time.Sleep(time.Until(start.Add(50 * time.Millisecond)))
	other.unlock()
	wg.Wait()

	require.Equal(t, int64(2), s.group.commits.Load()-before, "the batch ran again, with savepoints")
	require.ErrorIs(t, broken, store.ErrConflict)
	require.NoError(t, token)
	require.Contains(t, tokenIDs(t, s), "rerun")
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t", "broken")
		require.ErrorIs(t, err, store.ErrNotFound, "nothing of the broken write")
		return nil
	}))
	requireBusyTimeout(t, s, busy)
}

// openBusyStore opens a migrated store with busy timeout busy on a new
// file, and returns it with the file's path.
func openBusyStore(t *testing.T, busy time.Duration) (*Store, string) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(ctx, path, Options{BusyTimeout: busy})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx, nil))
	requireBusyTimeout(t, s, busy)
	return s, path
}

// holdSQLiteLock takes SQLite's write lock on the file at path from a
// connection of its own, which does not queue on the file's lock, as a
// sqlite3 shell inside BEGIN IMMEDIATE would. release gives it back; it
// also runs at the end of the test.
func holdSQLiteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", FileURI(path))
	require.NoError(t, err)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
	require.NoError(t, err)
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, err := conn.ExecContext(ctx, `ROLLBACK`)
			require.NoError(t, err)
			require.NoError(t, conn.Close())
			require.NoError(t, db.Close())
		})
	}
	t.Cleanup(release)
	return release
}

// requireBusyTimeout checks the writer connection's busy_timeout. No write
// may be in flight.
func requireBusyTimeout(t *testing.T, s *Store, want time.Duration) {
	t.Helper()
	var ms int64
	require.NoError(t, s.wconn.QueryRowContext(context.Background(), `PRAGMA busy_timeout`).Scan(&ms))
	require.Equal(t, want, time.Duration(ms)*time.Millisecond, "the writer's busy_timeout")
}

package sqlitestore

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// Each writeLock below opens the lock file on its own, as another process
// would: flocks of two open files conflict within one process too.

func TestWriteLockExcludesOthers(t *testing.T) {
	skipWithoutFlock(t)
	db := filepath.Join(t.TempDir(), "ledger.db")
	a, b := newWriteLock(db), newWriteLock(db)
	t.Cleanup(func() { a.close(); b.close() })

	mustLock(t, a)
	_, err := b.lock(context.Background(), 10*time.Millisecond)
	require.ErrorAs(t, err, new(*queueTimeoutError))
	require.ErrorContains(t, err, "another process held "+db+WriteLockSuffix+" for longer than the busy timeout, 10ms")

	// b's flock call goes on after b gave up: once it has the lock it
	// must let go of it, or c would wait for it until its timeout.
	a.unlock()
	c := newWriteLock(db)
	t.Cleanup(func() { c.close() })
	mustLock(t, c)
	c.unlock()
}

// TestWriteLockAdoptsTheWaitItGaveUp: a writer that timed out and tries
// again waits on the flock call still in flight rather than start a
// second one, whose success on the same open file would mean nothing.
func TestWriteLockAdoptsTheWaitItGaveUp(t *testing.T) {
	skipWithoutFlock(t)
	db := filepath.Join(t.TempDir(), "ledger.db")
	a, b, c := newWriteLock(db), newWriteLock(db), newWriteLock(db)
	t.Cleanup(func() { a.close(); b.close(); c.close() })

	mustLock(t, a)
	_, err := b.lock(context.Background(), 10*time.Millisecond)
	require.ErrorAs(t, err, new(*queueTimeoutError))
	b.mu.Lock()
	first := b.waiting
	b.mu.Unlock()
	require.NotNil(t, first, "the flock call goes on while a holds the lock")

	got := make(chan error, 1)
	go func() {
		held, err := b.lock(context.Background(), time.Minute)
		if err == nil && !held {
			err = fmt.Errorf("not held")
		}
		got <- err
	}()
	// The second lock adopts the call: it is no longer abandoned.
	for deadline := time.Now().Add(30 * time.Second); ; runtime.Gosched() {
		b.mu.Lock()
		adopted := !first.abandoned
		require.Same(t, first, b.waiting, "b waits on the call it gave up, not on a new one")
		b.mu.Unlock()
		if adopted {
			break
		}
		require.True(t, time.Now().Before(deadline), "the second lock did not adopt the call in flight")
	}
	a.unlock()
	require.NoError(t, <-got)

	_, err = c.lock(context.Background(), 10*time.Millisecond)
	require.ErrorAs(t, err, new(*queueTimeoutError), "b holds the lock it adopted")
	b.unlock()
	mustLock(t, c)
}

// TestWriteLockClosedWhileWaiting: a store closed while its flock call
// waits leaves the lock to the others once that call returns.
func TestWriteLockClosedWhileWaiting(t *testing.T) {
	skipWithoutFlock(t)
	db := filepath.Join(t.TempDir(), "ledger.db")
	a, b, c := newWriteLock(db), newWriteLock(db), newWriteLock(db)
	t.Cleanup(func() { a.close(); c.close() })

	mustLock(t, a)
	_, err := b.lock(context.Background(), 10*time.Millisecond)
	require.ErrorAs(t, err, new(*queueTimeoutError))
	require.NoError(t, b.close())
	_, err = b.lock(context.Background(), time.Minute)
	require.ErrorContains(t, err, "closed")

	a.unlock()
	mustLock(t, c)
}

// TestWriteLockBesideTheLinkedFile: processes that reach the database
// through a symbolic link queue on the same lock file as those that name
// it, beside the database itself.
func TestWriteLockBesideTheLinkedFile(t *testing.T) {
	skipWithoutFlock(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "ledger.db")
	require.NoError(t, os.Mkdir(filepath.Dir(db), 0o755))
	require.NoError(t, os.WriteFile(db, nil, 0o600))
	require.NoError(t, os.Symlink(db, filepath.Join(dir, "link.db")))
	direct, linked := newWriteLock(db), newWriteLock(filepath.Join(dir, "link.db"))
	t.Cleanup(func() { direct.close(); linked.close() })

	mustLock(t, direct)
	_, err := linked.lock(context.Background(), 10*time.Millisecond)
	require.ErrorAs(t, err, new(*queueTimeoutError), "the same lock")
	direct.unlock()
	fi, err := os.Stat(db + WriteLockSuffix)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm(), "the database's permissions")
}

// TestWriteLockUnavailable: where the lock file can be neither made nor
// opened, writes go without it.
func TestWriteLockUnavailable(t *testing.T) {
	l := newWriteLock(filepath.Join(t.TempDir(), "missing", "ledger.db"))
	held, err := l.lock(context.Background(), time.Minute)
	require.NoError(t, err)
	require.False(t, held)
	require.NoError(t, l.close())
}

// TestWriteQueuesForTheFileLock: a write of a store whose file another
// process is writing waits in the kernel's queue for the write lock (not
// polling), is made as soon as the lock is released, and is refused with
// store.ErrBusy, nothing written, when it waits past the busy timeout.
func TestWriteQueuesForTheFileLock(t *testing.T) {
	skipWithoutFlock(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx, nil))
	require.FileExists(t, path+WriteLockSuffix, "made by the first write")

	other := newWriteLock(path)
	t.Cleanup(func() { other.close() })
	mustLock(t, other)
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "queued", "h-queued") })
	}()
	// other holds the lock; the one flock call waiting for it is s's. A
	// write that polled for SQLite's lock would show none.
	waitBlockedOn(t, path+WriteLockSuffix, 1)
	other.unlock()
	require.NoError(t, <-done)
	require.Contains(t, tokenIDs(t, s), "queued")

	mustLock(t, other)
	s.busy = 200 * time.Millisecond
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "late", "h-late") })
	require.ErrorIs(t, err, store.ErrBusy)
	require.Equal(t, store.ErrBusy.Error()+" (begin: another process held "+path+WriteLockSuffix+" for longer than the busy timeout, 200ms)", err.Error())
	other.unlock()
	require.NotContains(t, tokenIDs(t, s), "late")
}

// mustLock takes l's lock, which must be free or soon released.
func mustLock(t *testing.T, l *writeLock) {
	t.Helper()
	held, err := l.lock(context.Background(), time.Minute)
	require.NoError(t, err)
	require.True(t, held)
}

func skipWithoutFlock(t *testing.T) {
	t.Helper()
	if !lockFileSupported {
		t.Skip("no flock(2) on " + runtime.GOOS)
	}
}

// waitBlockedOn waits, with a deadline, until n flock calls wait for the
// lock of the file at path, as /proc/locks lists them ("->" lines).
func waitBlockedOn(t *testing.T, path string, n int) {
	t.Helper()
	waitFlocks(t, path, fmt.Sprintf("%d flock calls waiting", n), func(_, blocked int) bool { return blocked >= n })
}

// waitHeldOn waits, with a deadline, until an open file holds the lock of
// the file at path and no flock call waits for it.
func waitHeldOn(t *testing.T, path string) {
	t.Helper()
	waitFlocks(t, path, "the lock held and no flock call waiting", func(held, blocked int) bool { return held > 0 && blocked == 0 })
}

// waitFlocks waits, with a deadline, until done accepts the flocks that
// /proc/locks lists on the file at path: held, and blocked ("->" lines).
func waitFlocks(t *testing.T, path, want string, done func(held, blocked int) bool) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc/locks")
	}
	fi, err := os.Stat(path)
	require.NoError(t, err)
	inode := fmt.Sprintf(":%d ", fi.Sys().(*syscall.Stat_t).Ino)
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, err := os.Open("/proc/locks")
		require.NoError(t, err)
		held, blocked := 0, 0
		lines := bufio.NewScanner(f)
		for lines.Scan() {
			l := lines.Text()
			switch {
			case !strings.Contains(l, " FLOCK ") || !strings.Contains(l, inode):
			case strings.Contains(l, "-> FLOCK"):
				blocked++
			default:
				held++
			}
		}
		f.Close()
		require.NoError(t, lines.Err())
		if done(held, blocked) {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d flocks held and %d waiting on %s, want %s", held, blocked, path, want)
		runtime.Gosched()
	}
}

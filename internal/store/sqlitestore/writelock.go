package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// WriteLockSuffix names the file beside the database on which processes
// sharing the file queue for its write lock: the database's path followed
// by it. It is empty and holds nothing; a process creates it at its first
// write.
const WriteLockSuffix = "-writelock"

// writeLock queues the write transactions of the processes that share one
// database file: each takes an exclusive flock(2) on the file's
// WriteLockSuffix file before BEGIN IMMEDIATE and releases it once the
// transaction has ended.
//
// SQLite's own lock alone makes a process that finds the file locked
// poll: its busy handler sleeps, up to 100 ms at a time, and tries again.
// A process that writes all the time takes the lock back within
// microseconds of releasing it, so one that writes now and then may poll
// for seconds before it finds the lock free (BenchmarkSharedFileLoneWriter).
// A process waiting in flock is woken as soon as the lock is released.
//
// The flock only orders the writers: SQLite's lock still guards the
// data. A writer that does not take the flock (the sqlite3 shell, a
// release from before this lock) still waits for SQLite's lock, and is
// waited for through it, by polling. So a process that cannot open the
// file (a directory it may not write, where the file was never made)
// writes without it, and is only served less fairly. The kernel releases
// a flock when its process dies.
type writeLock struct {
	// db is the database's path as the store was given it; path is the
	// lock file's, beside the file db resolves to, so that processes
	// reaching the database through a symbolic link share it.
	db, path string
	mu       sync.Mutex
	// f is the open lock file, nil until the first write and when it
	// cannot be opened (unavailable).
	f           *os.File
	unavailable bool
	// waiting is the flock call in flight, nil when none is.
	waiting *lockWait
	closed  bool
	// waits, timedOut and waitedNs count the lock calls that found the
	// lock held (store.WriteLockWaits).
	waits, timedOut, waitedNs atomic.Int64
}

// queueTimeoutError: a writer waited for the lock past the busy timeout;
// classify makes it store.ErrBusy.
type queueTimeoutError struct {
	path    string
	timeout time.Duration
}

func (e *queueTimeoutError) Error() string {
	return fmt.Sprintf("another process held %s for longer than the busy timeout, %s", e.path, e.timeout)
}

// errLockHeld: another open file holds the lock (lockFile without wait).
var errLockHeld = errors.New("held by another process")

// lockWait is one blocking flock call, which runs in a goroutine of its
// own so that a writer can stop waiting for it.
type lockWait struct {
	done chan struct{} // closed once the call returned, unless abandoned
	err  error
	// abandoned: the writer waiting for it gave up; the call releases
	// the lock as soon as it has it, unless a later writer adopts it.
	abandoned bool
}

func newWriteLock(dbPath string) *writeLock {
	return &writeLock{db: dbPath, path: dbPath + WriteLockSuffix}
}

// lock takes the lock, waiting at most timeout, and no longer than ctx
// lasts; held is false when the process writes without it (unavailable).
// Past timeout it fails with a queueTimeoutError, which classify makes
// store.ErrBusy; once ctx ends, with ctx's error. The caller is the one
// writer of its Store: lock and unlock are never called concurrently.
func (l *writeLock) lock(ctx context.Context, timeout time.Duration) (held bool, err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false, store.ErrClosed
	}
	if l.f == nil && !l.unavailable {
		if err := l.open(); err != nil {
			l.mu.Unlock()
			return false, err
		}
	}
	if l.f == nil {
		l.mu.Unlock()
		return false, nil
	}
	w := l.waiting
	if w == nil {
		err := lockFile(l.f, false)
		if err == nil {
			l.mu.Unlock()
			return true, nil
		}
		if !errors.Is(err, errLockHeld) {
			l.mu.Unlock()
			return false, fmt.Errorf("lock %s: %w", l.path, err)
		}
		w = &lockWait{done: make(chan struct{})}
		l.waiting = w
		go l.wait(w, l.f)
	}
	// A call an earlier writer gave up on is this writer's now.
	w.abandoned = false
	l.mu.Unlock()

	start := time.Now()
	l.waits.Add(1)
	defer func() { l.waitedNs.Add(int64(time.Since(start))) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-w.done:
	case <-timer.C:
		if l.abandon(w) {
			l.timedOut.Add(1)
			return false, &queueTimeoutError{path: l.path, timeout: timeout}
		}
	case <-ctx.Done():
		if l.abandon(w) {
			return false, fmt.Errorf("wait for %s: %w", l.path, ctx.Err())
		}
	}
	if w.err != nil {
		return false, fmt.Errorf("lock %s: %w", l.path, w.err)
	}
	return true, nil
}

// abandon gives up waiting for w, unless its flock call has returned
// meanwhile (false: the lock is the writer's, or w.err says why not).
func (l *writeLock) abandon(w *lockWait) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-w.done:
		return false
	default:
		w.abandoned = true
		return true
	}
}

// counts returns what the waits counters hold.
func (l *writeLock) counts() store.WriteLockWaits {
	return store.WriteLockWaits{Waits: l.waits.Load(), TimedOut: l.timedOut.Load(), Waited: time.Duration(l.waitedNs.Load())}
}

// open opens the lock file, creating it with the database's permissions.
// A file it may not create or write is opened for reading, which is
// enough for a flock; where it can have neither, the writes go without it.
func (l *writeLock) open() error {
	if !lockFileSupported {
		l.unavailable = true
		return nil
	}
	l.path = namedFile(l.db) + WriteLockSuffix
	perm := fs.FileMode(0o644)
	if fi, err := os.Stat(l.db); err == nil {
		perm = fi.Mode().Perm()
	}
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, perm)
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		f, err = os.Open(l.path)
	}
	switch {
	case err == nil:
		l.f = f
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EROFS):
		l.unavailable = true
	default:
		return fmt.Errorf("open %s: %w", l.path, err)
	}
	return nil
}

// wait is the goroutine of one blocking flock call.
func (l *writeLock) wait(w *lockWait, f *os.File) {
	err := lockFile(f, true)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting = nil
	if w.abandoned {
		if err == nil && !l.closed {
			_ = unlockFile(f)
		}
		if l.closed {
			f.Close() // which releases the lock
		}
		return
	}
	w.err = err
	close(w.done)
}

// unlock releases the lock that lock returned held.
func (l *writeLock) unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Unlocking a lock this open file holds fails only for a bad
	// descriptor, which closing the file handles anyway.
	_ = unlockFile(l.f)
}

// close closes the lock file; a flock call still waiting closes it once
// it returns.
func (l *writeLock) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f == nil {
		return nil
	}
	if w := l.waiting; w != nil {
		w.abandoned = true
		return nil
	}
	return l.f.Close()
}

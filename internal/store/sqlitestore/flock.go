//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package sqlitestore

import (
	"io/fs"
	"os"
	"syscall"
)

// mayWrite returns nil when this process may write the file at path, or
// why not (an error that wraps fs.ErrNotExist when there is none), asking
// the system without opening the file: closing a descriptor of a file
// drops every POSIX lock the process holds on it, such as SQLite's.
func mayWrite(path string) error {
	const wOK = 2 // W_OK
	if err := syscall.Access(path, wOK); err != nil {
		return &fs.PathError{Op: "access", Path: path, Err: err}
	}
	return nil
}

// lockFileSupported: this system has flock(2).
const lockFileSupported = true

// lockFile takes an exclusive flock on f; without wait, a lock another
// open file holds fails with errLockHeld at once.
func lockFile(f *os.File, wait bool) error {
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	err := flock(f, how)
	if err == syscall.EWOULDBLOCK {
		return errLockHeld
	}
	return err
}

// unlockFile releases f's flock.
func unlockFile(f *os.File) error { return flock(f, syscall.LOCK_UN) }

// flock calls flock(2) on f, again when a signal interrupted it.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package sqlitestore

import (
	"os"
	"syscall"
)

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

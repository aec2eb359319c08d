//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package sqlitestore

import (
	"errors"
	"os"
)

// lockFileSupported: without flock(2), processes sharing a file queue for
// its write lock through SQLite's busy handler alone.
const lockFileSupported = false

func lockFile(*os.File, bool) error { return errors.ErrUnsupported }

func unlockFile(*os.File) error { return errors.ErrUnsupported }

// mayWrite is not asked on these systems: SQLite there says why a write
// failed.
func mayWrite(string) error { return nil }

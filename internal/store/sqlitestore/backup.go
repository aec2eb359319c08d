package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opledger/opledger/internal/store"
)

// ErrBackupExists is Backup's refusal of a destination that exists: a
// backup never overwrites a file.
var ErrBackupExists = errors.New("the backup's file exists; a backup never overwrites a file: name a new one")

// Backup writes a consistent copy of the ledger in the SQLite file at path
// to the new file to, while other processes read and write the ledger:
// SQLite's VACUUM INTO copies one read transaction's snapshot, so every
// write committed before it began is in the copy (those still in the
// write-ahead log too, where copying the file alone loses them), and none
// half-written. The copy is written under a temporary name beside to
// (".NAME.partial-*"), synced to disk, then checked: it must hold the
// ledger, and SQLite's quick_check must find nothing wrong; then put in
// WAL mode, as the ledger is (walMode); only then is it given to's name.
// So a file under that name is always a whole, checked copy: a backup
// killed on the way leaves its temporary file, and an error removes it. A
// path that holds no ledger is refused (store.ErrNotLedger), and so is a
// destination that exists (ErrBackupExists), also one another process
// makes meanwhile.
func Backup(ctx context.Context, path, to string) (err error) {
	defer leaveAsFound(ctx, path)()
	holds, err := HoldsLedger(ctx, path)
	if err != nil {
		return err
	}
	if !holds {
		return fmt.Errorf("%s: %w (no opledger ledger to back up)", path, store.ErrNotLedger)
	}
	if _, err := os.Lstat(to); err == nil {
		return fmt.Errorf("%s: %w", to, ErrBackupExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("backup to %s: %w", to, err)
	}
	// Made empty (VACUUM INTO writes into an empty file), readable by its
	// owner only: it holds every payload.
	f, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".partial-*")
	if err != nil {
		return fmt.Errorf("backup to %s: %w", to, err)
	}
	partial := f.Name()
	f.Close()
	defer os.Remove(partial) // once named, the name stays: only this one goes
	db, err := sql.Open("sqlite", FileURI(path)+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("open sqlite %s read-only: %w", path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, partial); err != nil {
		return classify(fmt.Errorf("back up sqlite %s to %s: %w", path, to, err))
	}
	if err := syncFile(partial); err != nil {
		return fmt.Errorf("backup to %s: %w", to, err)
	}
	if err := checkBackup(ctx, partial); err != nil {
		return fmt.Errorf("backup to %s: %w", to, err)
	}
	// After the check, whose read-only connection would leave the -wal
	// and -shm files of a database in WAL mode beside the copy.
	if err := walMode(ctx, partial); err != nil {
		return fmt.Errorf("backup to %s: %w", to, err)
	}
	if backupCopied != nil {
		backupCopied(partial)
	}
	// A link, unlike a rename, never replaces a file another process
	// made under that name meanwhile. A file system without links (some
	// network shares) gets a rename, after one more look.
	if err := os.Link(partial, to); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", to, ErrBackupExists)
	} else if err != nil {
		if _, serr := os.Lstat(to); !errors.Is(serr, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", to, ErrBackupExists)
		}
		if err := os.Rename(partial, to); err != nil {
			return fmt.Errorf("backup to %s: name the copy: %w", to, err)
		}
	}
	// The content was synced under the temporary name; the new name
	// is an entry of the directory.
	syncName(to)
	return nil
}

// backupCopied, when set (by a test), runs once Backup has written and
// checked the copy under its temporary name, before naming it.
var backupCopied func(partial string)

// syncFile makes the content of the file at path durable.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// syncName makes the name of the file at path, an entry of its
// directory, durable. A directory that cannot be opened or synced
// (Windows, some file systems) leaves the name as durable as the system
// makes it.
func syncName(path string) {
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// checkBackup reads the copy at path: it must hold a ledger and pass
// SQLite's quick_check.
func checkBackup(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", FileURI(path)+"?mode=ro")
	if err != nil {
		return fmt.Errorf("check the backup %s: %w", path, err)
	}
	defer db.Close()
	holds, _, err := checkLedger(ctx, db)
	if err != nil {
		return fmt.Errorf("check the backup %s: %w", path, err)
	}
	if !holds {
		return fmt.Errorf("check the backup %s: it holds no ledger", path)
	}
	var result string
	if err := db.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&result); err != nil {
		return fmt.Errorf("check the backup %s: %w", path, err)
	}
	if result != "ok" {
		return fmt.Errorf("check the backup %s: quick_check found %s", path, result)
	}
	return nil
}

// walMode puts the database at path, a copy VACUUM INTO wrote in the
// rollback journal mode, in WAL mode, as the ledger is: otherwise the
// first process to open the copy (an ops list reading a backup) would
// switch it, writing to the file, and one that may not write it could not
// read it at all. SQLite commits the switch durably (synchronous FULL),
// and the -wal and -shm files it makes go when it closes.
func walMode(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", FileURI(path)+"?mode=rw&_pragma=synchronous(FULL)")
	if err != nil {
		return fmt.Errorf("open the copy %s: %w", path, err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode=WAL`).Scan(&mode); err != nil {
		return fmt.Errorf("put the copy %s in WAL mode: %w", path, err)
	}
	if mode != "wal" {
		return fmt.Errorf("put the copy %s in WAL mode: SQLite kept it in %s mode", path, mode)
	}
	return db.Close()
}

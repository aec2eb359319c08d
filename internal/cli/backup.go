package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/store/sqlitestore"
)

func newBackupCmd() *cobra.Command {
	var dsn, to string
	cmd := &cobra.Command{
		Use:   "backup --db sqlite:PATH --to FILE",
		Short: "Copy a SQLite ledger to a new file, consistently, while it is in use",
		Long: `backup writes a consistent copy of a SQLite ledger to a new file, while serve,
proxy or other processes go on using it (SQLite's VACUUM INTO): every write committed
before it started is in the copy, including those still in the write-ahead log
(ledger.db-wal), which copying ledger.db alone would lose, for example after a crash
or a kill -9. The copy is synced to disk, then checked (it holds the ledger, and
SQLite's quick_check finds nothing wrong). It never overwrites a file, and it
changes nothing in the ledger. It reads a ledger of any schema version, so take it
before an upgrade.

A PostgreSQL ledger is backed up with pg_dump (docs/operations.md, "Backups").
To restore, stop every process of the ledger and put the copy in place of the
file (removing its -wal and -shm files).`,
		Example: `  opledger backup --db sqlite:/var/lib/opledger/ledger.db --to /backups/ledger-2026-12-04.db`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, ok := sqlitestore.DSNPath(dsn)
			if !ok {
				return usageError{errors.New("backup copies a SQLite ledger (--db sqlite:PATH); back up a PostgreSQL ledger's schema with pg_dump --schema=NAME (docs/operations.md, \"Backups\")")}
			}
			if to == "" {
				return usageError{errors.New("--to is required: the new file to write the copy to")}
			}
			if err := checkBackupPaths(path, to); err != nil {
				return err
			}
			err := sqlitestore.Backup(cmd.Context(), path, to)
			switch {
			case errors.Is(err, sqlitestore.ErrBackupExists) || errors.Is(err, opledger.ErrNotLedger):
				return usageError{err}
			case sqlitestore.IsNotDatabase(err):
				return usageError{fmt.Errorf("%s is not a SQLite database, so it holds no ledger to back up", path)}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s (checked)\n", path, to)
			return nil
		},
	}
	addDBFlag(cmd, &dsn)
	cmd.Flags().StringVar(&to, "to", "", "the new file to write the copy to (required; never overwritten)")
	return cmd
}

// checkBackupPaths refuses, before anything is read, a --db that names
// no file or a directory, and, in the words of the command's flags, a
// --to whose place cannot take a new file.
func checkBackupPaths(path, to string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usageError{fmt.Errorf("no ledger at %s: the file does not exist", path)}
	case err != nil:
		return err
	case fi.IsDir():
		// A failure (exit 1), as for the commands that only read a
		// ledger (ops list), in their words.
		return fmt.Errorf("cannot read the ledger at %s: %w", path, &fs.PathError{Op: "open", Path: path, Err: syscall.EISDIR})
	}
	// A file named so would be written, and found by no --db.
	if file, ok := strings.CutPrefix(to, "sqlite:"); ok {
		return usageError{fmt.Errorf("--to takes the path of the new file, not a store: --to %s", file)}
	}
	if pgstore.IsDSN(to) {
		return usageError{errors.New("--to takes the path of the new SQLite file, not a store: backup copies a SQLite ledger (for PostgreSQL, use pg_dump)")}
	}
	if fi, err := os.Stat(to); err == nil && fi.IsDir() {
		return usageError{fmt.Errorf("--to names %s, a directory: give the new file to write (%s)", to, filepath.Join(to, filepath.Base(path)))}
	}
	dir := filepath.Dir(to)
	if fi, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return usageError{fmt.Errorf("--to: the directory %s does not exist: create it first", dir)}
	} else if err == nil && !fi.IsDir() {
		return usageError{fmt.Errorf("--to: %s is not a directory", dir)}
	}
	return nil
}

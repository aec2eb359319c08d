package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestReadingCommandsDoNotMigrate: the commands that only read or decide
// do not upgrade a ledger whose schema is older than theirs (an older
// release may still be writing to it): each fails (1) on one line naming
// both versions and what to do, and leaves the version as it was.
func TestReadingCommandsDoNotMigrate(t *testing.T) {
	t.Parallel()
	versions, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	newest := versions[len(versions)-1]
	path := filepath.Join(t.TempDir(), "old.db")
	_, errOut, code := run(t, "migrate", "--db", "sqlite:"+path)
	require.Equal(t, 0, code, errOut)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	// As an older release left it: its newest migration not recorded.
	_, err = db.Exec(`DELETE FROM schema_migrations WHERE version = ?`, newest)
	require.NoError(t, err)

	want := fmt.Sprintf("opledger: the ledger at %s has schema version %d, older than this opledger uses (%d), and a command that only reads or decides does not upgrade it: "+
		"if a process of this release is migrating it now, try again in a moment; otherwise back it up (opledger backup), stop every process of this ledger, then run opledger migrate (see Upgrading in docs/operations.md)\n", path, newest-1, newest)
	for _, args := range [][]string{
		{"ops", "list"}, {"ops", "show", "k1"}, {"ops", "cancel", "k1", "--reason", "r"},
		{"events", "list"}, {"tokens", "list"}, {"tokens", "revoke", "tok_1"},
	} {
		out, errOut, code := run(t, append(args, "--db", "sqlite:"+path)...)
		require.Equal(t, 1, code, "%v: %s%s", args, out, errOut)
		require.Empty(t, out, args)
		require.Equal(t, want, errOut, args)
		var v int
		require.NoError(t, db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v))
		require.Equal(t, newest-1, v, "%v left the schema at its version", args)
	}
}

// TestLedgerThatIsNoFile: a --db naming a directory is a failure (1) that
// says so, not a usage error claiming the directory holds no ledger,
// for backup as for the others; a file that is not a SQLite database
// stays a usage error (2).
func TestLedgerThatIsNoFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"ops", "list"}, {"tokens", "list"}, {"migrate"}, {"serve", "--addr", "127.0.0.1:0"},
		{"backup", "--to", filepath.Join(t.TempDir(), "copy.db")}} {
		out, errOut, code := runGuarded(t, append(args, "--db", "sqlite:"+dir)...)
		require.Equal(t, 1, code, "%v: %s%s", args, out, errOut)
		require.Regexp(t, `^opledger: (cannot read the ledger at `+dir+`: open|open sqlite) `+dir+`: is a directory\n$`, errOut, args)
	}
	notes := filepath.Join(dir, "notes.db")
	require.NoError(t, os.WriteFile(notes, []byte("only some notes\n"), 0o644))
	_, errOut, code := run(t, "ops", "list", "--db", "sqlite:"+notes)
	require.Equal(t, 2, code, errOut)
	require.Equal(t, "opledger: invalid input: no ledger at "+notes+": read sqlite "+notes+": file is not a database (26); it was left as it is", usageLine(t, errOut))

	// So for the commands that create a ledger, as for another
	// application's database: exit 2, the file left as it was.
	for _, args := range [][]string{{"migrate"}, {"tokens", "create", "--tenant", "acme"}, {"serve", "--addr", "127.0.0.1:0"},
		{"proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:18949"}, {"demo", "--no-serve"}} {
		out, errOut, code := runGuarded(t, append(args, "--db", "sqlite:"+notes)...)
		require.Equal(t, 2, code, "%v: %s%s", args, out, errOut)
		require.Contains(t, usageLine(t, errOut), "not an opledger ledger: read sqlite "+notes+": file is not a database (26), so it holds no ledger; give opledger a file of its own; it was left as it is", args)
	}
	data, err := os.ReadFile(notes)
	require.NoError(t, err)
	require.Equal(t, "only some notes\n", string(data), "left as it was")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing made beside it")
}

// TestLedgerInMissingDirectory: a command that would create the ledger
// says which directory is missing, where SQLite says only that it cannot
// open the file; nothing is created.
func TestLedgerInMissingDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "missing", "deeper")
	path := filepath.Join(dir, "ledger.db")
	for _, args := range [][]string{{"migrate"}, {"serve", "--addr", "127.0.0.1:0"}} {
		out, errOut, code := runGuarded(t, append(args, "--db", "sqlite:"+path)...)
		require.Equal(t, 1, code, "%v: %s%s", args, out, errOut)
		require.Equal(t, "opledger: open sqlite "+path+": the directory "+dir+" does not exist: create it, or name a file in another\n", errOut, args)
	}
	_, err := os.Stat(filepath.Dir(dir))
	require.ErrorIs(t, err, fs.ErrNotExist, "nothing was created")
}

// TestLedgerInUnwritableDirectory: a ledger file this process may read,
// in a directory it may not write, while no process has the ledger open
// (so that SQLite must create its -shm file to read it) is a failure (1)
// that says so, not a usage error claiming there is no ledger. As root
// (who writes everywhere) the binary runs as nobody.
func TestLedgerInUnwritableDirectory(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "opledger-rodir-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755); os.RemoveAll(dir) })
	bin := filepath.Join(dir, "opledger")
	data, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	p := filepath.Join(dir, "ledger.db")
	_, errOut, code := run(t, "migrate", "--db", "sqlite:"+p)
	require.Equal(t, 0, code, errOut)
	require.NoFileExists(t, p+"-shm", "no process has it open")
	require.NoError(t, os.Chmod(p, 0o644))
	require.NoError(t, os.Chmod(dir, 0o555))

	cmd := exec.Command(bin, "ops", "list", "--db", "sqlite:"+p)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPLEDGER_DB=")
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil && os.Getuid() == 0 {
			t.Skipf("cannot run as nobody here: %v", err)
		}
		t.Fatalf("want a failure, got %v: %s", err, out.String())
	}
	require.Equal(t, 1, ee.ExitCode(), stderr.String())
	require.Empty(t, out.String())
	require.Equal(t, "opledger: cannot read the ledger at "+p+": read sqlite "+p+": no process has it open, so reading it means creating "+p+
		"-shm beside it, and this process may not write to its directory (attempt to write a readonly database (1544)); "+
		"run this as a user who may, or while a process of the ledger has it open\n", stderr.String())
}

// TestServeRefusesUnwritableLedger: serve, proxy and migrate refuse at
// start a SQLite file they may not write (which SQLite would open
// read-only: serve used to report ready, then fail every write), saying
// why; the commands that only read it still do.
func TestServeRefusesUnwritableLedger(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "ledger.db")
	_, errOut, code := run(t, "migrate", "--db", "sqlite:"+p)
	require.Equal(t, 0, code, errOut)
	l, err := opledger.Open(context.Background(), "sqlite:"+p, opledger.Options{})
	require.NoError(t, err)
	_, _, err = l.Record(context.Background(), opledger.Intent{Key: "mail:1", Action: "mail.send", Destination: "mail", Payload: []byte(`{}`)})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	testdb.MakeUnwritable(t, p)
	for _, args := range [][]string{
		{"serve", "--addr", "127.0.0.1:0"},
		{"proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:18949"},
		{"migrate"},
	} {
		out, errOut, code := runGuarded(t, append(args, "--db", "sqlite:"+p)...)
		require.Equal(t, 1, code, "%v: %s%s", args, out, errOut)
		require.Regexp(t, `^opledger: cannot write the ledger at `+p+`: open `+p+`: (permission denied|operation not permitted); `+
			`a process that writes to the ledger \(serve, proxy, migrate\) needs a file it may write\n$`, errOut, args)
	}
	out, errOut, code := run(t, "ops", "list", "--db", "sqlite:"+p)
	require.Equal(t, 0, code, errOut)
	require.True(t, strings.HasPrefix(out, "KEY"), out)
	// A decision opens the ledger as a reader does, and says why its
	// write failed, not which statement did.
	out, errOut, code = run(t, "ops", "cancel", "mail:1", "--reason", "sent by hand", "--db", "sqlite:"+p)
	require.Equal(t, 1, code, out)
	require.Regexp(t, `^opledger: cannot write the ledger at `+p+`: this process may not write its file, or the -wal and -shm files beside it; nothing was recorded \(.*readonly database.*\)\n$`, errOut)
}

// TestRollbackJournalLedgerInUnwritableDirectory: a ledger file in
// rollback-journal mode (a backup made by an older release), which every
// open switches to WAL, that this process may write but in a directory
// it may not (where SQLite makes its journal and -wal files), read by a
// command that only reads, fails (1) saying the file is in
// rollback-journal mode and what to do, instead of SQLite's "attempt to
// write a readonly database"; the file is left as it was. As root (who
// writes everywhere) the binary runs as nobody, and the test is skipped
// where it cannot.
func TestRollbackJournalLedgerInUnwritableDirectory(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "opledger-rbdir-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755); os.RemoveAll(dir) })
	bin := filepath.Join(dir, "opledger")
	data, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	p := filepath.Join(dir, "ledger.db")
	_, errOut, code := run(t, "migrate", "--db", "sqlite:"+p)
	require.Equal(t, 0, code, errOut)
	db, err := sql.Open("sqlite", sqlitestore.FileURI(p))
	require.NoError(t, err)
	_, err = db.Exec(`PRAGMA journal_mode=DELETE`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	header := func() []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return b[18:20]
	}
	require.Equal(t, []byte{1, 1}, header(), "rollback-journal mode")
	require.NoError(t, os.Chmod(p, 0o666))
	require.NoError(t, os.Chmod(dir, 0o555))

	cmd := exec.Command(bin, "ops", "list", "--db", "sqlite:"+p)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPLEDGER_DB=")
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil && os.Getuid() == 0 {
			t.Skipf("cannot run as nobody here: %v", err)
		}
		t.Fatalf("want a failure, got %v: %s", err, out.String())
	}
	require.Equal(t, 1, ee.ExitCode(), stderr.String())
	require.Empty(t, out.String())
	require.Regexp(t, `^opledger: open sqlite `+p+`: it is in rollback-journal mode \(a backup made by an older opledger\), which opening it switches to WAL, `+
		`and this process may not write it, or the directory it is in \(attempt to write a readonly database \(\d+\)\): `+
		`open it once as a user who may \(opledger migrate --db sqlite:`+p+`\), then read it as before\n$`, stderr.String())
	require.Equal(t, []byte{1, 1}, header(), "left as it was")
}

// TestRollbackJournalLedgerSwitchSaid: a ledger file in rollback-journal
// mode (a backup made by an older release), which every open switches to
// WAL, is switched by a command that opens it, and the command says so
// on stderr, once: from then on the file has a -wal file beside it while
// in use, which a copy with cp would leave out. Its output is unchanged.
func TestRollbackJournalLedgerSwitchSaid(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "ledger.db")
	_, errOut, code := run(t, "migrate", "--db", "sqlite:"+p)
	require.Equal(t, 0, code, errOut)
	db, err := sql.Open("sqlite", sqlitestore.FileURI(p))
	require.NoError(t, err)
	_, err = db.Exec(`PRAGMA journal_mode=DELETE`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	header := func() []byte {
		t.Helper()
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return b[18:20]
	}
	require.Equal(t, []byte{1, 1}, header(), "rollback-journal mode")

	out, errOut, code := run(t, "ops", "list", "--db", "sqlite:"+p)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "KEY")
	require.Contains(t, errOut, "note: "+p+" was in rollback-journal mode (a backup made by an older opledger): opening it switched it to WAL mode, "+
		"as every ledger runs; copy it with opledger backup from now on, not cp, which would leave out the writes still in its -wal file\n")
	require.Equal(t, []byte{2, 2}, header(), "WAL mode")

	_, errOut, code = run(t, "ops", "list", "--db", "sqlite:"+p)
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, errOut, "rollback-journal", "said once")
}

package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// TestBackupAfterKill: 'opledger backup' of the file of a server killed
// with SIGKILL (its last writes still in the write-ahead log, which a
// copy of the file alone leaves behind) holds every write the server
// acknowledged, and a backup taken while a server runs holds every write
// acknowledged before it. Each copy opens as a ledger.
func TestBackupAfterKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	dsn := "sqlite:" + path
	out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	token := strings.TrimSpace(out)
	url, cmd := startServe(t, dsn)
	c := client.New(url, token, nil)
	ctx := context.Background()
	record := func(from, to int) {
		for i := from; i < to; i++ {
			_, created, err := c.Record(ctx, fmt.Sprintf("order:%d", i), client.Intent{Action: "create", Destination: "crm"})
			require.NoError(t, err)
			require.True(t, created)
		}
	}
	record(0, 20)

	// Online: the server goes on writing after the copy.
	online := filepath.Join(dir, "online.db")
	out, errOut, code = run(t, "backup", "--db", dsn, "--to", online)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "backed up "+path+" to "+online+" (checked)\n", out)
	record(20, 50)

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	after := filepath.Join(dir, "after-kill.db")
	_, errOut, code = run(t, "backup", "--db", dsn, "--to", after)
	require.Equal(t, 0, code, errOut)
	for name, want := range map[string]int{online: 20, after: 50} {
		l, err := opledger.Open(ctx, "sqlite:"+name, opledger.Options{Tenant: "acme", ExistingOnly: true})
		require.NoError(t, err, name)
		page, err := l.List(ctx, opledger.ListOptions{Limit: 500})
		require.NoError(t, err)
		require.Len(t, page.Items, want, name)
		require.NoError(t, l.Close())
	}

	// Refusals: an existing file is never overwritten; no ledger, no copy.
	_, errOut, code = run(t, "backup", "--db", dsn, "--to", after)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "never overwrites a file")
	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, errOut, code = run(t, "backup", "--db", "sqlite:"+empty, "--to", filepath.Join(dir, "x.db"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "not an opledger ledger")
	require.NoFileExists(t, filepath.Join(dir, "x.db"))
	_, errOut, code = run(t, "backup", "--db", "postgres://postgres@127.0.0.1:5432/test", "--to", filepath.Join(dir, "y.db"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "pg_dump")
	_, errOut, code = run(t, "backup", "--db", dsn)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--to is required")
	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("not a database"), 0o600))
	for _, tc := range []struct {
		db, to, msg string
	}{
		{dsn, dir, "--to names " + dir + ", a directory"},
		{dsn, filepath.Join(dir, "missing", "x.db"), "the directory " + filepath.Join(dir, "missing") + " does not exist"},
		{"sqlite:" + text, filepath.Join(dir, "z.db"), "is not a SQLite database"},
		// A DSN is not a file name: "sqlite:copy.db" would be one.
		{dsn, "sqlite:" + filepath.Join(dir, "copy.db"), "--to takes the path of the new file, not a store: --to " + filepath.Join(dir, "copy.db")},
		{dsn, "postgres://postgres@127.0.0.1:5432/test", "--to takes the path of the new SQLite file, not a store"},
	} {
		_, errOut, code = run(t, "backup", "--db", tc.db, "--to", tc.to)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, tc.msg)
	}
	require.NoFileExists(t, filepath.Join(dir, "z.db"))
}

// TestBackupThroughSymlink: a backup of a ledger no process has open,
// named by a symbolic link, leaves nothing beside the ledger's file, as
// one named by its own path: SQLite makes the -wal and -shm files beside
// the file the link names, where backup used not to look for them.
func TestBackupThroughSymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	_, errOut, code := run(t, "migrate", "--db", "sqlite:"+path)
	require.Equal(t, 0, code, errOut)
	link := filepath.Join(t.TempDir(), "link.db")
	require.NoError(t, os.Symlink(path, link))
	to := filepath.Join(dir, "copy.db")
	out, errOut, code := run(t, "backup", "--db", "sqlite:"+link, "--to", to)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "backed up "+link+" to "+to+" (checked)\n", out)
	for _, side := range []string{path + "-wal", path + "-shm", link + "-wal", link + "-shm"} {
		require.NoFileExists(t, side)
	}
}

// TestBackupReadAsIs: a backup is a ledger in WAL mode, as the ledger
// itself: the commands that only read (ops list, ops show, tokens list)
// read it without writing a byte of it. A copy in SQLite's rollback
// journal mode, as VACUUM INTO writes it, was switched to WAL by the
// first of them: the backup changed on being looked at, and one its
// reader may not write (a backup made read-only to keep it as it is)
// could not be read at all ("attempt to write a readonly database").
func TestBackupReadAsIs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "ledger.db")
	ctx := context.Background()
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:1", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	_, _, err = l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	copyPath := filepath.Join(dir, "copy.db")
	_, errOut, code := run(t, "backup", "--db", dsn, "--to", copyPath)
	require.Equal(t, 0, code, errOut)
	before, err := os.ReadFile(copyPath)
	require.NoError(t, err)
	// The file header's write and read versions: 2 is WAL.
	require.Equal(t, []byte{2, 2}, before[18:20], "the copy's journal mode")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ops", "list"}, "order:1"},
		{[]string{"ops", "show", "order:1"}, "order:1"},
		{[]string{"tokens", "list"}, "cli-test"},
	} {
		out, errOut, code := run(t, append(tc.args, "--db", "sqlite:"+copyPath, "--tenant", "acme")...)
		require.Equal(t, 0, code, "%v: %s", tc.args, errOut)
		require.Contains(t, out, tc.want, tc.args)
	}
	after, err := os.ReadFile(copyPath)
	require.NoError(t, err)
	require.True(t, bytes.Equal(before, after), "reading the backup changed it")
	require.NoFileExists(t, copyPath+"-wal")
	require.NoFileExists(t, copyPath+"-shm")
}

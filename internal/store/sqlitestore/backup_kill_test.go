package sqlitestore

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBackupKilledLeavesNoCopy: a backup process killed (SIGKILL) once
// its copy is written, before it names it, leaves no file under the
// backup's name, only its temporary file: a file under that name is
// always a whole, checked copy. A backup to that name then succeeds.
func TestBackupKilledLeavesNoCopy(t *testing.T) {
	if from := os.Getenv("OPLEDGER_BACKUP_CHILD_FROM"); from != "" {
		// The child: back up, and wait to be killed once the copy is
		// written under its temporary name.
		backupCopied = func(partial string) {
			fmt.Println("copied", partial)
			_, _ = io.Copy(io.Discard, os.Stdin) // until killed
		}
		err := Backup(context.Background(), from, os.Getenv("OPLEDGER_BACKUP_CHILD_TO"))
		fmt.Println("ended", err)
		os.Exit(3)
	}
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, s.Close())
	to := filepath.Join(dir, "backup.db")

	child := exec.Command(os.Args[0], "-test.run=^TestBackupKilledLeavesNoCopy$")
	child.Env = append(os.Environ(), "OPLEDGER_BACKUP_CHILD_FROM="+path, "OPLEDGER_BACKUP_CHILD_TO="+to)
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	partial, ok := strings.CutPrefix(strings.TrimSpace(line), "copied ")
	require.True(t, ok, "the child said %q", line)
	require.Equal(t, dir, filepath.Dir(partial), "beside the backup's name")
	require.True(t, strings.HasPrefix(filepath.Base(partial), ".backup.db.partial-"), partial)
	require.NoError(t, child.Process.Kill())
	_ = child.Wait()

	require.NoFileExists(t, to, "killed before naming its copy")
	fi, err := os.Stat(partial)
	require.NoError(t, err, "the temporary file is left")
	require.Positive(t, fi.Size())

	require.NoError(t, Backup(ctx, path, to), "the name is free")
	require.NoError(t, checkBackup(ctx, to))
	names, err := filepath.Glob(filepath.Join(dir, ".backup.db.partial-*"))
	require.NoError(t, err)
	require.Equal(t, []string{partial}, names, "the backup removes its own temporary file, and only it")
}

//go:build unix

package configfile_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/configfile"
)

// TestReadRefusesSpecialFiles: a device, directly or through a symbolic
// link, and a FIFO with no writer are refused before any read (reading
// /dev/zero would never end, opening the FIFO would block).
func TestReadRefusesSpecialFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	devLink := filepath.Join(dir, "zero.yaml")
	require.NoError(t, os.Symlink("/dev/zero", devLink))
	fifo := filepath.Join(dir, "fifo.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, p := range []string{"/dev/zero", devLink, fifo} {
		_, err := configfile.Read(p)
		require.EqualError(t, err, p+": not a regular file")
	}
}

package testdb

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// MakeUnwritable makes the file at path one this process may read but
// not write: mode 0444 for a user other than root, who writes whatever
// the mode, and the immutable attribute (chattr +i) for root. It skips
// t where the file system or the process cannot set that attribute.
func MakeUnwritable(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(path, 0o444))
		return
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("root writes a file of any mode, and chattr +i fails here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
}

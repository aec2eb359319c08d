package opledger_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestLoadRulesFileLimits: LoadRules reads a regular file of at most
// 4 MiB; a larger one, or one that is not a regular file (a directory, a
// device), is refused unread with an error naming it.
func TestLoadRulesFileLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(ok, []byte(ruleYAML), 0o600))
	_, err := opledger.LoadRules(ok)
	require.NoError(t, err)

	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte(ruleYAML+"# "+strings.Repeat("x", 4<<20)+"\n"), 0o600))
	_, err = opledger.LoadRules(big)
	require.EqualError(t, err, "read rules: "+big+": larger than 4 MiB")
	_, err = opledger.LoadRules(dir)
	require.EqualError(t, err, "read rules: "+dir+": not a regular file")
}

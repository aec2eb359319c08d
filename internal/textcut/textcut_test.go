package textcut_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/textcut"
)

func TestValid(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\uFFFDb\uFFFDc", textcut.Valid("a\x00b\xffc"))
	require.Equal(t, "plain", textcut.Valid("plain"))
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", textcut.Prefix("abc", 5), "short enough")
	require.Equal(t, "ab", textcut.Prefix("abc", 2))
	require.Equal(t, "a", textcut.Prefix("aé", 2), "é is two bytes: not split")
	require.Equal(t, "aé", textcut.Prefix("aéz", 3))
	require.Empty(t, textcut.Prefix("éé", 1))
	require.Empty(t, textcut.Prefix("abc", 0))
}

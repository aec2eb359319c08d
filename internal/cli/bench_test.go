package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchServeRSSBounds: --serve-rss N beyond its bound is a usage error
// in one line, before anything starts (N sized an allocation and panicked
// with makeslice).
func TestBenchServeRSSBounds(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"9000000000000000000", "100000001"} {
		out, errOut, code := run(t, "bench", "--mode", "http", "--serve-rss", n, "--concurrency", "1")
		require.Equal(t, 2, code, "%s: %s", n, errOut)
		require.Empty(t, out)
		require.Equal(t, "opledger: --serve-rss N takes --mode http, no --preload, --keys or --rounds, and N from 2 to 100000000 (got "+n+")", usageLine(t, errOut))
		require.NotContains(t, errOut, "panic")
	}
}

package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProxyMode runs protected requests through the Idempotency-Key proxy
// for a moment on SQLite: operations happen, and the upstream got exactly
// one request per protected operation the bench counted (Run fails
// otherwise; the cell says it too).
func TestProxyMode(t *testing.T) {
	t.Parallel()
	cells, err := Run(context.Background(), Config{
		DSN:         "sqlite:" + filepath.Join(t.TempDir(), "bench.db"),
		Concurrency: []int{1, 4},
		Duration:    150 * time.Millisecond,
		Mode:        ModeProxy,
	})
	require.NoError(t, err)
	require.Len(t, cells, 2)
	for _, c := range cells {
		require.Equal(t, ModeProxy, c.Mode)
		require.Equal(t, "sqlite", c.Store)
		require.Positive(t, c.Ops, "c=%d", c.Concurrency)
		require.Equal(t, c.Ops, c.UpstreamRequests, "c=%d: one upstream request per protected operation", c.Concurrency)
		require.Positive(t, c.FloorOps)
	}
}

func TestUnknownMode(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Mode: "grpc"})
	require.EqualError(t, err, `mode must be library, http or proxy (got "grpc")`)
}

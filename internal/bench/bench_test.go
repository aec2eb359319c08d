package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
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

// TestWarmUpAnalyzes: on PostgreSQL the warm-up runs its protected
// operations through the ledger and leaves the tables analyzed, which the
// catalog shows (pg_class.reltuples is set by ANALYZE).
func TestWarmUpAnalyzes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Worker: "bench"})
	require.NoError(t, err)
	defer l.Close()
	op, stop, err := protectedOp(ctx, l, ModeLibrary, 8, nil)
	require.NoError(t, err)
	defer stop()
	n, err := warmUp(ctx, dsn, op)
	require.NoError(t, err)
	require.EqualValues(t, warmUpOps, n)
	counts, err := l.CountByState(ctx)
	require.NoError(t, err)
	require.Equal(t, warmUpOps, counts[opledger.StateSucceeded])

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var tuples float64
	require.NoError(t, conn.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'operations'::regclass`).Scan(&tuples))
	require.EqualValues(t, warmUpOps, tuples, "operations analyzed")
}

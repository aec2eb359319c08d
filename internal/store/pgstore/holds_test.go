package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestHoldsLedger: an empty schema holds no ledger and is left empty by
// the check; a migrated one holds one; a search_path naming no existing
// schema reports no schema.
func TestHoldsLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)

	c, err := pgstore.HoldsLedger(ctx, dsn)
	require.NoError(t, err)
	require.False(t, c.Holds)
	require.NotEmpty(t, c.Schema)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var tables int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, c.Schema).Scan(&tables))
	require.Zero(t, tables, "the check creates nothing")

	s, err := pgstore.Open(ctx, dsn+"&pool_max_conns=2")
	require.NoError(t, err)
	defer s.Close()
	c2, err := s.HoldsLedger(ctx)
	require.NoError(t, err)
	require.Equal(t, c, c2)
	require.NoError(t, s.Migrate(ctx, nil))
	c, err = s.HoldsLedger(ctx)
	require.NoError(t, err)
	require.True(t, c.Holds)
	c, err = pgstore.HoldsLedger(ctx, dsn+"&pool_max_conns=2")
	require.NoError(t, err)
	require.True(t, c.Holds)

	c, err = pgstore.HoldsLedger(ctx, testdb.WithSearchPath(t, testdb.PostgresBase(), "opltest_no_such_schema"))
	require.NoError(t, err)
	require.Equal(t, pgstore.LedgerCheck{SearchPath: "opltest_no_such_schema"}, c)
}

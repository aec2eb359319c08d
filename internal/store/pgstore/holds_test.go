package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
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

// Another application's schema is not a ledger, whatever it calls its
// tables: HoldsLedger says so and names its tables, and Migrate refuses
// it (store.ErrNotLedger) and leaves it exactly as it was. A
// schema_migrations table counts only with the ledger's own first
// migration in it.
func TestMigrateRefusesAnotherApplicationsSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := map[string]struct {
		sql    string
		others []string
	}{
		"its own sessions":        {`CREATE TABLE users (id int); CREATE TABLE sessions (id int, user_id int, expires_at int)`, []string{"sessions", "users"}},
		"rails schema_migrations": {`CREATE TABLE schema_migrations (version varchar PRIMARY KEY); INSERT INTO schema_migrations VALUES ('20240101120000')`, []string{"schema_migrations"}},
		"golang-migrate's":        {`CREATE TABLE schema_migrations (version bigint, dirty bool); INSERT INTO schema_migrations VALUES (18, false)`, []string{"schema_migrations"}},
		"the ledger's shape":      {`CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL); INSERT INTO schema_migrations VALUES (1, 'create_users')`, []string{"schema_migrations"}},
		"a view":                  {`CREATE VIEW report AS SELECT 1 AS n`, []string{"report"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := testdb.PostgresDSN(t)
			conn, err := pgx.Connect(ctx, dsn)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, tc.sql)
			require.NoError(t, err)
			relations := func() (names []string) {
				rows, err := conn.Query(ctx, `SELECT c.relname || ':' || c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
					WHERE n.nspname = current_schema() ORDER BY 1`)
				require.NoError(t, err)
				names, err = pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				return names
			}
			before := relations()

			c, err := pgstore.HoldsLedger(ctx, dsn)
			require.NoError(t, err)
			require.False(t, c.Holds)
			require.Equal(t, tc.others, c.Others)

			s, err := pgstore.Open(ctx, dsn+"&pool_max_conns=2")
			require.NoError(t, err)
			defer s.Close()
			err = s.Migrate(ctx, nil)
			require.ErrorIs(t, err, store.ErrNotLedger)
			require.Contains(t, err.Error(), "holds other tables ("+strings.Join(tc.others, ", ")+") and no opledger ledger")
			require.Equal(t, before, relations(), "nothing was created")
		})
	}
}

// FirstSchema names the search_path's first schema as the server
// reports it, ready for CREATE SCHEMA: a quoted identifier is one
// schema whatever commas or doubled quotes it holds.
func TestFirstSchemaReadsQuotedIdentifiers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgstore.HoldsLedger(ctx, testdb.WithSearchPath(t, testdb.PostgresBase(), `"opltest_no,such", opltest_other`))
	require.NoError(t, err)
	require.Empty(t, c.Schema)
	require.Equal(t, `"opltest_no,such"`, c.FirstSchema())

	for path, want := range map[string]string{
		`"a,b", public`:     `"a,b"`,
		`"a""b,c", public`:  `"a""b,c"`,
		`"a"",""b"`:         `"a"",""b"`,
		`plain, "x,y"`:      `plain`,
		` spaced ,public`:   `spaced`,
		`"$user", public`:   `<schema>`,
		``:                  `<schema>`,
		`"unterminated,x`:   `"unterminated,x`,
		`"$user,x", public`: `"$user,x"`,
	} {
		require.Equal(t, want, pgstore.LedgerCheck{SearchPath: path}.FirstSchema(), "search_path %s", path)
	}
}

// TestHoldsLedgerAfterClose: HoldsLedger on a closed store is
// store.ErrClosed, as the store's other reads are, not the pool's own
// "closed pool" error.
func TestHoldsLedgerAfterClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.PostgresDSN(t))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = s.HoldsLedger(ctx)
	require.ErrorIs(t, err, store.ErrClosed)
	require.ErrorIs(t, s.Ping(ctx), store.ErrClosed)
}

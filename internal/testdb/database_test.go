package testdb_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
)

// TestDatabaseDeadlocks makes one deadlock in a database of its own and
// reads it back: PostgresDatabase gives a database nothing else uses, and
// DatabaseDeadlocks counts the deadlock of sessions already closed.
func TestDatabaseDeadlocks(t *testing.T) {
	dsn := testdb.PostgresDatabase(t, "opltest_deadlocks")
	ctx := context.Background()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		return c
	}
	a, b := connect(), connect()
	var db string
	require.NoError(t, a.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
	require.Contains(t, dsn, "/"+db+"?")
	_, err := a.Exec(ctx, `CREATE TABLE rows (id int PRIMARY KEY); INSERT INTO rows VALUES (1), (2)`)
	require.NoError(t, err)

	lock := func(c *pgx.Conn, id int) error {
		_, err := c.Exec(ctx, `SELECT id FROM rows WHERE id = $1 FOR UPDATE`, id)
		return err
	}
	_, err = a.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = b.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	require.NoError(t, lock(a, 1))
	require.NoError(t, lock(b, 2))
	aDone := make(chan error, 1)
	go func() { aDone <- lock(a, 2) }() // waits for b
	testdb.WaitBlockedBy(t, b, "a's lock of row 2")
	bErr := lock(b, 1) // waits for a: a circle, which the server breaks
	aErr := <-aDone
	isDeadlock := func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "40P01"
	}
	require.True(t, isDeadlock(aErr) != isDeadlock(bErr), "exactly one side is the deadlock's victim: a: %v, b: %v", aErr, bErr)
	require.NoError(t, a.Close(ctx))
	require.NoError(t, b.Close(ctx))

	require.EqualValues(t, 1, testdb.DatabaseDeadlocks(t, dsn))
}

package opledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestStoreBusy: a call that waits for another process's lock longer than
// the ledger waits fails with ErrStoreBusy, saying so, and records
// nothing: on SQLite, another connection holds the file's write lock
// (BEGIN IMMEDIATE, as a VACUUM or another process's migration would)
// past the busy timeout; on PostgreSQL, another session holds the
// operation's row lock past the DSN's lock_timeout. Once the lock is
// gone, the same call succeeds.
func TestStoreBusy(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, hold := openBusyLedger(t, st)
			in := opledger.Intent{Key: "busy:1", Action: "crm.create", Destination: "crm",
				Payload: json.RawMessage(`{"n":1}`)}
			_, _, err := l.Record(ctx, in)
			require.NoError(t, err)

			release := hold(t, "default", "busy:1")
			_, err = l.Claim(ctx, "busy:1", opledger.ClaimOptions{})
			release()
			require.ErrorIs(t, err, opledger.ErrStoreBusy)
			require.NotErrorIs(t, err, opledger.ErrInvalidInput)
			require.ErrorContains(t, err, "another process holds its write lock; nothing was recorded, try again")

			op, err := l.Get(ctx, "busy:1")
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State, "nothing was recorded")
			require.Zero(t, op.AttemptCount)
			c, err := l.Claim(ctx, "busy:1", opledger.ClaimOptions{})
			require.NoError(t, err, "tried again once the lock is gone")
			require.Equal(t, 1, c.Operation.AttemptCount)
		})
	}
}

// openBusyLedger opens a ledger on a new store of st that gives up on
// another process's lock after 100 ms, and a function that takes, from
// another connection, the lock a write of the operation key of tenant
// needs (all writes' on SQLite) and returns its release.
func openBusyLedger(t *testing.T, st testdb.Store) (*opledger.Ledger, func(t *testing.T, tenant, key string) (release func())) {
	t.Helper()
	ctx := context.Background()
	dsn := st.NewDSN(t)
	if st.Name == "postgres" {
		dsn += "&lock_timeout=100ms"
	}
	l, err := opledger.Open(ctx, dsn, opledger.Options{SQLiteBusyTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	if st.Name == "postgres" {
		return l, func(t *testing.T, tenant, key string) func() {
			t.Helper()
			conn, err := pgx.Connect(ctx, dsn)
			require.NoError(t, err)
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			var one int
			require.NoError(t, tx.QueryRow(ctx, `SELECT 1 FROM operations WHERE tenant = $1 AND key = $2 FOR UPDATE`,
				tenant, key).Scan(&one))
			return func() {
				require.NoError(t, tx.Rollback(ctx))
				require.NoError(t, conn.Close(ctx))
			}
		}
	}
	db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(dsn, "sqlite:"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return l, func(t *testing.T, _, _ string) func() {
		t.Helper()
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
		require.NoError(t, err)
		return func() {
			_, err := conn.ExecContext(ctx, `ROLLBACK`)
			require.NoError(t, err)
			require.NoError(t, conn.Close())
		}
	}
}

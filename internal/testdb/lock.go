package testdb

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the "sqlite" driver of database/sql
)

// HoldLock takes, from a connection of its own, the lock that a write of
// tenant's operation key needs in the store at dsn, as another process
// would, and returns its release: on SQLite the file's write lock (BEGIN
// IMMEDIATE, held as a VACUUM or a migration holds it), on PostgreSQL the
// operation row's lock (the operation must exist).
func HoldLock(t testing.TB, dsn, tenant, key string) (release func()) {
	t.Helper()
	ctx := context.Background()
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		db, err := sql.Open("sqlite", "file:"+path)
		require.NoError(t, err)
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
		require.NoError(t, err)
		return func() {
			_, err := conn.ExecContext(ctx, `ROLLBACK`)
			require.NoError(t, err)
			require.NoError(t, conn.Close())
			require.NoError(t, db.Close())
		}
	}
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

// GoneWhileLocked is a caller that goes away while its request waits on
// the store: it locks table of the PostgreSQL store at dsn (ACCESS
// EXCLUSIVE, from a session of its own), runs send in a goroutine with a
// context, waits until some session waits for the lock, cancels that
// context, and returns the lock's release and send's error once send has
// returned: keep the lock until the server has ended the request, or the
// released query may finish before the cancellation reaches it.
func GoneWhileLocked(t testing.TB, dsn, table string, send func(ctx context.Context) error) (release func(), sendErr error) {
	t.Helper()
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{table}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	sendCtx, cancel := context.WithCancel(ctx)
	sent := make(chan error, 1)
	go func() { sent <- send(sendCtx) }()
	WaitBlockedBy(t, holder, "the request")
	cancel()
	sendErr = <-sent
	return func() {
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, holder.Close(ctx))
	}, sendErr
}

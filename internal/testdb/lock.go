package testdb

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the "sqlite" driver of database/sql
)

// HoldWrites holds, from a connection of its own, what every write of
// the ledger at dsn needs, as another process would, and returns its
// release: on SQLite the file's write lock (HoldLock), on PostgreSQL
// the operations table (HoldTableLock). A write then waits for as long
// as the ledger's busy timeout or the DSN's lock_timeout lets it.
func HoldWrites(t testing.TB, dsn string) (release func()) {
	t.Helper()
	if strings.HasPrefix(dsn, "sqlite:") {
		return HoldLock(t, dsn, "", "")
	}
	_, release = HoldTableLock(t, dsn, "operations")
	return release
}

// HoldLock takes, from a connection of its own, the lock that a write of
// tenant's operation key needs in the store at dsn, as another process
// would, and returns its release: on SQLite the file's write lock (BEGIN
// IMMEDIATE, held as a VACUUM or a migration holds it), on PostgreSQL the
// operation row's lock (the operation must exist). Like every release of
// this file's locks, release may be called again: only its first call
// releases, so that a test may release early and defer it too.
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
		return sync.OnceFunc(func() {
			_, err := conn.ExecContext(ctx, `ROLLBACK`)
			require.NoError(t, err)
			require.NoError(t, conn.Close())
			require.NoError(t, db.Close())
		})
	}
	return HoldRowLock(t, dsn, "operations", tenant, key)
}

// HoldRowLock takes, from a session of its own, the lock of the row of
// table (operations, workflows: a table keyed by tenant and key) of the
// PostgreSQL store at dsn, as a client's long transaction would (SELECT
// … FOR UPDATE), and returns its release. The row must exist.
func HoldRowLock(t testing.TB, dsn, table, tenant, key string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, tx := beginHolder(t, dsn)
	var one int
	require.NoError(t, tx.QueryRow(ctx, `SELECT 1 FROM `+pgx.Identifier{table}.Sanitize()+` WHERE tenant = $1 AND key = $2 FOR UPDATE`,
		tenant, key).Scan(&one))
	return endHolder(t, conn, tx)
}

// HoldTableLock locks table of the PostgreSQL store at dsn (LOCK TABLE
// … IN ACCESS EXCLUSIVE MODE, as an operator's migration or maintenance
// would), from a session of its own, and returns the session and the
// lock's release: every statement that reads or writes the table waits
// for it, for as long as the DSN sets no lock_timeout.
func HoldTableLock(t testing.TB, dsn, table string) (holder *pgx.Conn, release func()) {
	t.Helper()
	conn, tx := beginHolder(t, dsn)
	_, err := tx.Exec(context.Background(), `LOCK TABLE `+pgx.Identifier{table}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	return conn, endHolder(t, conn, tx)
}

// beginHolder opens a session to dsn and begins the transaction that
// holds a lock in it.
func beginHolder(t testing.TB, dsn string) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	return conn, tx
}

// endHolder is the release of a lock beginHolder's transaction holds:
// it rolls the transaction back and closes the session, at its first
// call only.
func endHolder(t testing.TB, conn *pgx.Conn, tx pgx.Tx) func() {
	return sync.OnceFunc(func() {
		ctx := context.Background()
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, conn.Close(ctx))
	})
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
	holder, release := HoldTableLock(t, dsn, table)
	sendCtx, cancel := context.WithCancel(context.Background())
	sent := make(chan error, 1)
	go func() { sent <- send(sendCtx) }()
	WaitBlockedBy(t, holder, "the request")
	cancel()
	sendErr = <-sent
	return release, sendErr
}

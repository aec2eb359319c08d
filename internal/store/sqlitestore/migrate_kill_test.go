package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// TestMigrationKilled: a process killed (SIGKILL) in the middle of
// migrating a ledger from version 4 leaves it at version 4 with every
// row and a sound file: the migrations share one transaction. The next
// Migrate applies them all.
func TestMigrationKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 4)
	const n = 5000
	exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state, revision, created_at, updated_at)
		SELECT 't', 'k-' || i, 'act', 'dest', 1, 'fp', X'7B7D', 'succeeded', 3, i, i FROM n`, n)
	exec(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, outcome)
		SELECT 'a-' || key, tenant, key, 1, 1, 'w', created_at, created_at, 'succeeded' FROM operations`)
	exec(`INSERT INTO timeline (tenant, key, at, actor, event) SELECT tenant, key, created_at, 'w', 'recorded' FROM operations`)
	require.NoError(t, db.Close())

	child := newMigrateChild(path)
	require.NoError(t, child.Start())
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	// The child is migrating while it holds the file's write lock: the
	// probe's BEGIN IMMEDIATE, which does not wait, fails then.
	probe, err := sql.Open("sqlite", FileURI(path)+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer probe.Close()
	conn, err := probe.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for {
		select {
		case err := <-exited:
			t.Fatalf("the child ended before it was seen migrating: %v", err)
		default:
		}
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			var se *sqlite.Error
			require.True(t, errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY, "%v", err)
			break
		}
		_, err := conn.ExecContext(ctx, `ROLLBACK`)
		require.NoError(t, err)
	}
	require.NoError(t, child.Process.Kill())
	<-exited

	var check string
	var version, ops, attempts int
	require.NoError(t, conn.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check))
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&version))
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM operations`).Scan(&ops))
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM attempts`).Scan(&attempts))
	require.Equal(t, "ok", check)
	require.Equal(t, 4, version, "nothing applied")
	require.Equal(t, []int{n, n}, []int{ops, attempts})
	require.NoError(t, conn.Close())

	openMigrated(t, path, 4, "005_lighter_writes.sql")
	db, err = openRawDB(path)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM attempts a JOIN operations o ON o.id = a.operation_id WHERE a.destination = 'dest'`).Scan(&attempts))
	require.Equal(t, n, attempts, "every attempt kept, under its operation")
}

// newMigrateChild runs TestMigrationKilledChild in a process of its own.
func newMigrateChild(path string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestMigrationKilledChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OPLEDGER_MIGRATE_KILL_PATH="+path)
	return cmd
}

// TestMigrationKilledChild migrates the ledger that TestMigrationKilled
// names, in the process it kills.
func TestMigrationKilledChild(t *testing.T) {
	path := os.Getenv("OPLEDGER_MIGRATE_KILL_PATH")
	if path == "" {
		t.Skip("run by TestMigrationKilled")
	}
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(ctx, nil))
}

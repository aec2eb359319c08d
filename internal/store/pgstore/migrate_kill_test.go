package pgstore

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
)

// TestMigrationKilled: a process killed (SIGKILL) in the middle of
// migrating a ledger from version 4 (here while migration 005 waits for
// a lock on attempts that another session holds) leaves it at version 4:
// the migrations share one transaction, which the server rolls back once
// it finds the client gone. The next Migrate waits for that session's
// locks, then applies them all.
func TestMigrationKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, conn, run := schemaAtVersion(t, 4)
	run(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state, revision, created_at, updated_at)
		SELECT 't', 'k-' || i, 'act', 'dest', 1, 'fp', '\x7b7d', 'succeeded', 3, now(), now() FROM generate_series(1, 1000) i`)
	run(`INSERT INTO attempts (id, tenant, key, number, fencing_token, worker, claimed_at, lease_expires_at, outcome)
		SELECT 'a-' || key, tenant, key, 1, 1, 'w', created_at, created_at, 'succeeded' FROM operations`)
	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close(context.Background()) })
	for _, q := range []string{`BEGIN`, `LOCK TABLE attempts IN ACCESS SHARE MODE`} {
		_, err := holder.Exec(ctx, q)
		require.NoError(t, err, q)
	}

	child := exec.Command(os.Args[0], "-test.run=^TestMigrationKilledChild$", "-test.count=1")
	child.Env = append(os.Environ(), "OPLEDGER_MIGRATE_KILL_DSN="+dsn)
	require.NoError(t, child.Start())
	testdb.WaitBlockedBy(t, holder, "the migration")
	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	_, err = holder.Exec(ctx, `COMMIT`)
	require.NoError(t, err)

	var version, attempts int
	require.NoError(t, conn.QueryRow(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&version))
	require.Equal(t, 4, version, "nothing applied")
	s := migrateFrom(t, dsn, 4, "005_lighter_writes.sql")
	current, newest, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, newest, current)
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE destination = 'dest'`).Scan(&attempts))
	require.Equal(t, 1000, attempts)
}

// TestMigrationKilledChild migrates the ledger that TestMigrationKilled
// names, in the process it kills.
func TestMigrationKilledChild(t *testing.T) {
	dsn := os.Getenv("OPLEDGER_MIGRATE_KILL_DSN")
	if dsn == "" {
		t.Skip("run by TestMigrationKilled")
	}
	ctx := context.Background()
	s, err := Open(ctx, dsn)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(ctx, nil))
}

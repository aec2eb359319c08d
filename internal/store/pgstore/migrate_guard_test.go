package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
)

// TestMigrationWaitsForWrites: a migration waits for the write
// transactions under way (each holds the lock on schema_migrations it
// takes first, here another session's) rather than commit under them;
// a store that lacks no migration is told from a read and waits for
// none of them, so that opening the ledger beside a busy one does not
// hold up its writes.
func TestMigrationWaitsForWrites(t *testing.T) {
	t.Parallel()
	newest, err := newestVersion()
	require.NoError(t, err)
	dsn, _, _ := schemaAtVersion(t, newest-1)
	bg := context.Background()
	writer, err := pgx.Connect(bg, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { writer.Close(bg) })
	write := func() {
		t.Helper()
		for _, q := range []string{`BEGIN`, schemaLockSQL} {
			_, err := writer.Exec(bg, q)
			require.NoError(t, err, q)
		}
	}

	write()
	s, err := Open(bg, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	done := make(chan error, 1)
	go func() { done <- s.Migrate(bg, nil) }()
	testdb.WaitBlockedBy(t, writer, "the migration")
	_, err = writer.Exec(bg, `COMMIT`)
	require.NoError(t, err)
	require.NoError(t, <-done)
	current, _, err := s.SchemaVersion(bg)
	require.NoError(t, err)
	require.Equal(t, newest, current)

	write()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	require.NoError(t, s.Migrate(ctx, nil), "up to date: told from a read, without waiting for the writer")
	_, err = writer.Exec(bg, `COMMIT`)
	require.NoError(t, err)
}

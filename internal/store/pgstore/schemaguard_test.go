package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWriteWaitsForANewerMigrationAndStops: a write transaction that
// begins while a newer release's migration is under way (it holds
// schema_migrations as Migrate does) waits for it, then finds the newer
// version and writes nothing (store.ErrSchemaNewer), instead of writing
// in the terms of the schema it knew into the one just migrated.
func TestWriteWaitsForANewerMigrationAndStops(t *testing.T) {
	t.Parallel()
	s, dsn := openStore(t)
	bg := context.Background()
	migration, err := pgx.Connect(bg, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { migration.Close(bg) })
	for _, q := range []string{`BEGIN`, `LOCK TABLE schema_migrations IN EXCLUSIVE MODE`,
		`INSERT INTO schema_migrations (version, name) VALUES (999, '999_from_the_future.sql')`} {
		_, err = migration.Exec(bg, q)
		require.NoError(t, err, q)
	}

	done := make(chan error, 1)
	go func() {
		done <- s.Update(bg, func(ctx context.Context, tx store.Tx) error {
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			return store.WriteAll(ctx, tx, []store.Write{
				{InsertOperation: &store.Operation{Tenant: "t", Key: "k", Action: "a", Destination: "d",
					Version: 1, Fingerprint: "f", State: "pending", Revision: 1, CreatedAt: now, UpdatedAt: now}},
				{AppendTimeline: &store.TimelineEntry{Tenant: "t", Key: "k", At: now, Actor: "w", Event: "recorded"}},
			})
		})
	}()
	testdb.WaitBlockedBy(t, migration, "the write transaction")
	_, err = migration.Exec(bg, `COMMIT`)
	require.NoError(t, err)
	err = <-done
	require.ErrorIs(t, err, store.ErrSchemaNewer)
	require.ErrorContains(t, err, "the store's schema is at version 999, newer than this opledger knows")
	var n int
	require.NoError(t, migration.QueryRow(bg, `SELECT count(*) FROM operations`).Scan(&n))
	require.Zero(t, n, "nothing written")
}

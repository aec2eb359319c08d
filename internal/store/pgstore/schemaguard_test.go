package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/pgstore"
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
		done <- recordOne(bg, s)
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

// TestGuardLockNeedsUpdatePrivilege: a role that may write the ledger's
// tables but only read schema_migrations cannot take the schema guard's
// lock on PostgreSQL 15 and older; its writes are refused with an error
// that says which privilege is missing, and it writes once granted it.
// (From PostgreSQL 16, INSERT also allows the lock.)
func TestGuardLockNeedsUpdatePrivilege(t *testing.T) {
	t.Parallel()
	_, dsn := openStore(t)
	bg := context.Background()
	roleDSN, role, admin, version := testdb.RoleWithoutGuardLock(t, dsn, "app")
	s, err := pgstore.Open(bg, roleDSN)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	write := func() error { return recordOne(bg, s) }
	if version <= 15 {
		err = write()
		require.ErrorContains(t, err, "permission denied for table schema_migrations")
		require.ErrorContains(t, err, "needs UPDATE on it (GRANT SELECT, UPDATE ON schema_migrations TO the role")
	}
	_, err = admin.Exec(bg, `GRANT UPDATE ON schema_migrations TO `+role)
	require.NoError(t, err)
	require.NoError(t, write())
}

// recordOne writes operation k of tenant t, as recording it does: the
// row and its first timeline entry.
func recordOne(ctx context.Context, s store.Store) error {
	return s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
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
}

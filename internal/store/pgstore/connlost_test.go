package pgstore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// TestConnectionLostBeforeCommit: a pooled connection that the server's
// going away killed is handed out once more (the pool checks only those
// idle for over a second). A read on it, or a transaction that loses it
// before its COMMIT is sent, recorded nothing and is store.ErrUnavailable,
// as when no connection can be made (the API's 503, not a 500); a
// transaction that loses it in the COMMIT's round trip may have committed,
// and is not.
func TestConnectionLostBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := testdb.PostgresDSN(t)
	check, err := Open(ctx, direct)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, check.Close()) })
	require.NoError(t, check.Migrate(ctx, nil))
	require.NoError(t, writeInTime(ctx, check, request("k", "first", 0).decide))
	revision := func() int64 {
		t.Helper()
		var rev int64
		require.NoError(t, check.View(ctx, func(ctx context.Context, r store.Reader) error {
			op, err := r.GetOperation(ctx, "t", "k")
			if err == nil {
				rev = op.Revision
			}
			return err
		}))
		return rev
	}
	// relayed opens a store through a relay, with one connection that has
	// been used once, and the relay's cut.
	relayed := func(t *testing.T) (*Store, func()) {
		dsn, cut := testdb.UnreachablePostgres(t, direct+"&pool_max_conns=1", "relay-pw")
		s, err := Open(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		require.Equal(t, int32(1), s.pool.Stat().TotalConns())
		return s, cut
	}
	bump := func(ctx context.Context, tx store.Tx) (*store.Operation, error) {
		op, err := tx.GetOperation(ctx, "t", "k")
		if err != nil {
			return nil, err
		}
		prev := op.Revision
		op.Revision++
		return op, tx.UpdateOperation(ctx, op, prev)
	}

	t.Run("Read", func(t *testing.T) {
		s, cut := relayed(t)
		cut()
		err := s.View(ctx, func(ctx context.Context, r store.Reader) error {
			_, err := r.GetOperation(ctx, "t", "k")
			return err
		})
		require.ErrorIs(t, err, store.ErrUnavailable)
	})
	t.Run("InTransaction", func(t *testing.T) {
		s, cut := relayed(t)
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := bump(ctx, tx); err != nil {
				return err
			}
			cut()
			_, err := tx.GetOperation(ctx, "t", "other") // sends the update, then reads
			return err
		})
		require.ErrorIs(t, err, store.ErrUnavailable)
		require.Equal(t, int64(1), revision(), "nothing recorded")
	})
	t.Run("AtCommit", func(t *testing.T) {
		s, cut := relayed(t)
		err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			_, err := bump(ctx, tx) // goes out with COMMIT
			cut()
			return err
		})
		require.ErrorContains(t, err, "commit: ")
		require.NotErrorIs(t, err, store.ErrUnavailable, "it may have committed")
	})
}

// TestConnectionTerminatedByServer: a pooled connection whose session the
// server ended (a restart or fast shutdown, a failover,
// pg_terminate_backend, idle_session_timeout) answers its next statement
// with the FATAL error it was closed with (57P01 here). A read on it, or a
// transaction before its COMMIT, recorded nothing and is
// store.ErrUnavailable (the API's 503, not a 500), as when the connection
// is cut without a word; so is the schema version GET /readyz reads.
func TestConnectionTerminatedByServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	s, err := Open(ctx, dsn+"&pool_max_conns=1")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, writeInTime(ctx, s, request("k", "first", 0).decide))
	admin, err := Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, admin.Close()) })
	// terminate ends the session of the store's one connection, and
	// waits until it has ended.
	terminate := func(t *testing.T) {
		t.Helper()
		var pid int
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		var ended bool
		require.NoError(t, admin.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended))
		require.True(t, ended)
	}
	revision := func() int64 {
		t.Helper()
		var rev int64
		require.NoError(t, admin.View(ctx, func(ctx context.Context, r store.Reader) error {
			op, err := r.GetOperation(ctx, "t", "k")
			if err == nil {
				rev = op.Revision
			}
			return err
		}))
		return rev
	}

	terminate(t)
	err = s.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t", "k")
		return err
	})
	require.ErrorIs(t, err, store.ErrUnavailable, "a read")
	require.ErrorContains(t, err, "57P01", "the server's own words are kept")

	terminate(t)
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		op, err := tx.GetOperation(ctx, "t", "k")
		if err != nil {
			return err
		}
		prev := op.Revision
		op.Revision++
		return tx.UpdateOperation(ctx, op, prev)
	})
	require.ErrorIs(t, err, store.ErrUnavailable, "a transaction before its COMMIT")
	require.Equal(t, int64(1), revision(), "nothing recorded")

	terminate(t)
	err = s.ViewSnapshot(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t", "k")
		return err
	})
	require.ErrorIs(t, err, store.ErrUnavailable, "a snapshot")

	terminate(t)
	_, _, err = s.SchemaVersion(ctx)
	require.ErrorIs(t, err, store.ErrUnavailable, "the schema version (Ledger.Ping)")
}

// TestMigrationLosesConnection: the migrations share one transaction. A
// connection lost before its COMMIT is sent recorded nothing, and Migrate
// says so as every write transaction does (store.ErrUnavailable, the
// API's 503); lost in the COMMIT's round trip, it may have committed, and
// is not.
func TestMigrationLosesConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, at := range map[string]func(done, total int) bool{
		"BeforeCommit": func(done, total int) bool { return done == 1 },
		"AtCommit":     func(done, total int) bool { return done == total },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			direct := testdb.PostgresDSN(t)
			dsn, cut := testdb.UnreachablePostgres(t, direct+"&pool_max_conns=1", "relay-pw")
			s, err := Open(ctx, dsn)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			err = s.Migrate(ctx, func(done, total int, _ string) {
				if at(done, total) {
					cut()
				}
			})
			require.Error(t, err)
			check, oerr := Open(ctx, direct)
			require.NoError(t, oerr)
			t.Cleanup(func() { require.NoError(t, check.Close()) })
			current, _, verr := check.SchemaVersion(ctx)
			require.NoError(t, verr)
			if name == "BeforeCommit" {
				require.ErrorIs(t, err, store.ErrUnavailable)
				require.Zero(t, current, "nothing recorded")
				return
			}
			require.ErrorContains(t, err, "commit migration: ")
			require.NotErrorIs(t, err, store.ErrUnavailable, "it may have committed")
		})
	}
}

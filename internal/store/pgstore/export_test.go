package pgstore

import (
	"context"

	"github.com/opledger/opledger/internal/store"
)

// What the external tests (package pgstore_test) need of the internals.

// TxBackendPID is the PostgreSQL backend that runs tx, a transaction of
// Store.Update.
func TxBackendPID(ctx context.Context, tx store.Tx) (int, error) {
	var pid int
	err := tx.(*pgTx).q.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
	return pid, err
}

// Blocking reports whether some backend waits for a lock that backend pid
// holds (or waits for before it), as pg_blocking_pids tells.
func (s *Store) Blocking(ctx context.Context, pid int) (bool, error) {
	var waiting bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE $1::int = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting)
	return waiting, err
}

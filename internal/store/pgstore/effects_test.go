package pgstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// TestEffectsCarriedAtCommit: a tenant's running totals of compacted
// effects are written just before COMMIT, so a compaction still at work
// holds no lock on them, and another compaction's tombstones of the same
// tenant commit meanwhile. They used to be written with the statement
// after the tombstone: the second compaction then waited for the first
// to commit (here past the DSN's lock_timeout, store.ErrBusy), and two
// compactions each holding rows the other was to lock deadlocked.
func TestEffectsCarriedAtCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	first, err := Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, first.Close()) })
	require.NoError(t, first.Migrate(ctx, nil))
	second, err := Open(ctx, dsn+"&lock_timeout=5000")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, second.Close()) })

	now := time.Now().UTC().Truncate(time.Microsecond)
	tombstone := func(key string) *store.Tombstone {
		return &store.Tombstone{Tenant: "t", Key: key, Fingerprint: "f", State: "succeeded",
			CreatedAt: now, FinishedAt: now, CompactedAt: now}
	}
	wrote, release, firstDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // before the stores close, should the test fail
	go func() {
		firstDone <- first.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if err := tx.UpsertTombstone(ctx, tombstone("a")); err != nil {
				return err
			}
			// A statement after the tombstone, as compaction's next
			// operation: the totals used to go out with it.
			if _, err := tx.GetOperation(ctx, "t", "next"); !errors.Is(err, store.ErrNotFound) {
				return err
			}
			close(wrote)
			<-release
			return nil
		})
	}()
	select {
	case <-wrote:
	case err := <-firstDone:
		t.Fatalf("the first compaction ended early: %v", err)
	}
	require.NoError(t, second.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.UpsertTombstone(ctx, tombstone("b"))
	}), "the second commits while the first is open")
	releaseOnce()
	require.NoError(t, <-firstDone)

	var confirmed int
	require.NoError(t, first.pool.QueryRow(ctx, `SELECT confirmed FROM compacted_effects WHERE tenant = 't'`).Scan(&confirmed))
	require.Equal(t, 2, confirmed, "both compactions' effects, each once")
}

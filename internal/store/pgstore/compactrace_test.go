package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestSpeculativeInsertDuringCompaction races the conditional insert of a
// key (a repeat whose ledger guessed the key new) against the compaction
// of that key's finished operation. The compaction holds its transaction
// open, tombstone written and row deleted, until the insert is seen
// waiting on it; then it commits. The insert took its snapshot before the
// tombstone existed and its conflict with the row vanished with the
// delete, yet it must not write a fresh operation: the key is known, as a
// tombstone, and a second row would run the action again. The insert is
// written alone, and in a shared transaction beside another caller's,
// who must still be written.
func TestSpeculativeInsertDuringCompaction(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "shared"}[shared], func(t *testing.T) {
			t.Parallel()
			insertDuringCompaction(t, shared)
		})
	}
}

func insertDuringCompaction(t *testing.T, shared bool) {
	ctx := context.Background()
	s := openMigrated(t)

	now := time.Now().UTC().Truncate(time.Microsecond)
	done := newOp("k", now)
	done.State = "succeeded"
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertOperation(ctx, done)
	}))

	inserted, otherErr := make(chan error, 1), make(chan error, 1)
	compacted := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.CompactOperations(ctx, []store.Compaction{{Revision: done.Revision, Tombstone: store.Tombstone{
			Tenant: "t", Key: "k", Fingerprint: "f", State: "succeeded", CreatedAt: now, FinishedAt: now, CompactedAt: now}}}); err != nil {
			return err
		}
		var pid int
		if err := tx.(*pgTx).q.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		go func() {
			if !shared {
				inserted <- s.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
					return []store.Write{{InsertOperation: newOp("k", now)}}, nil
				})
				return
			}
			group := []*condRequest{request("k", "repeat", 0), request("other", "fine", 0)}
			s.group.write(group)
			<-group[1].done
			otherErr <- group[1].err
			<-group[0].done
			inserted <- group[0].err
		}()
		// Commit only once the insert waits for this transaction.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting bool
			if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting); err != nil {
				return err
			}
			if waiting {
				return nil
			}
			select {
			case err := <-inserted:
				t.Fatalf("the insert finished without waiting for the compaction: %v", err)
			default:
			}
			require.True(t, time.Now().Before(deadline), "the insert never waited for the compaction")
			time.Sleep(5 * time.Millisecond)
		}
	})
	require.NoError(t, compacted)
	require.ErrorIs(t, <-inserted, store.ErrConflict)
	if shared {
		require.NoError(t, <-otherErr, "the other caller of the aborted transaction is written on its own")
	}

	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t", "k")
		require.ErrorIs(t, err, store.ErrNotFound, "a compacted key got a fresh operation")
		if shared {
			_, err = r.GetOperation(ctx, "t", "other")
			require.NoError(t, err)
		}
		_, err = r.GetTombstone(ctx, "t", "k")
		return err
	}))
}

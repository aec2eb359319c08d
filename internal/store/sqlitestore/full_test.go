package sqlitestore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestDiskFull: a write that needs a page the database may not have
// (SQLITE_FULL, as on a full disk; here the writer's max_page_count stands
// in for the disk) fails with store.ErrFull, alone or in a shared
// transaction, and nothing of it is stored; reads go on.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	at := time.Now().UTC().Truncate(time.Microsecond)
	// No page beyond those the file has now.
	_, err := s.wconn.ExecContext(ctx, `PRAGMA max_page_count = 1`)
	require.NoError(t, err)

	big := condOp("big", 1, at)
	big.Payload = []byte(`{"x":"` + strings.Repeat("x", 256<<10) + `"}`)
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return tx.InsertOperation(ctx, big) })
	require.ErrorIs(t, err, store.ErrFull)
	require.ErrorContains(t, err, "the ledger's disk is full; nothing was recorded")
	require.NotErrorIs(t, err, store.ErrBusy)

	err = s.WriteConditional(ctx, func(time.Time) ([]store.Write, error) {
		return []store.Write{{InsertOperation: big}}, nil
	})
	require.ErrorIs(t, err, store.ErrFull)

	err = s.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t", "big")
		return err
	})
	require.ErrorIs(t, err, store.ErrNotFound, "nothing was stored")
}

// TestWALSizeLimit: every connection of the store cuts the WAL file back to
// walSizeLimit when it resets it, so that one large transaction does not
// leave it at its peak size for good.
func TestWALSizeLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	var n int64
	require.NoError(t, s.wconn.QueryRowContext(ctx, `PRAGMA journal_size_limit`).Scan(&n))
	require.EqualValues(t, walSizeLimit, n, "the writer")
	require.NoError(t, s.reader.QueryRowContext(ctx, `PRAGMA journal_size_limit`).Scan(&n))
	require.EqualValues(t, walSizeLimit, n, "a reader")
}

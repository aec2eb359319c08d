package opledger_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWriterWork: a SQLite ledger counts the batches its writer ran, the
// writes they carried and the time it was busy with them; concurrent
// callers' writes are each counted once, however they were batched;
// PostgreSQL has no one writer to count.
func TestWriterWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	record := func(key string) error {
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)})
		return err
	}

	before, ok := l.WriterWork()
	require.True(t, ok)
	require.NoError(t, record("work:alone"))
	alone, _ := l.WriterWork()
	require.Equal(t, int64(1), alone.Writes-before.Writes, "one Record, one write")
	require.Equal(t, int64(1), alone.Batches-before.Batches, "a caller alone commits alone")
	require.Greater(t, alone.Busy, before.Busy)

	const callers = 40
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() { errs <- record("work:" + strconv.Itoa(i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	after, _ := l.WriterWork()
	require.Equal(t, int64(callers), after.Writes-alone.Writes, "each write counted once")
	require.GreaterOrEqual(t, after.Batches-alone.Batches, int64(1))
	require.LessOrEqual(t, after.Batches-alone.Batches, int64(callers), "no more batches than writes")
	require.Greater(t, after.Busy, alone.Busy)
	other, err := l.WithTenant("other")
	require.NoError(t, err)
	tenant, _ := other.WriterWork()
	require.Equal(t, after, tenant, "one writer for every tenant's view")

	pg, err := opledger.Open(ctx, testdb.PostgresDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { pg.Close() })
	w, ok := pg.WriterWork()
	require.False(t, ok)
	require.Zero(t, w)
}

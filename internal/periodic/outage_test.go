package periodic_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/periodic"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestRunLogsAStoreOutageAsItGrows: a job whose store could not take it
// (here PostgreSQL, another session holding the operations table past
// the DSN's lock_timeout: busy) logged an ERROR at every turn, however
// long the outage: the lease sweep every 5 s, and so on for each loop.
// A store failure is now logged at WARN at the first and as their count
// doubles, at DEBUG between, and once at INFO when a run succeeds again,
// with the count; other errors are still logged at ERROR at every turn
// (TestRunAtOnceThenAtInterval).
func TestRunLogsAStoreOutageAsItGrows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t) + "&lock_timeout=20ms"
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE operations IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	h := testrig.NewRecordChan()
	defer close(h.Done)
	turn := make(chan struct{})
	jobCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		// Each run starts when the test says, and is logged before the
		// next starts.
		periodic.Run(jobCtx, time.Millisecond, slog.New(h), "expire leases", func(ctx context.Context) error {
			select {
			case <-turn:
			case <-ctx.Done():
				return ctx.Err()
			}
			_, err := l.ExpireLeases(ctx)
			return err
		})
	}()
	const failed = 9
	var levels []slog.Level
	for n := 1; n <= failed; n++ {
		turn <- struct{}{}
		rec := <-h.Records
		require.Equal(t, "expire leases", rec.Message)
		require.EqualValues(t, n, testrig.Attr(t, rec, "failures").Int64())
		require.Equal(t, "store_busy", testrig.Attr(t, rec, "problem").String())
		err, _ := testrig.Attr(t, rec, "error").Any().(error)
		require.ErrorIs(t, err, opledger.ErrStoreBusy)
		levels = append(levels, rec.Level)
	}
	require.Equal(t, []slog.Level{slog.LevelWarn, slog.LevelWarn, slog.LevelDebug, slog.LevelWarn, slog.LevelDebug,
		slog.LevelDebug, slog.LevelDebug, slog.LevelWarn, slog.LevelDebug}, levels, "at the first failure and as the count doubles")
	require.NoError(t, tx.Rollback(ctx))
	turn <- struct{}{}
	select {
	case rec := <-h.Records:
		require.Equal(t, slog.LevelInfo, rec.Level)
		require.Equal(t, "expire leases: store reachable again", rec.Message)
		require.EqualValues(t, failed, testrig.Attr(t, rec, "failures").Int64())
	case <-time.After(time.Minute):
		// A failure guard only: the line comes as the run ends.
		t.Fatal("no line when the store answered again")
	}
	cancel()
	<-returned
}

// TestStoreProblem: the ledger's errors for a store that could not take
// a request, however wrapped, are named as the API names them; any other
// error is not a store problem.
func TestStoreProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("claim next: %w", opledger.ErrStoreUnavailable), "unavailable"},
		{fmt.Errorf("expire leases: %w", opledger.ErrStoreBusy), "store_busy"},
		{fmt.Errorf("claim next: %w", opledger.ErrStoreFull), "store_full"},
		{fmt.Errorf("claim next: %w", opledger.ErrSchemaNewer), ""},
		{errors.New("disk full"), ""},
		{nil, ""},
	} {
		require.Equal(t, tc.want, periodic.StoreProblem(tc.err), "%v", tc.err)
	}
}

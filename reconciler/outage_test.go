package reconciler_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// lookupDest is a Go destination with an authoritative lookup that finds
// nothing; its calls succeed.
type lookupDest struct{}

func (lookupDest) Name() string { return "crm" }
func (lookupDest) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (lookupDest) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{Ref: "R1"}, nil
}
func (lookupDest) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	return destination.LookupResult{}, nil
}

// TestRunLogsAStoreOutageAsItGrows: a pass whose queue the store could
// not read (here PostgreSQL, another session holding the operations
// table past the DSN's lock_timeout: busy) was logged at ERROR, every
// pass, however long the outage. Such a failure is now logged as the
// executor's workers log theirs: at WARN at the first and as the count
// doubles, at DEBUG between, and once at INFO, with the count, at the
// first pass the store answers.
func TestRunLogsAStoreOutageAsItGrows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t) + "&lock_timeout=20ms"
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	set, err := destination.NewSet(lookupDest{})
	require.NoError(t, err)
	h := testrig.NewRecordChan()
	defer close(h.Done)
	rec, err := reconciler.New(l, reconciler.Config{Destinations: set, Interval: time.Millisecond, Logger: slog.New(h)})
	require.NoError(t, err)
	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "LOCK TABLE operations IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- rec.Run(runCtx) }()
	// Each failed pass is logged before the next begins; the lock goes
	// after the fifth, and the passes that failed meanwhile are logged
	// by the same rule.
	failures := 0
	for {
		r := <-h.Records
		if r.Level == slog.LevelInfo {
			require.Equal(t, "reconcile pass: store reachable again", r.Message)
			require.EqualValues(t, failures, testrig.Attr(t, r, "failures").Int64())
			break
		}
		failures++
		require.Equal(t, "reconcile pass", r.Message)
		require.EqualValues(t, failures, testrig.Attr(t, r, "failures").Int64())
		require.Equal(t, "store_busy", testrig.Attr(t, r, "problem").String())
		if failures&(failures-1) == 0 {
			require.Equal(t, slog.LevelWarn, r.Level, "failure %d: the first, or the count doubled", failures)
		} else {
			require.Equal(t, slog.LevelDebug, r.Level, "failure %d", failures)
		}
		if failures == 5 {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	cancel()
	require.NoError(t, <-returned)
}

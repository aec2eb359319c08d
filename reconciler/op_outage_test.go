package reconciler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// TestOperationStoreProblemsFollowTheOutageRule: an operation of a pass
// that the store could not take (here PostgreSQL, another session
// holding each uncertain operation's row past the DSN's lock_timeout:
// busy, though the queue itself was read) was logged at ERROR
// ("reconcile"), one line per operation of the batch, at every pass for
// as long as the outage lasted. Such failures are now counted across
// passes and logged by the outage rule: at WARN at the first and as the
// count doubles, at DEBUG between, and once at INFO ("reconcile: store
// reachable again") at the first operation the store takes after them.
func TestOperationStoreProblemsFollowTheOutageRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn+"&lock_timeout=20ms", opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	set, err := destination.NewSet(lookupDest{})
	require.NoError(t, err)
	const ops = 5
	var keys []string
	for i := range ops {
		key := "outage:" + strconv.Itoa(i)
		keys = append(keys, key)
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "create", Destination: "crm", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		c, err := l.Claim(ctx, key, opledger.ClaimOptions{Lease: time.Minute})
		require.NoError(t, err)
		_, err = l.Dispatch(ctx, key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)
	}
	sink := testrig.NewRecordSink("")
	rec, err := reconciler.New(l, reconciler.Config{Destinations: set, Concurrency: 2, Logger: slog.New(sink)})
	require.NoError(t, err)

	var releases []func()
	for _, key := range keys {
		releases = append(releases, testdb.HoldRowLock(t, dsn, "operations", opledger.DefaultTenant, key))
	}
	pass, err := rec.RunOnce(ctx)
	require.NoError(t, err, "the queue was read")
	require.Equal(t, ops, pass.Examined)
	require.Equal(t, ops, pass.Errors)
	for _, release := range releases {
		release()
	}
	failures := 0
	for _, r := range sink.Drain() {
		require.NotEqual(t, slog.LevelError, r.Level, "%s: a store problem is no ERROR", r.Message)
		if r.Message != "reconcile" {
			continue
		}
		failures++
		require.EqualValues(t, failures, testrig.Attr(t, r, "failures").Int64())
		require.Equal(t, "store_busy", testrig.Attr(t, r, "problem").String())
		if failures&(failures-1) == 0 {
			require.Equal(t, slog.LevelWarn, r.Level, "failure %d: the first, or the count doubled", failures)
		} else {
			require.Equal(t, slog.LevelDebug, r.Level, "failure %d", failures)
		}
	}
	require.Equal(t, ops, failures, "each operation's failure logged by the rule")

	// The store takes the operations again: the outage ends, said once.
	pass, err = rec.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, pass.Errors)
	var back []slog.Record
	for _, r := range sink.Drain() {
		if r.Message == "reconcile: store reachable again" {
			back = append(back, r)
		}
	}
	require.Len(t, back, 1)
	require.Equal(t, slog.LevelInfo, back[0].Level)
	require.EqualValues(t, ops, testrig.Attr(t, back[0], "failures").Int64())
}

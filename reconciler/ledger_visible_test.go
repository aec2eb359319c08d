package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/store/storetest"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// lateReporter is a Go destination whose lookup finds nothing, while the
// attempt whose lease ran out reports late (its call lasted until now):
// the ledger, not the reconciler, sees the visibility delay still run.
type lateReporter struct {
	report func()
}

func (*lateReporter) Name() string { return "late" }
func (*lateReporter) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true, VisibilityDelay: 30 * time.Second}}
}
func (*lateReporter) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (d *lateReporter) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	d.report()
	return destination.LookupResult{}, nil
}

// lateReportCase is an uncertain operation, its lease's visibility delay
// passed, whose lookup by rec (RecheckInterval recheck) finds nothing
// while its attempt reports late: the ledger sees the delay run again.
type lateReportCase struct {
	l        *opledger.Ledger
	clock    *storetest.Clock
	rec      *reconciler.Reconciler
	key      string
	reported *bool
}

func newLateReportCase(t *testing.T, newDSN func(testing.TB) string, recheck time.Duration) lateReportCase {
	t.Helper()
	ctx := context.Background()
	clock := &storetest.Clock{}
	l, err := opledger.Open(ctx, newDSN(t), opledger.Options{Clock: clock.Func, Lease: 10 * time.Second, SQLiteSynchronousNormal: true})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	key := "intake:LV1:create"
	_, _, err = l.Record(ctx, opledger.Intent{Key: key, Action: "create", Destination: "late", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	c, err := l.Claim(ctx, key, opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, key, c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	clock.Advance(11 * time.Second)
	n, err := l.ExpireLeases(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	clock.Advance(time.Minute) // the visibility delay since the lease's end has passed

	reported := false
	d := &lateReporter{report: func() {
		// Kept as evidence, refused as the holder's report.
		_, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.ErrorContains(t, err, "its report was kept as evidence")
		reported = true
	}}
	set, err := destination.NewSet(d)
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec, err := reconciler.New(l, reconciler.Config{Destinations: set, Logger: quiet, RecheckInterval: recheck})
	require.NoError(t, err)
	return lateReportCase{l: l, clock: clock, rec: rec, key: key, reported: &reported}
}

// TestLedgerVisibleAtIsKept: when the ledger itself keeps an operation
// uncertain because the visibility delay still runs (an attempt's late
// report moved the end of its call after the reconciler read the
// attempts), the next check is the ledger's "absence counts only after"
// time. The reconciler used to put it off by RecheckInterval instead,
// later than the record could become visible.
func TestLedgerVisibleAtIsKept(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		ctx := context.Background()
		c := newLateReportCase(t, newDSN, 10*time.Minute)
		l, key := c.l, c.key
		op, err := l.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)

		decision, err := c.rec.Reconcile(ctx, op)
		require.NoError(t, err)
		require.True(t, *c.reported)
		require.Equal(t, reconciler.Wait, decision)
		op, err = l.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
		attempts, err := l.Attempts(ctx, key)
		require.NoError(t, err)
		visible := opledger.LastCallEnd(op, attempts).Add(30 * time.Second)
		require.NotNil(t, op.NotBefore)
		require.WithinDuration(t, visible, *op.NotBefore, time.Millisecond,
			"the ledger's visible-at time, not RecheckInterval (10 min) from now")
	})
}

// TestLedgerVisibleAtOneEntryPerCheck: when the ledger keeps an operation
// uncertain within the visibility delay and the delay ends later than the
// reconciler's next recheck, the check wrote two timeline entries: the
// ledger's "lookup empty within visibility delay" and the reconciler's
// "reconcile deferred" for the recheck. It writes the ledger's alone now;
// the next check is the recheck all the same.
func TestLedgerVisibleAtOneEntryPerCheck(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		ctx := context.Background()
		c := newLateReportCase(t, newDSN, 10*time.Second)
		l, key := c.l, c.key
		op, err := l.Get(ctx, key)
		require.NoError(t, err)
		before, err := l.Timeline(ctx, key)
		require.NoError(t, err)

		decision, err := c.rec.Reconcile(ctx, op)
		require.NoError(t, err)
		require.True(t, *c.reported)
		require.Equal(t, reconciler.Wait, decision)
		after, err := l.Timeline(ctx, key)
		require.NoError(t, err)
		var written []string
		for _, e := range after[len(before):] {
			written = append(written, e.Event)
		}
		// The late report's entry, then the check's one.
		require.Equal(t, []string{"stale report kept as evidence", "lookup empty within visibility delay"}, written,
			"one entry for the check")

		op, err = l.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
		require.NotNil(t, op.NotBefore)
		require.Equal(t, 10*time.Second, op.NotBefore.Sub(op.UpdatedAt), "the recheck, sooner than the delay's end")
	})
}

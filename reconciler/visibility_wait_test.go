package reconciler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/store/storetest"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// slowEmptyLookup is a Go destination with an authoritative lookup and a
// 30 s visibility delay, whose calls end uncertain and whose lookups find
// nothing, each taking took of the ledger's time.
type slowEmptyLookup struct {
	clock *storetest.Clock
	took  time.Duration
}

func (*slowEmptyLookup) Name() string { return "slowempty" }
func (*slowEmptyLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true, VisibilityDelay: 30 * time.Second}}
}
func (*slowEmptyLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (d *slowEmptyLookup) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	d.clock.Advance(d.took) // the ledger's time, as a slow search takes it
	return destination.LookupResult{Evidence: "no record"}, nil
}

// TestVisibilityWaitEndsWhenTheDelayEnds: a lookup that finds nothing
// within the visibility delay is made again when the delay ends (by the
// end of the latest call), as the ledger's own check schedules it. The
// wait was the delay left when the lookup began, counted from when it
// ended: the next check came late by the lookup's duration, and a lookup
// begun within the delay that ended after it was not made again at once.
func TestVisibilityWaitEndsWhenTheDelayEnds(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		for _, tc := range []struct {
			name  string
			after time.Duration // since the call ended, when the lookup begins
		}{
			{"ends within the delay", 10 * time.Second},
			{"ends after the delay", 25 * time.Second},
		} {
			t.Run(tc.name, func(t *testing.T) {
				d := &slowEmptyLookup{took: 8 * time.Second}
				r := testrig.New(t, newDSN, func(o *testrig.Options) {
					o.Extra = []destination.Destination{d}
					o.Reconciler.RecheckInterval = time.Hour // the delay's end comes first
				})
				d.clock = r.Clock
				r.Record("lookup:V1", "slowempty", `{}`)
				op := r.Step()
				require.Equal(t, opledger.StateUncertain, op.State)
				visible := opledger.LastCallEnd(op, r.Attempts("lookup:V1")).Add(30 * time.Second)
				r.Clock.Advance(tc.after)

				require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait], "begun within the delay: nothing proven")
				op = r.Get("lookup:V1")
				require.Equal(t, opledger.StateUncertain, op.State)
				require.NotNil(t, op.NotBefore)
				if op.UpdatedAt.Before(visible) {
					require.WithinDuration(t, visible, *op.NotBefore, time.Second,
						"the next check when the delay ends, not %s later (the lookup's duration)", d.took)
					return
				}
				require.False(t, op.NotBefore.After(op.UpdatedAt), "the delay has ended: due again at once")
				require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Retry], "looked up again at once, after the delay: absence proven")
			})
		}
	})
}

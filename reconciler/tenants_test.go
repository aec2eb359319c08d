package reconciler_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// An uncertain operation of a tenant its destination does not serve (sent
// before the destination's tenants were narrowed) is not looked up with
// the destination's credentials: it waits, uncertain, and says why.
func TestNoLookupForATenantNotServed(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		yaml := strings.Replace(testrig.Destinations, "  - name: crm\n", "  - name: crm\n    tenants: [acme]\n", 1)
		require.NotEqual(t, testrig.Destinations, yaml)
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.YAML = yaml })
		tl, err := r.Ledger.WithTenant("globex")
		require.NoError(t, err)
		const key = "intake:T2:create"
		_, _, err = tl.Record(r.Ctx, opledger.Intent{Key: key, Action: "create", Destination: "crm",
			Payload: json.RawMessage(`{"units": 2}`), Owner: "ops-team"})
		require.NoError(t, err)
		// A worker of its own sent it and lost the answer.
		c, err := tl.ClaimNext(r.Ctx, opledger.ClaimNextOptions{Worker: "old-worker", Lease: time.Minute})
		require.NoError(t, err)
		_, err = tl.Dispatch(r.Ctx, key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		_, err = tl.Report(r.Ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)

		r.Clock.Advance(time.Hour)
		pass := r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Wait])
		require.Zero(t, r.Server.Lookups(), "no lookup with the destination's credentials")
		op, err := tl.Get(r.Ctx, key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
		timeline, err := tl.Timeline(r.Ctx, key)
		require.NoError(t, err)
		require.Contains(t, timeline[len(timeline)-1].Evidence, "destination crm does not serve tenant globex")

		// Checked again at each recheck, for as long as it stays so: the
		// timeline keeps the one entry (it used to get one more at every
		// recheck, 144 a day), while the next check moves on.
		for range 3 {
			r.Clock.Advance(10*time.Minute + time.Second)
			require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		}
		again, err := tl.Timeline(r.Ctx, key)
		require.NoError(t, err)
		require.Len(t, again, len(timeline), "no new timeline entry")
		op, err = tl.Get(r.Ctx, key)
		require.NoError(t, err)
		require.Equal(t, 10*time.Minute, op.NotBefore.Sub(op.UpdatedAt))
		require.Zero(t, r.Server.Lookups())
	})
}

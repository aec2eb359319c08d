package opledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// TestLookupFailureCountReadsNoWholeTimeline: at each failed lookup the
// reconciler counts the lookups failed since the operation became
// uncertain (it holds the operation at MaxLookupFailures), and read the
// operation's whole timeline for it, every entry of every earlier spell
// too. It reads none now (Ledger.LookupFailures); the count, the backoff
// and the hold are as before, a failure of an earlier spell left out.
func TestLookupFailureCountReadsNoWholeTimeline(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Reconciler.MaxLookupFailures = 3
			o.Reconciler.LookupBackoff = 10 * time.Second
		})
		const key = "intake:W1:create"
		r.Record(key, "crm", `{"units": 2}`)
		// An earlier spell: a failed lookup, then absence proven.
		r.Server.Fail(fakedest.DropBeforeCommit)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Server.FailLookups(1)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		r.Clock.Advance(31 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Retry])

		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Server.FailLookups(100)
		reads := opledger.CountWholeTimelineReads(r.Ledger)
		failures := func() int {
			t.Helper()
			n, err := r.Ledger.LookupFailures(r.Ctx, key)
			require.NoError(t, err)
			return n
		}
		require.Zero(t, failures(), "the earlier spell's failure left out")

		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		op := r.Get(key)
		require.Equal(t, 10*time.Second, op.NotBefore.Sub(op.UpdatedAt), "failure 1 of this spell")
		r.Clock.Advance(11 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		op = r.Get(key)
		require.Equal(t, 20*time.Second, op.NotBefore.Sub(op.UpdatedAt), "failure 2: the backoff doubles")
		require.Equal(t, 2, failures())
		r.Clock.Advance(21 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Held])
		require.Zero(t, reads(), "no whole timeline read to count the failures")

		require.Contains(t, r.Evidence(key, "held"), "3 lookups failed since the operation became uncertain")
		require.Equal(t, 1, r.Server.Effects())
		_, err := r.Ledger.LookupFailures(r.Ctx, "intake:none:create")
		require.ErrorIs(t, err, opledger.ErrNotFound)
	})
}

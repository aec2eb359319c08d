package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// keyedTwoStep is twoStepCRM with an idempotency key, whose lookup never
// finds the record the call reported.
type keyedTwoStep struct{ *twoStepCRM }

func (keyedTwoStep) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true, VisibilityDelay: time.Second},
		IdempotencyKey: &destination.IdempotencyKey{Header: "Idempotency-Key", Retention: time.Hour}}
}

func (keyedTwoStep) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	return destination.LookupResult{Evidence: "no record"}, nil
}

// TestReportedRefNotFoundWithKeyIsProtected: an attempt reported a
// reference without a success and the lookup cannot find it, so absence
// proves nothing; a destination whose idempotency key still protects a
// retry gets a protected one (it replays the record made, it cannot make
// another), as docs/destinations.md says, rather than a hold.
func TestReportedRefNotFoundWithKeyIsProtected(t *testing.T) {
	t.Parallel()
	crm := keyedTwoStep{newTwoStepCRM()}
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{crm} })
	r.Record("intake:K1:create", "twostep", `{"units": 2}`)
	require.Equal(t, opledger.StateUncertain, r.Step().State)
	r.Clock.Advance(time.Minute)
	require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Retry])
	op := r.Get("intake:K1:create")
	require.Equal(t, opledger.StatePending, op.State)
	require.True(t, op.Protected, "a protected retry, not a plain one")
	require.Contains(t, r.Evidence("intake:K1:create", "protected retry"), "without a success, so the record's absence proves nothing")
}

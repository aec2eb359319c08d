// Package storetest is the conformance suite every opledger store driver
// must pass. It drives the public opledger API over a fresh store per test,
// so the state machine, the claims, fencing, leases, retention and paging
// are checked identically on every driver.
//
// A driver's test calls Run once:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{NewDSN: func(t *testing.T) string { ... }})
//	}
//
// Allowed imports: opledger, testing helpers.
package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// Harness tells the suite how to get an empty store.
type Harness struct {
	// NewDSN returns the DSN of a fresh, empty store owned by t (removed in
	// t.Cleanup).
	NewDSN func(t *testing.T) string
	// LegacyRecovery stores, in the store of dsn, a recovery row (an
	// operator decision on an unresolved operation, for the recovery
	// figures) as a release before this one wrote it: with the
	// operation's key. RecoveryKeys counts the recovery rows of the
	// store of dsn that hold a key. Both read and write the store's
	// tables directly, for the check that retention clears those keys.
	LegacyRecovery func(t *testing.T, dsn, tenant, key string, at time.Time, waited time.Duration)
	RecoveryKeys   func(t *testing.T, dsn string) int
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	groups := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Record", testRecord},
		{"Tenants", testTenants},
		{"Claim", testClaim},
		{"Report", testReport},
		{"Lease", testLease},
		{"Fencing", testFencing},
		{"Reconcile", testReconcile},
		{"Resolve", testResolve},
		{"ApproveRevise", testApproveRevise},
		{"TransitionTable", testTransitionTable},
		{"ConcurrentClaims", testConcurrentClaims},
		{"ContentRace", testContentRace},
		{"FencingRace", testFencingRace},
		{"Tombstones", testTombstones},
		{"CompactionsAtOnce", testCompactionsAtOnce},
		{"Retention", testRetention},
		{"Paging", testPaging},
		{"Do", testDo},
		{"ClaimNext", testClaimNext},
		{"ReconcileQueue", testReconcileQueue},
		{"Tokens", testTokens},
		{"Sessions", testSessions},
		{"Stats", testStats},
		{"StatsDuringCompact", testStatsDuringCompact},
		{"Reviews", testReviews},
		{"Events", testEvents},
		{"EventRetention", testEventRetention},
		{"Workflows", testWorkflows},
		{"WorkflowCancel", testWorkflowCancel},
		{"Release", testRelease},
		{"ProtectedOperations", testProtectedOperations},
		{"Speculation", testSpeculation},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.fn(t, h)
		})
	}
}

// Clock shifts the store's clock by an offset the test controls.
type Clock struct{ offset atomic.Int64 }

// Advance moves the ledger's time forward by d.
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// Func is the opledger.Options.Clock hook.
func (c *Clock) Func(now time.Time) time.Time { return now.Add(time.Duration(c.offset.Load())) }

// bundle is what each test starts from.
type bundle struct {
	ctx    context.Context
	ledger *opledger.Ledger
	clock  *Clock
	dsn    string
}

// setup opens a ledger on a fresh store; adjust tweaks the options.
func setup(t *testing.T, h Harness, adjust ...func(*opledger.Options)) *bundle {
	t.Helper()
	ctx := context.Background()
	clock := &Clock{}
	opts := opledger.Options{Worker: "test-worker", Lease: 10 * time.Second, Clock: clock.Func,
		RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, MaxDelay: time.Minute}}
	for _, a := range adjust {
		a(&opts)
	}
	dsn := h.NewDSN(t)
	l, err := opledger.Open(ctx, dsn, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return &bundle{ctx: ctx, ledger: l, clock: clock, dsn: dsn}
}

// intent returns a simple intent for key.
func intent(key string) opledger.Intent {
	return opledger.Intent{Key: key, Action: "crm.create", Destination: "crm",
		Payload: []byte(`{"submission":"S-847","units":2}`), Owner: "ops"}
}

// claimed records key and claims it.
func (b *bundle) claimed(t *testing.T, key string) *opledger.Claim {
	t.Helper()
	_, _, err := b.ledger.Record(b.ctx, intent(key))
	require.NoError(t, err)
	c, err := b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{})
	require.NoError(t, err)
	return c
}

// abandoned records and claims key, then lets the claim's lease (10 s)
// run out and settles it: never dispatched, the attempt is abandoned and
// the operation pending again.
func (b *bundle) abandoned(t *testing.T, key string) *opledger.Claim {
	t.Helper()
	c := b.claimed(t, key)
	b.clock.Advance(11 * time.Second)
	_, err := b.ledger.ExpireLeases(b.ctx)
	require.NoError(t, err)
	return c
}

// claimDispatched claims key, already recorded, and dispatches the claim.
func (b *bundle) claimDispatched(t *testing.T, key string) *opledger.Claim {
	t.Helper()
	c, err := b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = b.ledger.Dispatch(b.ctx, key, c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	return c
}

// dispatched records, claims and dispatches key.
func (b *bundle) dispatched(t *testing.T, key string) *opledger.Claim {
	t.Helper()
	c := b.claimed(t, key)
	_, err := b.ledger.Dispatch(b.ctx, key, c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	return c
}

// uncertain records, claims and dispatches key, then lets the lease run
// out and expires it: the call may have happened, so key is uncertain.
func (b *bundle) uncertain(t *testing.T, key string) *opledger.Claim {
	t.Helper()
	c := b.dispatched(t, key)
	b.clock.Advance(11 * time.Second)
	_, err := b.ledger.ExpireLeases(b.ctx)
	require.NoError(t, err)
	b.requireState(t, key, opledger.StateUncertain)
	return c
}

// report reports an outcome for claim c of key.
func (b *bundle) report(t *testing.T, key string, c *opledger.Claim, r opledger.Report) *opledger.Operation {
	t.Helper()
	op, err := b.ledger.Report(b.ctx, key, c.AttemptID, c.FencingToken, r)
	require.NoError(t, err)
	return op
}

// inState builds an operation in the given state (failed means rejected).
func (b *bundle) inState(t *testing.T, key string, s opledger.State) *opledger.Operation {
	t.Helper()
	switch s {
	case opledger.StateAwaitingApproval:
		in := intent(key)
		in.RequiresApproval = true
		op, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		return op
	case opledger.StatePending:
		op, _, err := b.ledger.Record(b.ctx, intent(key))
		require.NoError(t, err)
		return op
	case opledger.StateInProgress:
		return b.claimed(t, key).Operation
	case opledger.StateUncertain:
		c := b.dispatched(t, key)
		return b.report(t, key, c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout after write"})
	case opledger.StateHeld:
		b.inState(t, key, opledger.StateUncertain)
		op, _, err := b.ledger.Reconcile(b.ctx, key, opledger.Finding{Evidence: "no lookup"})
		require.NoError(t, err)
		return op
	case opledger.StateSucceeded:
		c := b.dispatched(t, key)
		return b.report(t, key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "REF-" + key, Response: []byte(`{"id":1}`)})
	case opledger.StateFailed:
		c := b.dispatched(t, key)
		return b.report(t, key, c, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422 invalid field"})
	}
	t.Fatalf("no recipe for state %s", s)
	return nil
}

// requireState fails unless the stored operation is in state s.
func (b *bundle) requireState(t *testing.T, key string, s opledger.State) *opledger.Operation {
	t.Helper()
	op, err := b.ledger.Get(b.ctx, key)
	require.NoError(t, err)
	require.Equal(t, s, op.State, "state of %s", key)
	return op
}

// events lists the timeline events of key.
func (b *bundle) events(t *testing.T, key string) []string {
	t.Helper()
	tl, err := b.ledger.Timeline(b.ctx, key)
	require.NoError(t, err)
	var out []string
	for _, e := range tl {
		out = append(out, e.Event)
	}
	return out
}

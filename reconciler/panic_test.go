package reconciler_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// panickyLookup is a Go destination whose calls end uncertain and whose
// lookup panics, with a value naming the operation's key.
type panickyLookup struct{ calls atomic.Int32 }

func (*panickyLookup) Name() string { return "panicky" }
func (*panickyLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (d *panickyLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	d.calls.Add(1)
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (*panickyLookup) Lookup(_ context.Context, op *opledger.Operation, _ []string) (destination.LookupResult, error) {
	panic("lookup broke on " + op.Key)
}

// TestLookupPanicIsAFailedLookup: a lookup that panics does not take the
// reconciler down (it used to panic the pass and the process): it counts
// as a failed lookup, deferred with backoff, logged at ERROR with a stack
// and without the key, and nothing is sent again.
func TestLookupPanicIsAFailedLookup(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		d := &panickyLookup{}
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Extra = []destination.Destination{d}
			o.Reconciler.LookupBackoff = 10 * time.Second
		})
		r.Record("lookup:P1", "panicky", `{}`)
		require.Equal(t, opledger.StateUncertain, r.Step().State)

		var pass reconciler.Pass
		require.NotPanics(t, func() { pass = r.Reconcile() })
		require.Equal(t, 1, pass.Decisions[reconciler.Wait])
		op := r.Get("lookup:P1")
		require.Equal(t, opledger.StateUncertain, op.State, "a failed lookup decides nothing")
		require.Equal(t, 10*time.Second, op.NotBefore.Sub(op.UpdatedAt), "backing off")
		require.Contains(t, r.Evidence("lookup:P1", "reconcile deferred"), "lookup failed: lookup panicked: lookup broke on <key> (failure 1 of 8)")
		require.Contains(t, r.Logs(), `level=ERROR msg="lookup panicked"`)
		require.Contains(t, r.Logs(), "stack=")
		require.Nil(t, r.Step(), "nothing is sent again")
		require.Equal(t, int32(1), d.calls.Load())
	})
}

// TestNilLedgerAndOperationRefused: New with a nil ledger and Reconcile
// with a nil operation return errors (both used to panic).
func TestNilLedgerAndOperationRefused(t *testing.T) {
	t.Parallel()
	set, err := destination.NewSet(&panickyLookup{})
	require.NoError(t, err)
	_, err = reconciler.New(nil, reconciler.Config{Destinations: set})
	require.EqualError(t, err, "reconciler: a ledger is required: New was given a nil *opledger.Ledger")

	r := testrig.New(t, testdb.SQLiteDSN)
	d, err := r.Rec.Reconcile(r.Ctx, nil)
	require.EqualError(t, err, "reconciler: no operation to reconcile: Reconcile was given nil")
	require.Empty(t, d)
}

// longRefLookup is a Go destination whose calls end uncertain and whose
// lookup finds a matching record with a reference too long to store.
type longRefLookup struct{ calls atomic.Int32 }

func (*longRefLookup) Name() string { return "longref" }
func (*longRefLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (d *longRefLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	d.calls.Add(1)
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (*longRefLookup) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	return destination.LookupResult{Found: true, Matches: true, Ref: strings.Repeat("r", opledger.MaxDestinationRefBytes+1),
		Evidence: "found by external ref"}, nil
}

// TestUnstorableRefHeldAtOnce: a lookup that finds the record but gives a
// reference the ledger cannot store holds the operation at its first
// pass, saying why: looking again would find the same. Reconcile used to
// refuse the finding as invalid input, a failed lookup backed off and
// tried again 8 times before the hold.
func TestUnstorableRefHeldAtOnce(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		d := &longRefLookup{}
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{d} })
		r.Record("lookup:L1", "longref", `{}`)
		require.Equal(t, opledger.StateUncertain, r.Step().State)

		pass := r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Held])
		op := r.Get("lookup:L1")
		require.Equal(t, opledger.StateHeld, op.State)
		require.Empty(t, op.DestinationRef)
		tl, err := r.Ledger.Timeline(r.Ctx, "lookup:L1")
		require.NoError(t, err)
		require.Contains(t, tl[len(tl)-1].Evidence, "the lookup found the record, but its reference is not one the ledger can store (destination_ref is 201 bytes long; at most 200 are allowed); nothing was resent")
		require.Equal(t, int32(1), d.calls.Load())
	})
}

// chattyLookup is a Go destination whose calls end uncertain and whose
// lookup fails with, or panics with, a text holding what it is given:
// a destination's error may quote the request, a panic the operation.
type chattyLookup struct {
	failWith func(op *opledger.Operation) string
}

func (*chattyLookup) Name() string { return "chatty" }
func (*chattyLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (*chattyLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (d *chattyLookup) Lookup(_ context.Context, op *opledger.Operation, _ []string) (destination.LookupResult, error) {
	text := d.failWith(op)
	if strings.HasPrefix(text, "panic:") {
		panic(text)
	}
	return destination.LookupResult{}, errors.New(text)
}

// TestLookupTextsMaskedBeforeCut: a lookup's error, and a panic's text,
// are masked of sensitive values and of the key before they are cut to
// their bounds. Cut first, a value across the cut was kept in part,
// unmasked, in the timeline (the ledger masks only whole values) and in
// the log.
func TestLookupTextsMaskedBeforeCut(t *testing.T) {
	t.Parallel()
	const email = "ana.lovelace@example.invalid"
	for _, at := range []int{60, 290} { // 290: a cut at 300 bytes keeps "ana.lovel"
		d := &chattyLookup{failWith: func(*opledger.Operation) string {
			return strings.Repeat("x", at) + " " + email + " is not a valid search"
		}}
		r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{d} })
		_, _, err := r.Ledger.Record(r.Ctx, opledger.Intent{Key: "lookup:M1", Action: "create", Destination: "chatty",
			Payload: []byte(`{"customer":{"email":"` + email + `"}}`), SensitiveFields: []string{"customer.email"}})
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		ev := r.Evidence("lookup:M1", "reconcile deferred")
		require.NotEmpty(t, ev)
		require.NotContains(t, ev, email[:8], "at byte %d: no part of the value is kept", at)
	}

	key := "intake:SECRETCUSTOMER42:create"
	d := &chattyLookup{failWith: func(op *opledger.Operation) string { return "panic:" + strings.Repeat("x", 180) + " for " + op.Key }}
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{d} })
	r.Record(key, "chatty", `{}`)
	require.Equal(t, opledger.StateUncertain, r.Step().State)
	require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
	require.Contains(t, r.Logs(), `level=ERROR msg="lookup panicked"`)
	// A cut at 200 bytes of the text kept "intake:SE".
	require.NotContains(t, r.Logs(), "intake:", "no part of the key is logged")
	require.NotContains(t, r.Evidence(key, "reconcile deferred"), "intake:")
}

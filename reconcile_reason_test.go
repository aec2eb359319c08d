package opledger_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/marker"
)

// openReconcileLedger opens a ledger on a new SQLite file, with a manual
// clock; it is closed when the test ends.
func openReconcileLedger(t *testing.T) (*opledger.Ledger, *manualClock) {
	t.Helper()
	clock := newManualClock()
	l, err := opledger.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{Clock: clock.Map})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l, clock
}

// dispatchedCreate records key as a CRM create, claims it and marks it
// dispatched, and returns the claim: its outcome is the test's to report.
func dispatchedCreate(t *testing.T, l *opledger.Ledger, key string) *opledger.Claim {
	t.Helper()
	ctx := context.Background()
	_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":1}`)})
	require.NoError(t, err)
	c, err := l.Claim(ctx, key, opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	return c
}

// TestUndecidableReasonSaysWhatHappened: when a destination said it made
// the record (a create refused as a duplicate, or a reference reported
// without a success) and its lookup then finds nothing, the held reason
// leads with that contradiction, not with "no lookup ... no duplicate
// protection", which is false for such a destination. Without a lookup
// (no LookedAt), or when the destination said nothing of the kind, the
// reason stays what it was.
func TestUndecidableReasonSaysWhatHappened(t *testing.T) {
	t.Parallel()
	const nothing = "no lookup that proves absence and no duplicate protection at the destination"
	for _, tc := range []struct {
		name   string
		report opledger.Report
		looked bool
		leads  string
	}{
		{"refused as a duplicate", opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "POST crm: 409 Conflict: " + marker.Exists}, true,
			"the destination contradicts itself: it refused a create as a duplicate, so it holds the record, yet its lookup does not find it: a retry could make the effect twice; crm lookup: no record"},
		{"reference without a success", opledger.Report{Outcome: opledger.OutcomeUncertain, DestinationRef: "R-1", Error: "step 2 failed"}, true,
			"the destination contradicts itself: an attempt reported the record's reference without a success, yet its lookup does not find it"},
		{"a lookup, nothing said", opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "no answer"}, true, nothing + "; crm lookup: no record"},
		{"no lookup", opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "POST crm: 409 Conflict: " + marker.Exists}, false, nothing + "; crm lookup: no record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, clock := openReconcileLedger(t)
			const key = "intake:I1:create"
			c := dispatchedCreate(t, l, key)
			op, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, tc.report)
			require.NoError(t, err)
			require.Equal(t, opledger.StateUncertain, op.State)

			f := opledger.Finding{Evidence: "crm lookup: no record"}
			if tc.looked {
				f.LookedAt = clock.Map(time.Time{})
			}
			op, _, err = l.Reconcile(ctx, key, f)
			require.NoError(t, err)
			require.Equal(t, opledger.StateHeld, op.State)
			tl, err := l.Timeline(ctx, key)
			require.NoError(t, err)
			last := tl[len(tl)-1]
			require.Equal(t, "cannot be decided automatically", last.Event)
			require.True(t, strings.HasPrefix(last.Evidence, tc.leads), last.Evidence)
			if tc.looked && tc.leads != nothing+"; crm lookup: no record" {
				require.NotContains(t, last.Evidence, "no duplicate protection")
			}
		})
	}
}

// TestOtherContentReason: a lookup that found a record with other content
// holds the operation with a reason that names the record's reference,
// or says "the record found" when the lookup gave none (never "destination
// ref  does not match", with nothing between the words).
func TestOtherContentReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _ := openReconcileLedger(t)
	for ref, want := range map[string]string{"R-9": "destination ref R-9 does not match the intent", "": "the record found does not match the intent"} {
		key := "intake:" + strings.ToLower(strings.TrimPrefix(ref, "R-")) + "x:create"
		c := dispatchedCreate(t, l, key)
		_, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "no answer"})
		require.NoError(t, err)
		op, _, err := l.Reconcile(ctx, key, opledger.Finding{Found: true, Matches: false, DestinationRef: ref, Evidence: "crm lookup"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateHeld, op.State)
		tl, err := l.Timeline(ctx, key)
		require.NoError(t, err)
		last := tl[len(tl)-1]
		require.Equal(t, "lookup found other content", last.Event)
		require.Equal(t, want+"; crm lookup", last.Evidence)
	}
}

// TestNegativeFindingDurations: a finding with a negative visibility
// delay or protection retention is refused, and changes nothing: a
// negative delay would let a lookup begun while the call still ran prove
// absence, and send the operation again.
func TestNegativeFindingDurations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, clock := openReconcileLedger(t)
	const key = "intake:N1:create"
	c := dispatchedCreate(t, l, key)
	lookupBegan := clock.Map(time.Time{}) // while the call runs
	clock.Advance(5 * time.Second)
	_, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain})
	require.NoError(t, err)
	for _, f := range []opledger.Finding{
		{Authoritative: true, VisibilityDelay: -10 * time.Second, LookedAt: lookupBegan, AttemptCount: 1},
		{ProtectionRetention: -time.Hour},
	} {
		_, _, err = l.Reconcile(ctx, key, f)
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "it must be 0 or more")
		op, err := l.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "nothing changed")
	}
	// With no delay, the lookup begun during the call proves nothing.
	op, _, err := l.Reconcile(ctx, key, opledger.Finding{Authoritative: true, LookedAt: lookupBegan, AttemptCount: 1})
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)
}

package reconciler_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// decidedMeanwhile is a Go destination whose calls end uncertain and
// whose lookup, having said it began (entered), answers found once
// released: the record named ref, with the intended content or not.
type decidedMeanwhile struct {
	entered, release chan struct{}
	found            destination.LookupResult
}

func (*decidedMeanwhile) Name() string { return "meanwhile" }
func (*decidedMeanwhile) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (*decidedMeanwhile) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (d *decidedMeanwhile) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	d.entered <- struct{}{}
	<-d.release
	return d.found, nil
}

// TestFindingNotedIsNoDecision: a lookup whose record the ledger only
// notes, because someone else decided the operation while it ran (a
// person cancelled it or marked it succeeded), decided nothing. The
// reconciler used to count and log it as its own decision ("reconciled
// decision=failed", Pass.Decisions[Failed]), so a pass overstated what
// it settled. It is Skipped now, logged as a finding noted; a finding
// that does move the operation on (a matching record after a retry was
// authorized) still counts.
func TestFindingNotedIsNoDecision(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		cases := []struct {
			name     string
			decision opledger.Decision
			found    destination.LookupResult
			want     reconciler.Decision
			state    opledger.State
		}{
			{"cancelled, other content", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "the customer withdrew"},
				destination.LookupResult{Found: true, Ref: "R2", Evidence: "units differ"}, reconciler.Skipped, opledger.StateFailed},
			{"marked succeeded, second record", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "R1", Reason: "seen in the CRM"},
				destination.LookupResult{Found: true, Matches: true, Ref: "R2"}, reconciler.Skipped, opledger.StateSucceeded},
			{"retry authorized, record found", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "try again"},
				destination.LookupResult{Found: true, Matches: true, Ref: "R3"}, reconciler.Succeeded, opledger.StateSucceeded},
		}
		for i, tc := range cases {
			d := &decidedMeanwhile{entered: make(chan struct{}, 1), release: make(chan struct{}), found: tc.found}
			r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{d} })
			key := "intake:N" + string(rune('1'+i)) + ":create"
			r.Record(key, "meanwhile", `{"units": 2}`)
			require.Equal(t, opledger.StateUncertain, r.Step().State, tc.name)

			passed := make(chan reconciler.Pass, 1)
			go func() {
				pass, err := r.Rec.RunOnce(r.Ctx)
				if err != nil || pass.Errors > 0 {
					pass.Examined = -1
				}
				passed <- pass
			}()
			<-d.entered // the lookup runs: a person decides meanwhile
			tc.decision.Operator = "maria"
			_, _, err := r.Ledger.Resolve(r.Ctx, key, tc.decision)
			require.NoError(t, err, tc.name)
			close(d.release)
			pass := <-passed
			require.Equal(t, 1, pass.Examined, tc.name)
			require.Equal(t, map[reconciler.Decision]int{tc.want: 1}, pass.Decisions, tc.name)
			require.Equal(t, tc.state, r.Get(key).State, tc.name)
			logs := r.Logs()
			if tc.want == reconciler.Skipped {
				require.NotContains(t, logs, "msg=reconciled", tc.name)
				require.Contains(t, logs, "lookup's finding noted", tc.name)
			} else {
				require.Contains(t, logs, "msg=reconciled", tc.name)
				require.Contains(t, logs, "decision="+string(tc.want), tc.name)
			}
		}
	})
}

// TestFindingWhileRetryClaimedDecides: a lookup finds the intended record
// while a retry a person authorized is claimed, not yet sent. The record
// is kept on the operation and the retry is not sent: the operation
// succeeds with the record found as its holder ends. The finding decided
// that, as it does when the retry is authorized but not yet claimed; it
// used to count as someone else's decision (Skipped, logged "lookup's
// finding noted; the operation was decided meanwhile"). It is the
// reconciler's Succeeded now.
func TestFindingWhileRetryClaimedDecides(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		d := &decidedMeanwhile{entered: make(chan struct{}, 1), release: make(chan struct{}),
			found: destination.LookupResult{Found: true, Matches: true, Ref: "R7", Evidence: "GET /records"}}
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{d} })
		const key = "intake:C1:create"
		r.Record(key, "meanwhile", `{"units": 2}`)
		require.Equal(t, opledger.StateUncertain, r.Step().State)

		passed := make(chan reconciler.Pass, 1)
		go func() {
			pass, err := r.Rec.RunOnce(r.Ctx)
			if err != nil || pass.Errors > 0 {
				pass.Examined = -1
			}
			passed <- pass
		}()
		<-d.entered // the lookup runs: a retry is authorized and claimed meanwhile
		_, _, err := r.Ledger.Resolve(r.Ctx, key, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "try again", Operator: "maria"})
		require.NoError(t, err)
		c, err := r.Ledger.Claim(r.Ctx, key, opledger.ClaimOptions{Worker: "w2"})
		require.NoError(t, err)
		close(d.release)
		pass := <-passed
		require.Equal(t, 1, pass.Examined)
		require.Equal(t, map[reconciler.Decision]int{reconciler.Succeeded: 1}, pass.Decisions)
		logs := r.Logs()
		require.Contains(t, logs, "msg=reconciled")
		require.NotContains(t, logs, "lookup's finding noted")

		// The retry is not sent; the operation succeeds with the record found.
		_, err = r.Ledger.Dispatch(r.Ctx, key, c.AttemptID, c.FencingToken)
		require.Error(t, err)
		op := r.Get(key)
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "R7", op.DestinationRef)
	})
}

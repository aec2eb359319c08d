package opledger_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestLateReportOnEarlierVersion: attempt 1 of version 1 lost its lease
// without a dispatch mark, the operation was revised to version 2 and
// approved, and then attempt 1 reports that its call acted (or may have).
// That effect is version 1's: it must not settle version 2, nor leave
// version 2 to be sent or looked for unseen. The operation is held for a
// person whatever was decided before the report came (before, a report
// arriving after the approval closed version 2 as succeeded with version
// 1's reference, and version 2 was never sent). Attempts say which
// version they were claimed for.
func TestLateReportOnEarlierVersion(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map, Lease: 10 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })

			// revised leaves key at version 2, approved, with attempt 1
			// of version 1 given up as never sent; its claim is returned.
			revised := func(key string) *opledger.Claim {
				t.Helper()
				in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"amount":100}`)}
				c1, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in})
				require.NoError(t, err)
				clock.Advance(11 * time.Second)
				_, err = l.ExpireLeases(ctx)
				require.NoError(t, err)
				op, _, err := l.Revise(ctx, key, opledger.Revision{Payload: json.RawMessage(`{"amount":90}`), Version: 2, Actor: "eve"})
				require.NoError(t, err)
				_, _, err = l.Approve(ctx, key, opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lead"})
				require.NoError(t, err)
				return c1
			}
			report := func(key string, c *opledger.Claim, r opledger.Report) {
				t.Helper()
				_, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, r)
				var stale *opledger.StaleError
				require.ErrorAs(t, err, &stale, "a late report is refused, and recorded")
			}
			held := func(key string) *opledger.Operation {
				t.Helper()
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, opledger.StateHeld, op.State, "%s: %+v", key, op)
				require.Empty(t, op.DestinationRef, "version 1's reference does not settle version 2")
				require.Equal(t, int64(2), op.Version)
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				last := tl[len(tl)-1]
				require.Equal(t, "late report on an earlier version", last.Event)
				require.Contains(t, last.Evidence, "attempt 1 was claimed for version 1")
				require.Contains(t, last.Evidence, "the operation holds version 2 now")
				return op
			}

			// Approved, not claimed yet: a late success holds it.
			c1 := revised("pending")
			report("pending", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			held("pending")
			attempts, err := l.Attempts(ctx, "pending")
			require.NoError(t, err)
			require.Len(t, attempts, 1)
			require.Equal(t, int64(1), attempts[0].Version)
			require.Equal(t, "R-v1", attempts[0].DestinationRef, "the report is kept on its attempt")
			// The person decides; the decisions work from held.
			_, _, err = l.Resolve(ctx, "pending", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "R-v1",
				Reason: "version 1 stands", Operator: "maria"})
			require.NoError(t, err)

			// A late uncertain report holds it too, instead of making it
			// uncertain, where version 2 would be looked for.
			c1 = revised("uncertain")
			report("uncertain", c1, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			held("uncertain")

			// Version 2 claimed, not dispatched: its attempt is ended
			// unsent, and its dispatch refused.
			c1 = revised("claimed")
			c2, err := l.Claim(ctx, "claimed", opledger.ClaimOptions{})
			require.NoError(t, err)
			report("claimed", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			held("claimed")
			_, err = l.Dispatch(ctx, "claimed", c2.AttemptID, c2.FencingToken)
			require.ErrorContains(t, err, "it was never sent: an attempt on an earlier version reported that its call acted, and the operation is held for a person",
				"version 2's call must not start, and its worker is told why")
			attempts, err = l.Attempts(ctx, "claimed")
			require.NoError(t, err)
			require.Len(t, attempts, 2)
			require.Equal(t, int64(2), attempts[1].Version)
			require.Equal(t, opledger.AttemptAbandoned, attempts[1].Outcome)
			require.Contains(t, attempts[1].Error, "not sent: an attempt on an earlier version reported that its call acted")

			// Version 2 dispatched: both calls may have acted; the
			// timeline says so, and version 2's own report decides.
			c1 = revised("dispatched")
			c2, err = l.Claim(ctx, "dispatched", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			report("dispatched", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			op, err := l.Get(ctx, "dispatched")
			require.NoError(t, err)
			require.Equal(t, opledger.StateInProgress, op.State)
			require.Empty(t, op.DestinationRef, "version 2's dispatch is not settled by version 1's effect")
			tl, err := l.Timeline(ctx, "dispatched")
			require.NoError(t, err)
			require.Contains(t, tl[len(tl)-1].Evidence, "so both calls may have acted: check the destination for both")
			op, err = l.Report(ctx, "dispatched", c2.AttemptID, c2.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v2"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R-v2", op.DestinationRef)

			// Once version 2 succeeded, version 1's late success is a
			// second effect, counted.
			c1 = revised("succeeded")
			c2, err = l.Claim(ctx, "succeeded", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, "succeeded", c2.AttemptID, c2.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v2"})
			require.NoError(t, err)
			report("succeeded", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			op, err = l.Get(ctx, "succeeded")
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R-v2", op.DestinationRef)
			require.Equal(t, 1, op.DuplicateEffects)
		})
	}
}

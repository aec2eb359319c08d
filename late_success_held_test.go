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

// TestLateSuccessWhileHeld: an earlier attempt's success arrives while a
// retry holds the operation. If the retry has not marked its dispatch,
// the timeline says it will not send, and its dispatch is refused; if it
// has, the timeline says its call may act too (it used to say, falsely,
// that it would not send), and a second reference it reports is a
// duplicate effect.
func TestLateSuccessWhileHeld(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map, Lease: 10 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })

			// first's attempt 1 was sent and lost; a person allowed a
			// retry, which claims (attempt 2); then attempt 1's success
			// arrives. dispatched says whether attempt 2 had marked its
			// dispatch by then.
			late := func(key string, dispatched bool) (*opledger.Claim, string) {
				t.Helper()
				in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
				c1, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
				require.NoError(t, err)
				clock.Advance(11 * time.Second)
				_, err = l.ExpireLeases(ctx)
				require.NoError(t, err)
				_, _, err = l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "checked: absent"})
				require.NoError(t, err)
				c2, err := l.Claim(ctx, key, opledger.ClaimOptions{Dispatch: dispatched})
				require.NoError(t, err)
				_, err = l.Report(ctx, key, c1.AttemptID, c1.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
				require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "kept as a late report")
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				for _, e := range tl {
					if e.Event == "late success while another attempt holds the operation" {
						return c2, e.Evidence
					}
				}
				t.Fatalf("no late success entry in %v", tl)
				return nil, ""
			}

			c2, evidence := late("held:1", false)
			require.Contains(t, evidence, "the effect is confirmed: the attempt holding the operation will not send it again")
			_, err = l.Dispatch(ctx, "held:1", c2.AttemptID, c2.FencingToken)
			require.Error(t, err, "the holder is not sent")
			op, err := l.Get(ctx, "held:1")
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R1", op.DestinationRef)
			// The holder's attempt says why it ended unsent, and so does
			// the refusal of anything it sends after.
			attempts, err := l.Attempts(ctx, "held:1")
			require.NoError(t, err)
			require.Equal(t, opledger.AttemptAbandoned, attempts[1].Outcome)
			require.Contains(t, attempts[1].Error, "an earlier attempt's late report had confirmed the effect")
			_, err = l.Report(ctx, "held:1", c2.AttemptID, c2.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
			require.ErrorContains(t, err, "(it was never sent: an earlier attempt's late report had confirmed the effect)")
			require.NotContains(t, err.Error(), "gave the claim back")

			// So does one that gives the claim back instead.
			c3, _ := late("held:3", false)
			op, err = l.Release(ctx, "held:3", c3.AttemptID, c3.FencingToken, "not needed")
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			attempts, err = l.Attempts(ctx, "held:3")
			require.NoError(t, err)
			require.Contains(t, attempts[1].Error, "an earlier attempt's late report had confirmed the effect")

			c2, evidence = late("held:2", true)
			require.Contains(t, evidence, "attempt 2, which holds the operation, had already marked its dispatch, so its call may act too")
			require.NotContains(t, evidence, "will not send it again")
			op, err = l.Report(ctx, "held:2", c2.AttemptID, c2.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R2"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, 1, op.DuplicateEffects, "its call did act: a second record")
		})
	}
}

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

// TestLateUncertainWhileRetryHolds: attempt 1 lost its lease before its
// dispatch mark, attempt 2 was claimed, and then attempt 1 reports that
// its call may have acted all the same. Arriving while the operation was
// pending, that report makes it uncertain; arriving while attempt 2 held
// it, it was only noted, and attempt 2 was sent and a retryable or
// rejected answer of its made the operation pending (sent once more) or
// failed: attempt 1's possible effect was never reconciled. Now a retry
// not yet dispatched is not sent, and the operation is uncertain; one
// dispatched already decides by succeeding, and otherwise leaves the
// operation uncertain.
func TestLateUncertainWhileRetryHolds(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map, Lease: 10 * time.Second,
				RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 5, Deadline: time.Hour}})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })

			// retried leaves key held by attempt 2 (dispatched or not),
			// attempt 1 given up before its dispatch mark having reported
			// late that its call may have acted.
			retried := func(key string, dispatch bool) *opledger.Claim {
				t.Helper()
				in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":2}`)}
				c1, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in})
				require.NoError(t, err)
				clock.Advance(11 * time.Second)
				_, err = l.ExpireLeases(ctx)
				require.NoError(t, err)
				c2, err := l.Claim(ctx, key, opledger.ClaimOptions{Dispatch: dispatch})
				require.NoError(t, err)
				_, err = l.Report(ctx, key, c1.AttemptID, c1.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
				var stale *opledger.StaleError
				require.ErrorAs(t, err, &stale, "a late report is refused, and recorded")
				return c2
			}
			state := func(key string) *opledger.Operation {
				t.Helper()
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				return op
			}

			// Not dispatched yet: attempt 2 is not sent.
			c2 := retried("claimed", false)
			op := state("claimed")
			require.Equal(t, opledger.StateUncertain, op.State, "attempt 1 may have acted: reconciled before anything is sent")
			_, err = l.Dispatch(ctx, "claimed", c2.AttemptID, c2.FencingToken)
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
			require.ErrorContains(t, err, "an earlier attempt reported that its call may have acted", "its worker is told why")
			attempts, err := l.Attempts(ctx, "claimed")
			require.NoError(t, err)
			require.Len(t, attempts, 2)
			require.Equal(t, opledger.AttemptAbandoned, attempts[1].Outcome)
			_, err = l.ClaimNext(ctx, opledger.ClaimNextOptions{})
			require.ErrorIs(t, err, opledger.ErrNothingDue, "nothing is sent before reconciliation")

			// Dispatched: its answer decides only if it succeeded.
			for _, tc := range []struct {
				key    string
				report opledger.Report
				want   opledger.State
			}{
				{"retryable", opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"}, opledger.StateUncertain},
				{"rejected", opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422"}, opledger.StateUncertain},
				{"succeeded", opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R2"}, opledger.StateSucceeded},
			} {
				c2 := retried(tc.key, true)
				require.Equal(t, opledger.StateInProgress, state(tc.key).State)
				op, err := l.Report(ctx, tc.key, c2.AttemptID, c2.FencingToken, tc.report)
				require.NoError(t, err)
				require.Equal(t, tc.want, op.State, "attempt 2 answered %s", tc.report.Outcome)
				if tc.want == opledger.StateUncertain {
					tl, err := l.Timeline(ctx, tc.key)
					require.NoError(t, err)
					require.Equal(t, "uncertain after a late report", tl[len(tl)-1].Event)
					require.Contains(t, tl[len(tl)-1].Evidence, "attempt 1, given up before its dispatch mark, had reported that its call may have acted")
				}
			}
		})
	}
}

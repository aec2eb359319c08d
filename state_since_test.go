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

// TestStateSince: an operation's StateSince is when it entered its state
// (or, awaiting approval, when its version was revised), and the waits
// measured from it (OldestApprovalWaitSeconds, OldestDue) are not
// restarted by a write that leaves the state: a repeat naming an owner.
func TestStateSince(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			start := clock.Map(time.Time{})
			at := func(d time.Duration) time.Time { return start.Add(d) }
			intent := func(key string, approval bool, owner string) opledger.Intent {
				return opledger.Intent{Key: key, Action: "pay", Destination: "payments",
					Payload: json.RawMessage(`{"n":1}`), RequiresApproval: approval, Owner: owner}
			}
			stats := func() *opledger.Stats {
				t.Helper()
				s, err := l.Stats(ctx, false)
				require.NoError(t, err)
				return s
			}

			op, _, err := l.Record(ctx, intent("pay:1", true, ""))
			require.NoError(t, err)
			require.Equal(t, opledger.StateAwaitingApproval, op.State)
			require.True(t, op.StateSince.Equal(at(0)), "recorded: %s", op.StateSince)

			// An hour on, a repeat names an owner: a write, not a new wait.
			clock.Advance(time.Hour)
			op, created, err := l.Record(ctx, intent("pay:1", true, "finance"))
			require.NoError(t, err)
			require.False(t, created)
			require.Equal(t, "finance", op.Owner)
			require.True(t, op.UpdatedAt.Equal(at(time.Hour)), "the repeat wrote the row")
			require.True(t, op.StateSince.Equal(at(0)), "the wait is not restarted: %s", op.StateSince)
			require.Equal(t, time.Hour.Seconds(), stats().OldestApprovalWaitSeconds)

			// A revision is a new version to approve: its wait starts.
			clock.Advance(30 * time.Minute)
			op, _, err = l.Revise(ctx, "pay:1", opledger.Revision{Payload: json.RawMessage(`{"n":2}`), Version: 2, Actor: "bot"})
			require.NoError(t, err)
			require.True(t, op.StateSince.Equal(at(90*time.Minute)), "revised: %s", op.StateSince)
			clock.Advance(time.Hour)
			require.Equal(t, time.Hour.Seconds(), stats().OldestApprovalWaitSeconds)

			// Approved, it is pending from then on, due at once; a repeat
			// naming nobody new changes nothing, one with sensitive
			// fields writes the row, and the due wait goes on.
			op, _, err = l.Approve(ctx, "pay:1", opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "maria"})
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)
			require.True(t, op.StateSince.Equal(at(150*time.Minute)), "approved: %s", op.StateSince)
			require.Zero(t, stats().OldestApprovalWaitSeconds)

			_, _, err = l.Record(ctx, intent("other:1", false, ""))
			require.NoError(t, err)
			clock.Advance(20 * time.Minute)
			repeat := intent("other:1", false, "sales-ops")
			op, _, err = l.Record(ctx, repeat)
			require.NoError(t, err)
			require.True(t, op.UpdatedAt.Equal(at(170*time.Minute)))
			require.True(t, op.StateSince.Equal(at(150*time.Minute)), "pending since its recording: %s", op.StateSince)
			due, waited, err := l.OldestDue(ctx)
			require.NoError(t, err)
			require.Equal(t, "pay:1", due.Key)
			require.Equal(t, 20*time.Minute, waited)
			require.Equal(t, (20 * time.Minute).Seconds(), stats().OldestDueSeconds)

			// A claim moves it: in_progress since then; a rejection,
			// failed since the report.
			clock.Advance(time.Minute)
			c, err := l.Claim(ctx, "other:1", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			got, err := l.Get(ctx, "other:1")
			require.NoError(t, err)
			require.Equal(t, opledger.StateInProgress, got.State)
			require.True(t, got.StateSince.Equal(at(171*time.Minute)), "claimed: %s", got.StateSince)
			clock.Advance(time.Minute)
			op, err = l.Report(ctx, "other:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateFailed, op.State)
			require.True(t, op.StateSince.Equal(at(172*time.Minute)), "failed: %s", op.StateSince)
		})
	}
}

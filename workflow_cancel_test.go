package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestCancelStuckWorkflow: an operator can give up on a stuck workflow.
// The decision needs a reason, is refused when the workflow changed since
// it was seen, and when the current step has an operation; once taken, the
// workflow is cancelled (who, why, at which step), leaves the stuck list
// and figures and the open list, its remaining step is never recorded (not
// by a resume, the sweep or a revision), the same decision again is a
// replay and another is refused.
func TestCancelStuckWorkflow(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Tenant: "acme"})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
				{Name: "c", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}}
			for _, wf := range []struct{ key, res string }{{"wf:stuck", `{"id":1}`}, {"wf:fine", `{"url":"https://x.example/1"}`}} {
				_, _, err := l.PutWorkflow(ctx, wf.key, spec)
				require.NoError(t, err)
				c, err := l.Claim(ctx, wf.key+"/a", opledger.ClaimOptions{})
				require.NoError(t, err)
				_, err = l.Report(ctx, wf.key+"/a", c.AttemptID, c.FencingToken,
					opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1", Response: json.RawMessage(wf.res)})
				require.NoError(t, err)
				_, err = l.ResumeWorkflow(ctx, wf.key)
				if wf.key == "wf:stuck" {
					require.ErrorIs(t, err, opledger.ErrInvalidInput)
				} else {
					require.NoError(t, err)
				}
			}
			seen, err := l.GetWorkflow(ctx, "wf:stuck")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowHeld, seen.Status)

			_, _, err = l.CancelWorkflow(ctx, "wf:stuck", opledger.WorkflowCancel{Operator: "ana"})
			require.ErrorIs(t, err, opledger.ErrReasonRequired)
			_, _, err = l.CancelWorkflow(ctx, "wf:fine", opledger.WorkflowCancel{Operator: "ana", Reason: "not needed"})
			require.ErrorIs(t, err, opledger.ErrInvalidState, "its step b is recorded: cancel that operation instead")
			_, _, err = l.CancelWorkflow(ctx, "wf:nope", opledger.WorkflowCancel{Reason: "x"})
			require.ErrorIs(t, err, opledger.ErrNotFound)
			_, _, err = l.CancelWorkflow(ctx, "wf:stuck", opledger.WorkflowCancel{Operator: "ana", Reason: "customer left",
				SeenUpdatedAt: seen.UpdatedAt.Add(-1)})
			require.ErrorIs(t, err, opledger.ErrStaleDecision)

			d := opledger.WorkflowCancel{Operator: "ana", Reason: "customer left", SeenUpdatedAt: seen.UpdatedAt}
			w, replayed, err := l.CancelWorkflow(ctx, "wf:stuck", d)
			require.NoError(t, err)
			require.False(t, replayed)
			require.Equal(t, opledger.WorkflowCancelled, w.Status)
			require.Equal(t, "b", w.CurrentStep)
			require.NotNil(t, w.Cancelled)
			require.Equal(t, "b", w.Cancelled.Step)
			require.Equal(t, "ana", w.Cancelled.Operator)
			require.Equal(t, "customer left", w.Cancelled.Reason)
			require.False(t, w.Cancelled.At.IsZero())
			require.Contains(t, w.Reason, "cancelled by ana at step b: customer left")
			require.Equal(t, opledger.StepState(opledger.StateSucceeded), w.Steps[0].State)
			require.Equal(t, opledger.StepWaiting, w.Steps[1].State)
			require.Equal(t, opledger.StepWaiting, w.Steps[2].State)

			stuck, err := l.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Empty(t, stuck)
			stats, err := l.Stats(ctx, false)
			require.NoError(t, err)
			require.Zero(t, stats.StuckWorkflows)
			open, err := l.ListWorkflows(ctx, opledger.WorkflowListOptions{Open: true})
			require.NoError(t, err)
			require.Len(t, open.Items, 1)
			require.Equal(t, "wf:fine", open.Items[0].Key)

			// Replayed: the same decision, even with the UpdatedAt seen before.
			again, replayed, err := l.CancelWorkflow(ctx, "wf:stuck", d)
			require.NoError(t, err)
			require.True(t, replayed)
			require.Equal(t, w.UpdatedAt, again.UpdatedAt)
			_, _, err = l.CancelWorkflow(ctx, "wf:stuck", opledger.WorkflowCancel{Operator: "bob", Reason: "customer left"})
			require.ErrorIs(t, err, opledger.ErrInvalidState)

			// Nothing brings its remaining steps back.
			_, _, err = l.ReviseWorkflowStep(ctx, "wf:stuck", "b", opledger.Revision{Payload: json.RawMessage(`{"link":"https://x.example/fixed"}`), Version: 2})
			require.ErrorIs(t, err, opledger.ErrInvalidState)
			got, err := l.ResumeWorkflow(ctx, "wf:stuck")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowCancelled, got.Status)
			_, err = l.AdvanceWorkflows(ctx)
			require.NoError(t, err)
			_, _, err = l.PutWorkflow(ctx, "wf:stuck", spec)
			require.NoError(t, err)
			for _, step := range []string{"b", "c"} {
				_, err = l.Get(ctx, "wf:stuck/"+step)
				require.ErrorIs(t, err, opledger.ErrNotFound, step)
			}
			got, err = l.GetWorkflow(ctx, "wf:stuck")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowCancelled, got.Status)
			require.Equal(t, w.Reason, got.Reason)
		})
	}
}

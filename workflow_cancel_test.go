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
			for _, st := range w.Steps[1:] {
				require.Equal(t, opledger.StepCancelled, st.State, "it never runs: %s", st.Name)
				require.Empty(t, st.WaitingFor, st.Name)
			}

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

// TestCancelFailedWorkflow: a workflow whose current step's operation
// failed (rejected, or cancelled by an operator) can be given up on, with
// the rules of a stuck one, and the failed operation's timeline says so;
// one whose current step's operation has not finished (awaiting approval,
// pending, uncertain) is refused, and told to cancel or settle that
// operation first.
func TestCancelFailedWorkflow(t *testing.T) {
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
				{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{}`)},
			}}
			approval := true
			needsApproval := spec
			needsApproval.Steps = []opledger.WorkflowStep{spec.Steps[0], spec.Steps[1]}
			needsApproval.Steps[0].RequiresApproval = &approval
			for _, key := range []string{"wf:rejected", "wf:cancelled", "wf:pending", "wf:uncertain"} {
				_, _, err := l.PutWorkflow(ctx, key, spec)
				require.NoError(t, err)
			}
			_, _, err = l.PutWorkflow(ctx, "wf:approval", needsApproval)
			require.NoError(t, err)
			c, err := l.Claim(ctx, "wf:rejected/a", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:rejected/a", c.AttemptID, c.FencingToken,
				opledger.Report{Outcome: opledger.OutcomeRejected, Error: "bad input"})
			require.NoError(t, err)
			_, _, err = l.Resolve(ctx, "wf:cancelled/a", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "wrong customer", Operator: "bob"})
			require.NoError(t, err)
			c, err = l.Claim(ctx, "wf:uncertain/a", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Dispatch(ctx, "wf:uncertain/a", c.AttemptID, c.FencingToken)
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:uncertain/a", c.AttemptID, c.FencingToken,
				opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)

			// Not finished: refused, nothing recorded.
			for key, state := range map[string]string{"wf:pending": "pending", "wf:uncertain": "uncertain", "wf:approval": "awaiting_approval"} {
				before, err := l.GetWorkflow(ctx, key)
				require.NoError(t, err)
				_, _, err = l.CancelWorkflow(ctx, key, opledger.WorkflowCancel{Operator: "ana", Reason: "not needed"})
				require.ErrorIs(t, err, opledger.ErrInvalidState, key)
				require.ErrorContains(t, err, "its step a is "+state)
				require.ErrorContains(t, err, "cancel or settle its operation "+key+"/a first")
				after, err := l.GetWorkflow(ctx, key)
				require.NoError(t, err)
				require.Equal(t, before.Status, after.Status, key)
				require.Nil(t, after.Cancelled, key)
				require.Equal(t, before.UpdatedAt, after.UpdatedAt, key)
			}

			for _, key := range []string{"wf:rejected", "wf:cancelled"} {
				seen, err := l.GetWorkflow(ctx, key)
				require.NoError(t, err)
				require.Equal(t, opledger.WorkflowFailed, seen.Status, key)

				_, _, err = l.CancelWorkflow(ctx, key, opledger.WorkflowCancel{Operator: "ana"})
				require.ErrorIs(t, err, opledger.ErrReasonRequired)
				_, _, err = l.CancelWorkflow(ctx, key, opledger.WorkflowCancel{Operator: "ana", Reason: "customer left",
					SeenUpdatedAt: seen.UpdatedAt.Add(-1)})
				require.ErrorIs(t, err, opledger.ErrStaleDecision)

				d := opledger.WorkflowCancel{Operator: "ana", Reason: "customer left", SeenUpdatedAt: seen.UpdatedAt}
				w, replayed, err := l.CancelWorkflow(ctx, key, d)
				require.NoError(t, err, key)
				require.False(t, replayed)
				require.Equal(t, opledger.WorkflowCancelled, w.Status)
				require.Equal(t, "a", w.CurrentStep)
				require.Equal(t, &opledger.WorkflowCancellation{Step: "a", Operator: "ana", Reason: "customer left", At: w.Cancelled.At}, w.Cancelled)
				require.False(t, w.Cancelled.At.IsZero())
				require.Contains(t, w.Reason, "cancelled by ana at step a: customer left")
				require.Equal(t, opledger.StepState(opledger.StateFailed), w.Steps[0].State, "its failed step stays failed")
				require.Equal(t, opledger.StepCancelled, w.Steps[1].State, "it never runs")
				require.Empty(t, w.Steps[1].WaitingFor)

				// The failed step's timeline says it, once.
				entry := &opledger.TimelineEntry{At: w.Cancelled.At, Actor: "ana", Event: "workflow cancelled",
					Evidence: "workflow " + key + " cancelled at this step: customer left"}
				tl, err := l.Timeline(ctx, key+"/a")
				require.NoError(t, err)
				require.Equal(t, entry, tl[len(tl)-1])
				op, err := l.Get(ctx, key+"/a")
				require.NoError(t, err)
				require.Equal(t, opledger.StateFailed, op.State, "the note changes no state")
				require.Equal(t, w.Cancelled.At, op.UpdatedAt)
				require.Equal(t, w.Cancelled.At, w.UpdatedAt)

				again, replayed, err := l.CancelWorkflow(ctx, key, d)
				require.NoError(t, err)
				require.True(t, replayed)
				require.Equal(t, w.UpdatedAt, again.UpdatedAt)
				_, _, err = l.CancelWorkflow(ctx, key, opledger.WorkflowCancel{Operator: "bob", Reason: "customer left"})
				require.ErrorIs(t, err, opledger.ErrInvalidState)
				replayedTL, err := l.Timeline(ctx, key+"/a")
				require.NoError(t, err)
				require.Equal(t, tl, replayedTL, "a replay or a refusal adds nothing")
			}

			open, err := l.ListWorkflows(ctx, opledger.WorkflowListOptions{Open: true})
			require.NoError(t, err)
			var keys []string
			for _, w := range open.Items {
				keys = append(keys, w.Key)
			}
			require.Equal(t, []string{"wf:approval", "wf:pending", "wf:uncertain"}, keys, "the cancelled ones are finished")

			// Its step that failed is not attempted again: a retry is
			// refused, and nothing changes.
			for _, key := range []string{"wf:rejected/a", "wf:cancelled/a"} {
				before, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				_, _, err = l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "try again", Operator: "bob"})
				require.ErrorIs(t, err, opledger.ErrInvalidState, key)
				require.ErrorContains(t, err, "its workflow was cancelled at this step by ana at ")
				require.NotNil(t, opledger.OperationOf(err), "the refusal carries the operation")
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, opledger.StateFailed, op.State, key)
				after, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				require.Equal(t, before, after, key)
			}
			// A retry of a failed step of a workflow not cancelled is still
			// taken.
			_, _, err = l.Resolve(ctx, "wf:pending/a", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "wrong customer"})
			require.NoError(t, err)
			op, _, err := l.Resolve(ctx, "wf:pending/a", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "right customer"})
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)

			// Its step that failed confirmed by hand leads nowhere: the
			// steps not recorded stay so.
			_, _, err = l.Resolve(ctx, "wf:rejected/a", opledger.Decision{Kind: opledger.DecisionMarkSucceeded,
				DestinationRef: "A-1", Reason: "found it done after all"})
			require.NoError(t, err)
			_, err = l.AdvanceWorkflowOf(ctx, "wf:rejected/a")
			require.NoError(t, err)
			_, err = l.AdvanceWorkflows(ctx)
			require.NoError(t, err)
			_, err = l.Get(ctx, "wf:rejected/b")
			require.ErrorIs(t, err, opledger.ErrNotFound)
			got, err := l.GetWorkflow(ctx, "wf:rejected")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowCancelled, got.Status)
		})
	}
}

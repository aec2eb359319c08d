package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testWorkflowCancel checks what a workflow says of a step an operator
// cancelled: the cancellation's reason, not the error of an attempt
// before it.
func testWorkflowCancel(t *testing.T, h Harness) {
	// Rejected, retried, then cancelled: the rejection's error is no
	// longer why the step failed.
	t.Run("CancelAfterRejectionShowsReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", taskThenEmail())
		require.NoError(t, err)
		b.succeedStep(t, "wf:C-17/create_task", "T-42")
		_, err = b.ledger.AdvanceWorkflowOf(b.ctx, "wf:C-17/create_task")
		require.NoError(t, err)
		c := b.claimDispatched(t, "wf:C-17/send_email")
		b.report(t, "wf:C-17/send_email", c, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "template missing"})
		w, err := b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowFailed, w.Status)
		require.Equal(t, "step send_email failed (rejected): template missing", w.Reason, "a rejection shows its error")

		_, _, err = b.ledger.Resolve(b.ctx, "wf:C-17/send_email", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry,
			Reason: "template restored", Operator: "lea"})
		require.NoError(t, err)
		_, _, err = b.ledger.Resolve(b.ctx, "wf:C-17/send_email", opledger.Decision{Kind: opledger.DecisionCancel,
			Reason: "campaign dropped", Operator: "lea"})
		require.NoError(t, err)
		w, err = b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowFailed, w.Status)
		require.Equal(t, "send_email", w.CurrentStep)
		require.Equal(t, "step send_email failed (cancelled): campaign dropped", w.Reason)
	})

	// Cancelled once held: the reason, without the recovery time the
	// timeline adds to it.
	t.Run("CancelWhileHeldShowsReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-18", taskThenEmail())
		require.NoError(t, err)
		c := b.claimDispatched(t, "wf:C-18/create_task")
		b.report(t, "wf:C-18/create_task", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout after write"})
		_, err = b.ledger.Reconcile(b.ctx, "wf:C-18/create_task", opledger.Finding{Evidence: "CRM offers no lookup"})
		require.NoError(t, err)
		b.clock.Advance(time.Hour)
		_, _, err = b.ledger.Resolve(b.ctx, "wf:C-18/create_task", opledger.Decision{Kind: opledger.DecisionCancel,
			Reason: "campaign dropped"})
		require.NoError(t, err)
		tl, err := b.ledger.Timeline(b.ctx, "wf:C-18/create_task")
		require.NoError(t, err)
		require.Contains(t, tl[len(tl)-1].Evidence, "campaign dropped (recovery time", "the timeline keeps the recovery time")
		w, err := b.ledger.GetWorkflow(b.ctx, "wf:C-18")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowFailed, w.Status)
		require.Equal(t, "step create_task failed (cancelled): campaign dropped", w.Reason)
	})
}

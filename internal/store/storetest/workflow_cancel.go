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
		_, _, err = b.ledger.Reconcile(b.ctx, "wf:C-18/create_task", opledger.Finding{Evidence: "CRM offers no lookup"})
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

	// The failed step of a cancelled workflow needs no decision any more:
	// it leaves the exception queue's list of failed operations (and its
	// count) at the cancellation, and keeps its state, failure kind and
	// timeline; the workflow shows it. Before, it stayed in the queue
	// until retention compacted it.
	t.Run("CancelledWorkflowLeavesQueue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-19", taskThenEmail())
		require.NoError(t, err)
		c := b.claimDispatched(t, "wf:C-19/create_task")
		b.report(t, "wf:C-19/create_task", c, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "owner unknown"})
		// Another failed operation, outside any workflow, stays.
		b.inState(t, "other:1", opledger.StateFailed)
		queue := func() []string {
			t.Helper()
			page, err := b.ledger.List(b.ctx, opledger.ListOptions{States: []opledger.State{opledger.StateFailed}, ExceptCancelled: true})
			require.NoError(t, err)
			var keys []string
			for _, op := range page.Items {
				keys = append(keys, op.Key)
			}
			return keys
		}
		require.ElementsMatch(t, []string{"wf:C-19/create_task", "other:1"}, queue())
		n, err := b.ledger.CountFailedNeedingDecision(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)

		_, _, err = b.ledger.CancelWorkflow(b.ctx, "wf:C-19", opledger.WorkflowCancel{Reason: "customer withdrew", Operator: "ana"})
		require.NoError(t, err)
		require.Equal(t, []string{"other:1"}, queue(), "the cancelled workflow's step needs no decision")
		n, err = b.ledger.CountFailedNeedingDecision(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		// Its history stays: failed, rejected, in the list of failed
		// operations, the cancellation in its timeline and on the workflow.
		op, err := b.ledger.Get(b.ctx, "wf:C-19/create_task")
		require.NoError(t, err)
		require.Equal(t, opledger.StateFailed, op.State)
		require.Equal(t, opledger.FailureRejected, op.FailureKind)
		all, err := b.ledger.List(b.ctx, opledger.ListOptions{States: []opledger.State{opledger.StateFailed}})
		require.NoError(t, err)
		require.Len(t, all.Items, 2)
		tl, err := b.ledger.Timeline(b.ctx, "wf:C-19/create_task")
		require.NoError(t, err)
		require.Equal(t, "workflow cancelled", tl[len(tl)-1].Event)
		w, err := b.ledger.GetWorkflow(b.ctx, "wf:C-19")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowCancelled, w.Status)
		require.Equal(t, opledger.StateFailed, w.Step("create_task").Operation.State)
	})
}

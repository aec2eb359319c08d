package opledger_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestWorkflowRepeatRequiresApproval: a repeat of a workflow that asks
// for an approval its steps lack is not answered as if granted, as a
// repeated Record is not: the recorded step, pending and never sent,
// waits for one, and a waiting step will be recorded waiting for one
// (before, the repeat answered 200 and both ran unapproved).
func TestWorkflowRepeatRequiresApproval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openSQLiteLedger(t)
	steps := func(approval *bool) []opledger.WorkflowStep {
		return []opledger.WorkflowStep{
			{Name: "a", Action: "pay.charge", Destination: "payments", Payload: json.RawMessage(`{"amount":500}`), RequiresApproval: approval},
			{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"t":"{steps.a.ref}"}`)},
		}
	}
	_, created, err := l.PutWorkflow(ctx, "wf:R", opledger.WorkflowSpec{Steps: steps(nil)})
	require.NoError(t, err)
	require.True(t, created)
	w, created, err := l.PutWorkflow(ctx, "wf:R", opledger.WorkflowSpec{Steps: steps(nil), RequiresApproval: true})
	require.NoError(t, err)
	require.False(t, created, "a repeat")
	require.Equal(t, opledger.StepState(opledger.StateAwaitingApproval), w.Step("a").State)
	require.True(t, w.Step("b").RequiresApproval, "the waiting step will wait for an approval")
	tl, err := l.Timeline(ctx, opledger.WorkflowStepKey("wf:R", "a"))
	require.NoError(t, err)
	require.Equal(t, "approval required", tl[len(tl)-1].Event)
	require.Contains(t, tl[len(tl)-1].Evidence, "a repeat of workflow wf:R requires approval")

	// A step already sent is not taken back: the repeat gets it as it is.
	_, created, err = l.PutWorkflow(ctx, "wf:S", opledger.WorkflowSpec{Steps: steps(nil)})
	require.NoError(t, err)
	require.True(t, created)
	c, err := l.Claim(ctx, opledger.WorkflowStepKey("wf:S", "a"), opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, opledger.WorkflowStepKey("wf:S", "a"), c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	yes := true
	w, _, err = l.PutWorkflow(ctx, "wf:S", opledger.WorkflowSpec{Steps: steps(&yes)})
	require.NoError(t, err)
	require.Equal(t, opledger.StepState(opledger.StateInProgress), w.Step("a").State)
}

// TestEventOnRecordedOperationRequiresApproval: an event whose rule
// requires approval, mapped onto an operation recorded without it
// (pending, never sent, same content), makes it wait for one, as a
// repeated Record does (before: "applied", and the operation stayed
// pending).
func TestEventOnRecordedOperationRequiresApproval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openSQLiteLedger(t)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: refund
    source: forms
    type: refund.requested
    operations:
      - key: "refund:{data.id}"
        action: pay.refund
        destination: payments
        requires_approval: true
        payload: {id: "{data.id}", amount: "{data.amount}"}
`))
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "refund:R1", Action: "pay.refund", Destination: "payments", Payload: json.RawMessage(`{"id":"R1","amount":500}`)})
	require.NoError(t, err)
	res, err := l.ReceiveEvent(ctx, rules, opledger.Event{Source: "forms", EventID: "e1", Type: "refund.requested", Payload: json.RawMessage(`{"id":"R1","amount":500}`)})
	require.NoError(t, err)
	require.Equal(t, opledger.EventApplied, res.Status)
	require.Equal(t, opledger.StateAwaitingApproval, res.Operations[0].State)
	tl, err := l.Timeline(ctx, "refund:R1")
	require.NoError(t, err)
	require.Contains(t, tl[len(tl)-1].Evidence, "the rule that mapped event e1 requires approval")
}

// TestApprovalKeepsRetryAfter: an approval makes the operation due now,
// unless the destination asked for a longer wait (Retry-After), which it
// keeps (before, the approval of a revision erased it).
func TestApprovalKeepsRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openSQLiteLedger(t)
	_, _, err := l.Record(ctx, opledger.Intent{Key: "k", Action: "a", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "k", opledger.ClaimOptions{})
	require.NoError(t, err)
	op, err := l.Report(ctx, "k", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "429", RetryAfter: time.Hour})
	require.NoError(t, err)
	due := *op.NotBefore
	op, _, err = l.Revise(ctx, "k", opledger.Revision{Payload: json.RawMessage(`{"v":2}`), Version: 2})
	require.NoError(t, err)
	op, _, err = l.Approve(ctx, "k", opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "ann"})
	require.NoError(t, err)
	require.Equal(t, due, *op.NotBefore, "the wait the destination asked for")
	_, err = l.Claim(ctx, "k", opledger.ClaimOptions{})
	require.ErrorIs(t, err, opledger.ErrNotDue)
}

package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// A workflow recorded, read and resumed through the API: a step's
// operation runs through the operation routes, and only resuming records
// the next step, with the earlier step's result.
func TestWorkflow(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	spec := opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
		{Name: "create_task", Action: "crm.create_task", Destination: "crm", Payload: json.RawMessage(`{"title":"Call Ada"}`)},
		{Name: "notify", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"task":"{steps.create_task.ref}"}`)},
	}}
	wf, created, err := c.PutWorkflow(ctx, "wf:1", spec)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "wf:1", wf.Key)
	require.Equal(t, opledger.WorkflowRunning, wf.Status)
	require.Len(t, wf.Steps, 2)
	require.Equal(t, opledger.StepState(opledger.StatePending), wf.Steps[0].State)
	require.Equal(t, opledger.StepWaiting, wf.Steps[1].State)

	again, created, err := c.PutWorkflow(ctx, "wf:1", spec)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, wf.Fingerprint, again.Fingerprint)
	_, _, err = c.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: spec.Steps[:1]})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 422, e.Status)
	require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)

	got, err := c.GetWorkflow(ctx, "wf:1")
	require.NoError(t, err)
	require.Equal(t, wf.Fingerprint, got.Fingerprint)
	require.Equal(t, "wf:1/create_task", got.Steps[0].Key)
	require.NotNil(t, got.Steps[0].Operation)
	_, err = c.GetWorkflow(ctx, "wf:404")
	require.ErrorIs(t, err, opledger.ErrNotFound)

	cl, err := c.Claim(ctx, got.Steps[0].Key, client.ClaimRequest{Worker: "w1", Dispatch: true})
	require.NoError(t, err)
	_, err = c.Report(ctx, got.Steps[0].Key, cl.AttemptID, client.Report{FencingToken: cl.FencingToken,
		Outcome: opledger.OutcomeSucceeded, DestinationRef: "T1"})
	require.NoError(t, err)
	got, err = c.GetWorkflow(ctx, "wf:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StepState(opledger.StateSucceeded), got.Steps[0].State)
	require.Equal(t, opledger.StepState(opledger.StatePending), got.Steps[1].State, "the success reported through the API moved the workflow on")

	// Resuming again changes nothing.
	resumed, err := c.ResumeWorkflow(ctx, "wf:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StepState(opledger.StatePending), resumed.Steps[1].State)
	require.JSONEq(t, `{"task":"T1"}`, string(resumed.Steps[1].Payload))
	require.Equal(t, "notify", resumed.CurrentStep)
}

// A step's content revised and approved through the API; an absent
// payload is refused before sending, as for an operation.
func TestWorkflowApproveRevise(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client
	ctx := context.Background()
	wf, _, err := c.PutWorkflow(ctx, "wf:2", opledger.WorkflowSpec{RequiresApproval: true, Steps: []opledger.WorkflowStep{
		{Name: "create_task", Action: "crm.create_task", Destination: "crm", Payload: json.RawMessage(`{"title":"Call Ada"}`)},
		{Name: "notify", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"ops"}`)},
	}})
	require.NoError(t, err)
	require.Equal(t, opledger.WorkflowAwaitingApproval, wf.Status)
	require.Equal(t, opledger.StepState(opledger.StateAwaitingApproval), wf.Steps[0].State)

	for _, payload := range []json.RawMessage{nil, {}} {
		_, _, err = c.ReviseWorkflowStep(ctx, "wf:2", "create_task", opledger.Revision{Payload: payload, Version: 2})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		got, err := c.GetWorkflow(ctx, "wf:2")
		require.NoError(t, err)
		require.JSONEq(t, `{"title":"Call Ada"}`, string(got.Steps[0].Payload), "the content is kept")
		require.EqualValues(t, 1, got.Steps[0].Version)
	}

	revised, _, err := c.ReviseWorkflowStep(ctx, "wf:2", "create_task", opledger.Revision{
		Payload: json.RawMessage(`{"title":"Call Bob"}`), Version: 2, Actor: "ana"})
	require.NoError(t, err)
	step := revised.Steps[0]
	require.EqualValues(t, 2, step.Version)
	require.JSONEq(t, `{"title":"Call Bob"}`, string(step.Payload))
	require.Equal(t, opledger.StepState(opledger.StateAwaitingApproval), step.State)

	_, _, err = c.ApproveWorkflowStep(ctx, "wf:2", "create_task", opledger.Approval{Version: 2, Fingerprint: wf.Steps[0].Fingerprint, Approver: "ana"})
	var e *client.Error
	require.ErrorAs(t, err, &e, "the fingerprint of version 1")
	require.Equal(t, 409, e.Status)
	require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
	_, _, err = c.ApproveWorkflowStep(ctx, "wf:2", "no_such_step", opledger.Approval{Version: 2, Fingerprint: step.Fingerprint, Approver: "ana"})
	require.ErrorIs(t, err, opledger.ErrNotFound)

	approved, _, err := c.ApproveWorkflowStep(ctx, "wf:2", "create_task", opledger.Approval{Version: 2, Fingerprint: step.Fingerprint, Approver: "ana"})
	require.NoError(t, err)
	require.Equal(t, opledger.StepState(opledger.StatePending), approved.Steps[0].State)
	require.Equal(t, opledger.WorkflowRunning, approved.Status)

	// A waiting step without placeholders, approved ahead of its turn.
	notify := approved.Steps[1]
	require.Equal(t, opledger.StepWaiting, notify.State)
	ahead, _, err := c.ApproveWorkflowStep(ctx, "wf:2", "notify", opledger.Approval{Version: notify.Version, Fingerprint: notify.Fingerprint, Approver: "bo"})
	require.NoError(t, err)
	tok, err := b.ledger.Authenticate(ctx, b.token)
	require.NoError(t, err)
	require.Equal(t, "bo (token test, "+tok.ID+")", ahead.Steps[1].PreApprovedBy, "the approver, and the token that sent the approval")
}

// A resume whose next step cannot be recorded (its payload reads a field
// the step before did not answer) answers 200 with the workflow held and
// the reason, as a repeated PUT does: the request itself was fine.
func TestWorkflowResumeHeld(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"x":1}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"u":"{steps.a.response.url}"}`)},
	}}
	_, _, err := c.PutWorkflow(ctx, "wf:u", spec)
	require.NoError(t, err)
	cl, err := c.Claim(ctx, "wf:u/a", client.ClaimRequest{Worker: "w1", Dispatch: true})
	require.NoError(t, err)
	_, err = c.Report(ctx, "wf:u/a", cl.AttemptID, client.Report{FencingToken: cl.FencingToken,
		Outcome: opledger.OutcomeSucceeded, DestinationRef: "T1"})
	require.NoError(t, err)

	wf, err := c.ResumeWorkflow(ctx, "wf:u")
	require.NoError(t, err)
	require.Equal(t, opledger.WorkflowHeld, wf.Status)
	require.Contains(t, wf.Reason, "step b cannot be recorded: payload: steps.a.response is missing")
	require.Equal(t, opledger.StepWaiting, wf.Steps[1].State)
	_, err = c.ResumeWorkflow(ctx, "wf:404")
	require.ErrorIs(t, err, opledger.ErrNotFound, "other errors stay errors")
}

// ListWorkflows sends its filters and pages as the API reads them.
func TestListWorkflows(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	for _, key := range []string{"wf:b", "wf:a", "x:1", "wf:c"} {
		_, _, err := c.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "s", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
		require.NoError(t, err)
	}
	cl, err := c.Claim(ctx, "wf:b/s", client.ClaimRequest{Worker: "w1", Dispatch: true})
	require.NoError(t, err)
	_, err = c.Report(ctx, "wf:b/s", cl.AttemptID, client.Report{FencingToken: cl.FencingToken,
		Outcome: opledger.OutcomeSucceeded, DestinationRef: "B1"})
	require.NoError(t, err)

	var keys []string
	o := opledger.WorkflowListOptions{Prefix: "wf:", Open: true, Limit: 1}
	for {
		page, err := c.ListWorkflows(ctx, o)
		require.NoError(t, err)
		for _, w := range page.Items {
			keys = append(keys, w.Key)
			require.Equal(t, opledger.WorkflowRunning, w.Status)
		}
		if page.NextCursor == "" {
			break
		}
		o.Cursor = page.NextCursor
	}
	require.Equal(t, []string{"wf:a", "wf:c"}, keys, "wf:b finished, x:1 has another prefix")

	page, err := c.ListWorkflows(ctx, opledger.WorkflowListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Items, 4)
	_, err = c.ListWorkflows(ctx, opledger.WorkflowListOptions{Limit: opledger.MaxWorkflowListLimit + 1})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
}

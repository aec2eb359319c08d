package opledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWorkflowUpdatedAt: a workflow's UpdatedAt moves when one of its
// steps' operations changes (claimed, retried, approved, succeeded,
// cancelled), not only when the workflow row is written; revising a
// waiting step moves it too.
func TestWorkflowUpdatedAt(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			yes := true
			_, _, err = l.PutWorkflow(ctx, "wf:U-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"task":"{steps.a.ref}"}`), RequiresApproval: &yes},
				{Name: "c", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(`{"t":1}`)},
			}})
			require.NoError(t, err)
			start, err := l.Now(ctx)
			require.NoError(t, err)
			updated := func(want time.Time, what string) {
				t.Helper()
				w, err := l.GetWorkflow(ctx, "wf:U-1")
				require.NoError(t, err)
				require.True(t, want.Equal(w.UpdatedAt), "%s: updated_at %s, want %s", what, w.UpdatedAt, want)
				page, err := l.ListWorkflows(ctx, opledger.WorkflowListOptions{Prefix: "wf:U-1"})
				require.NoError(t, err)
				require.Len(t, page.Items, 1)
				require.True(t, want.Equal(page.Items[0].UpdatedAt), "%s: the list says %s", what, page.Items[0].UpdatedAt)
			}
			updated(start, "put")

			clock.Advance(time.Minute)
			c, err := l.Claim(ctx, "wf:U-1/a", opledger.ClaimOptions{})
			require.NoError(t, err)
			updated(start.Add(time.Minute), "step a claimed")

			clock.Advance(time.Minute)
			_, err = l.Report(ctx, "wf:U-1/a", c.AttemptID, c.FencingToken,
				opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503", RetryAfter: time.Hour})
			require.NoError(t, err)
			updated(start.Add(2*time.Minute), "step a retryable")

			clock.Advance(time.Minute)
			_, _, err = l.ReviseWorkflowStep(ctx, "wf:U-1", "c", opledger.Revision{Version: 2, Payload: json.RawMessage(`{"t":2}`), Actor: "ana"})
			require.NoError(t, err)
			updated(start.Add(3*time.Minute), "waiting step c revised")

			clock.Advance(2 * time.Hour)
			c, err = l.Claim(ctx, "wf:U-1/a", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:U-1/a", c.AttemptID, c.FencingToken,
				opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1"})
			require.NoError(t, err)
			w, err := l.ResumeWorkflow(ctx, "wf:U-1")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowAwaitingApproval, w.Status)
			recorded := start.Add(3*time.Minute + 2*time.Hour)
			updated(recorded, "step b recorded")

			clock.Advance(time.Minute)
			_, _, err = l.Resolve(ctx, "wf:U-1/b", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted", Operator: "ana"})
			require.NoError(t, err)
			updated(recorded.Add(time.Minute), "step b cancelled")
		})
	}
}

// TestWorkflowPendingReason: a pending step's reason names its not_before
// only while that time is still to come: an approval sets it to the
// approval's time, which says nothing.
func TestWorkflowPendingReason(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			yes := true
			w, _, err := l.PutWorkflow(ctx, "wf:P-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "charge", Action: "pay.charge", Destination: "pay", Payload: json.RawMessage(`{"cents":100}`), RequiresApproval: &yes},
			}})
			require.NoError(t, err)
			st := w.Steps[0]
			clock.Advance(time.Minute)
			w, _, err = l.ApproveWorkflowStep(ctx, "wf:P-1", "charge", opledger.Approval{Version: st.Version, Fingerprint: st.Fingerprint, Approver: "ana"})
			require.NoError(t, err)
			require.Equal(t, "step charge is pending", w.Reason, "the approval's own time is no reason to wait")
			w, err = l.GetWorkflow(ctx, "wf:P-1")
			require.NoError(t, err)
			require.Equal(t, "step charge is pending", w.Reason)

			// Times in reasons are UTC to the millisecond, as in the
			// timeline's text: to the second, two retries a few hundred
			// milliseconds apart would read alike.
			const millis = "2006-01-02T15:04:05.000Z07:00"
			clock.Advance(250 * time.Millisecond)
			c, err := l.Claim(ctx, "wf:P-1/charge", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:P-1/charge", c.AttemptID, c.FencingToken,
				opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "429", RetryAfter: time.Hour})
			require.NoError(t, err)
			op, err := l.Get(ctx, "wf:P-1/charge")
			require.NoError(t, err)
			require.NotNil(t, op.NotBefore)
			require.NotZero(t, op.NotBefore.Nanosecond(), "the test needs a time with milliseconds")
			w, err = l.GetWorkflow(ctx, "wf:P-1")
			require.NoError(t, err)
			require.Equal(t, "step charge is pending (not before "+op.NotBefore.UTC().Format(millis)+")", w.Reason, "a retry still to come")
			clock.Advance(2 * time.Hour)
			w, err = l.GetWorkflow(ctx, "wf:P-1")
			require.NoError(t, err)
			require.Equal(t, "step charge is pending", w.Reason, "a retry time passed")

			c, err = l.Claim(ctx, "wf:P-1/charge", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:P-1/charge", c.AttemptID, c.FencingToken,
				opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			op, err = l.Hold(ctx, "wf:P-1/charge", "lookups keep failing")
			require.NoError(t, err)
			require.NotNil(t, op.ReviewBy)
			require.NotZero(t, op.ReviewBy.Nanosecond(), "the test needs a time with milliseconds")
			w, err = l.GetWorkflow(ctx, "wf:P-1")
			require.NoError(t, err)
			require.Contains(t, w.Reason, "(review by "+op.ReviewBy.UTC().Format(millis)+")", "a held step")
		})
	}
}

// TestApproveWaitingStepTooEarly: approving ahead of its turn a waiting
// step whose content depends on earlier steps is refused with a sentence
// that names the workflow and the step and says when it can be approved;
// it still matches ErrInvalidState.
func TestApproveWaitingStepTooEarly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, _, err = l.PutWorkflow(ctx, "wf:E-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "mail", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"task":"{steps.create.ref}"}`)},
	}})
	require.NoError(t, err)
	_, _, err = l.ApproveWorkflowStep(ctx, "wf:E-1", "mail", opledger.Approval{Version: 1, Fingerprint: "sha256:00", Approver: "ana"})
	require.ErrorIs(t, err, opledger.ErrInvalidState)
	require.Equal(t, "step mail of workflow wf:E-1 cannot be approved before it is recorded: its content depends on earlier steps' results, "+
		"filled in when its turn comes; approve it once it is recorded", err.Error())
	require.False(t, strings.HasPrefix(err.Error(), opledger.ErrInvalidState.Error()))
}

// TestApproveWaitingStepWithWorkflowKey: a waiting step whose only
// placeholder is {workflow.key} depends on no earlier step: its content
// is known when the workflow is put, so GetWorkflow shows its future
// fingerprint and it can be approved ahead of its turn, then recorded
// approved. It was refused as depending on earlier steps' results.
func TestApproveWaitingStepWithWorkflowKey(t *testing.T) {
	t.Parallel()
	eachStore(t, opledger.Options{}, func(t *testing.T, l *opledger.Ledger) {
		ctx := context.Background()
		w, _, err := l.PutWorkflow(ctx, "wf:K-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			{Name: "mail", Action: "mail.send", Destination: "mail", RequiresApproval: new(true),
				Payload: json.RawMessage(`{"subject":"Case {workflow.key} <opened>","case":"{workflow.key}"}`)},
		}})
		require.NoError(t, err)
		want, err := opledger.Fingerprint("mail.send", "mail", json.RawMessage(`{"subject":"Case wf:K-1 <opened>","case":"wf:K-1"}`), 1)
		require.NoError(t, err)
		require.Equal(t, want, w.Steps[1].Fingerprint, "the future fingerprint is shown")
		w, _, err = l.ApproveWorkflowStep(ctx, "wf:K-1", "mail", opledger.Approval{Version: 1, Fingerprint: want, Approver: "ana"})
		require.NoError(t, err)
		require.Equal(t, "ana", w.Steps[1].PreApprovedBy)

		c, err := l.Claim(ctx, "wf:K-1/create", opledger.ClaimOptions{Dispatch: true})
		require.NoError(t, err)
		_, err = l.Report(ctx, "wf:K-1/create", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "T-1"})
		require.NoError(t, err)
		w, err = l.AdvanceWorkflowOf(ctx, "wf:K-1/create")
		require.NoError(t, err)
		op := w.Steps[1].Operation
		require.Equal(t, opledger.StatePending, op.State, "approved ahead of its turn")
		require.Equal(t, "ana", op.ApprovedBy)
		require.Equal(t, want, op.Fingerprint)
	})
}

// TestReviseWaitingStepChecksPayload: a waiting step's revision is
// refused, as PutWorkflow refuses such a step, when its payload could not
// be fingerprinted: taken, it would hold the workflow when the step's turn
// came.
func TestReviseWaitingStepChecksPayload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, _, err = l.PutWorkflow(ctx, "wf:R-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "mail", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"task":"{steps.create.ref}"}`)},
	}})
	require.NoError(t, err)
	for _, c := range []struct{ payload, reason string }{
		{`{"x":1,"x":2}`, "an object has two members of the same name"},
		{`{"x":1e400}`, "a number is beyond the range of a double"},
		{"{\"x\":\"\xc3\"}", "a string holds text that is not valid Unicode"},
	} {
		_, _, err := l.ReviseWorkflowStep(ctx, "wf:R-1", "mail", opledger.Revision{Version: 2, Payload: json.RawMessage(c.payload), Actor: "ana"})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, c.payload)
		require.ErrorContains(t, err, c.reason)
		_, _, err = l.PutWorkflow(ctx, "wf:R-2", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(c.payload)}}})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "PutWorkflow refuses it too: %s", c.payload)
	}
	w, err := l.GetWorkflow(ctx, "wf:R-1")
	require.NoError(t, err)
	require.Equal(t, int64(1), w.Steps[1].Version, "no revision was taken")
	_, _, err = l.ReviseWorkflowStep(ctx, "wf:R-1", "mail", opledger.Revision{Version: 2, Payload: json.RawMessage(`{"task":"{steps.create.ref}","x":1}`), Actor: "ana"})
	require.NoError(t, err, "a payload with placeholders is taken")
}

// TestStoredStepWithRefusedSensitiveField: a workflow stored by an
// earlier release whose waiting step lists a sensitive field this release
// refuses ("to.", an empty segment, which masked nothing) records that
// step when its turn comes, without the entry, instead of holding the
// workflow halfway.
func TestStoredStepWithRefusedSensitiveField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, _, err = l.PutWorkflow(ctx, "wf:old", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"ana@example.invalid"}`), SensitiveFields: []string{"to"}},
	}})
	require.NoError(t, err)
	db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite:"))
	require.NoError(t, err)
	res, err := db.Exec(`UPDATE workflows SET definition = replace(definition, '"sensitive_fields":["to"]', '"sensitive_fields":["to","to."]') WHERE key = 'wf:old'`)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, db.Close())

	c, err := l.Claim(ctx, "wf:old/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:old/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1"})
	require.NoError(t, err)
	w, err := l.ResumeWorkflow(ctx, "wf:old")
	require.NoError(t, err)
	require.Equal(t, opledger.WorkflowRunning, w.Status, w.Reason)
	step, err := l.Get(ctx, "wf:old/b")
	require.NoError(t, err)
	require.Equal(t, []string{"to"}, step.SensitiveFields)
}

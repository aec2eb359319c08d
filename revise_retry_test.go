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

// TestRevisionRetriedAfterApproval: a reviser whose answer was lost and
// who sends the same revision again after someone approved it gets a
// replay, not "revise needs a version above the current": the revision
// is in force. That holds for an operation, for a recorded workflow step
// and for a step revised while it waited. Another actor's revision, other
// content, or the same revision once a worker has claimed the operation
// are refused as before, and no replay records anything.
func TestRevisionRetriedAfterApproval(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			timelineLen := func(key string) int {
				t.Helper()
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				return len(tl)
			}

			// An operation.
			_, _, err = l.Record(ctx, opledger.Intent{Key: "refund:R-1", Action: "pay.refund", Destination: "pay",
				Payload: json.RawMessage(`{"cents":100}`), RequiresApproval: true})
			require.NoError(t, err)
			rev := opledger.Revision{Payload: json.RawMessage(`{"cents":90}`), Version: 2, Actor: "ana"}
			op, replayed, err := l.Revise(ctx, "refund:R-1", rev)
			require.NoError(t, err)
			require.False(t, replayed)
			op, _, err = l.Approve(ctx, "refund:R-1", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lead"})
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)
			before := timelineLen("refund:R-1")
			again, replayed, err := l.Revise(ctx, "refund:R-1", rev)
			require.NoError(t, err, "the reviser's retry after the approval")
			require.True(t, replayed)
			require.Equal(t, opledger.StatePending, again.State, "the approval stands")
			require.Equal(t, "lead", again.ApprovedBy)
			require.Equal(t, before, timelineLen("refund:R-1"), "a replay records nothing")

			other := rev
			other.Actor = "bob"
			_, _, err = l.Revise(ctx, "refund:R-1", other)
			require.ErrorIs(t, err, opledger.ErrInvalidInput, "another actor's revision at that version")
			other = rev
			other.Payload = json.RawMessage(`{"cents":80}`)
			_, _, err = l.Revise(ctx, "refund:R-1", other)
			require.ErrorIs(t, err, opledger.ErrInvalidInput, "other content at that version")

			// A worker that claims with the intent it first recorded is
			// told the operation was revised, and how to run it.
			first := opledger.Intent{Key: "refund:R-1", Action: "pay.refund", Destination: "pay",
				Payload: json.RawMessage(`{"cents":100}`), RequiresApproval: true}
			_, err = l.Claim(ctx, "refund:R-1", opledger.ClaimOptions{Intent: &first})
			var me *opledger.MismatchError
			require.ErrorAs(t, err, &me)
			require.EqualValues(t, 2, me.RevisedTo)
			require.ErrorContains(t, err, "the operation was revised to version 2 since, and its content is the revised one (GET shows it); a worker sends it by claiming without an intent")
			_, err = l.Claim(ctx, "refund:R-1", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, _, err = l.Revise(ctx, "refund:R-1", rev)
			require.ErrorIs(t, err, opledger.ErrInProgress, "once a worker holds it, a repeat is refused")

			// A workflow step revised after it was recorded, and one
			// revised while it waited.
			yes := true
			_, _, err = l.PutWorkflow(ctx, "wf:R-2", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`), RequiresApproval: &yes},
				{Name: "mail", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"t-1"}`)},
			}})
			require.NoError(t, err)
			waiting := opledger.Revision{Payload: json.RawMessage(`{"to":"t-2"}`), Version: 2, Actor: "dee"}
			_, _, err = l.ReviseWorkflowStep(ctx, "wf:R-2", "mail", waiting)
			require.NoError(t, err)
			recorded := opledger.Revision{Payload: json.RawMessage(`{"n":2}`), Version: 2, Actor: "ana"}
			w, _, err := l.ReviseWorkflowStep(ctx, "wf:R-2", "create", recorded)
			require.NoError(t, err)
			create := w.Step("create")
			w, _, err = l.ApproveWorkflowStep(ctx, "wf:R-2", "create", opledger.Approval{Version: create.Version, Fingerprint: create.Fingerprint, Approver: "lead"})
			require.NoError(t, err)
			require.Equal(t, opledger.StepState(opledger.StatePending), w.Step("create").State)
			before = timelineLen("wf:R-2/create")
			w, replayed, err = l.ReviseWorkflowStep(ctx, "wf:R-2", "create", recorded)
			require.NoError(t, err, "the reviser's retry after the step's approval")
			require.True(t, replayed)
			require.Equal(t, opledger.StepState(opledger.StatePending), w.Step("create").State)
			require.Equal(t, before, timelineLen("wf:R-2/create"))

			c, err := l.Claim(ctx, "wf:R-2/create", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:R-2/create", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "C-1"})
			require.NoError(t, err)
			w, err = l.ResumeWorkflow(ctx, "wf:R-2")
			require.NoError(t, err)
			mail := w.Step("mail")
			require.Equal(t, opledger.StepState(opledger.StateAwaitingApproval), mail.State, "recorded with the revision made while it waited")
			_, _, err = l.ApproveWorkflowStep(ctx, "wf:R-2", "mail", opledger.Approval{Version: mail.Version, Fingerprint: mail.Fingerprint, Approver: "lead"})
			require.NoError(t, err)
			before = timelineLen("wf:R-2/mail")
			w, replayed, err = l.ReviseWorkflowStep(ctx, "wf:R-2", "mail", waiting)
			require.NoError(t, err, "the retry of a revision made while the step waited, after its approval")
			require.True(t, replayed)
			require.Equal(t, opledger.StepState(opledger.StatePending), w.Step("mail").State)
			require.Equal(t, before, timelineLen("wf:R-2/mail"))
			// The same again, naming a field to mask: a replay that adds it.
			marked := waiting
			marked.SensitiveFields = []string{"to"}
			_, replayed, err = l.ReviseWorkflowStep(ctx, "wf:R-2", "mail", marked)
			require.NoError(t, err)
			require.True(t, replayed)
			step, err := l.Get(ctx, "wf:R-2/mail")
			require.NoError(t, err)
			require.Equal(t, []string{"to"}, step.SensitiveFields)
			mc, err := l.Claim(ctx, "wf:R-2/mail", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, _, err = l.ReviseWorkflowStep(ctx, "wf:R-2", "mail", waiting)
			require.ErrorIs(t, err, opledger.ErrInProgress)
			// Given back undispatched: claimed once, so no longer a replay.
			_, err = l.Release(ctx, "wf:R-2/mail", mc.AttemptID, mc.FencingToken, "")
			require.NoError(t, err)
			_, _, err = l.ReviseWorkflowStep(ctx, "wf:R-2", "mail", waiting)
			require.ErrorIs(t, err, opledger.ErrInvalidInput, "a worker claimed it since: a new revision needs a new version")
		})
	}
}

// TestRevisionAddsSensitiveFields: a revision may name sensitive fields
// (its new content may carry a member the first did not): they are added
// to the operation's before anything is written, so that the new content
// and the revision's timeline text are masked, never removed; a waiting
// workflow step's revision adds them to the step, which is recorded
// with them. A malformed one is refused and changes nothing.
func TestRevisionAddsSensitiveFields(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			_, _, err = l.Record(ctx, opledger.Intent{Key: "pay:P-1", Action: "pay.charge", Destination: "pay",
				Payload: json.RawMessage(`{"email":"ana@example.invalid"}`), SensitiveFields: []string{"email"}, RequiresApproval: true})
			require.NoError(t, err)

			bad := opledger.Revision{Payload: json.RawMessage(`{"card":"4111-SECRET-1"}`), Version: 2, SensitiveFields: []string{"/card"}}
			_, _, err = l.Revise(ctx, "pay:P-1", bad)
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			require.ErrorContains(t, err, "JSON pointer")
			op, err := l.Get(ctx, "pay:P-1")
			require.NoError(t, err)
			require.EqualValues(t, 1, op.Version, "refused: nothing changed")

			rev := opledger.Revision{Payload: json.RawMessage(`{"email":"ana@example.invalid","card":"4111-SECRET-1"}`), Version: 2,
				Actor: "ana", SensitiveFields: []string{"card"}}
			op, _, err = l.Revise(ctx, "pay:P-1", rev)
			require.NoError(t, err)
			require.Equal(t, []string{"email", "card"}, op.SensitiveFields)
			require.JSONEq(t, `{"email":"***","card":"***"}`, string(op.Masked().Payload))
			tl, err := l.Timeline(ctx, "pay:P-1")
			require.NoError(t, err)
			require.Contains(t, tl[len(tl)-2].Evidence, "card marked sensitive", "noted before the revision")
			for _, e := range tl {
				require.NotContains(t, e.Evidence, "SECRET")
			}
			// A later revision naming fewer unmasks nothing.
			op, _, err = l.Revise(ctx, "pay:P-1", opledger.Revision{Payload: json.RawMessage(`{"card":"4111-SECRET-2"}`), Version: 3, Actor: "ana"})
			require.NoError(t, err)
			require.Equal(t, []string{"email", "card"}, op.SensitiveFields)

			_, _, err = l.PutWorkflow(ctx, "wf:S-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"t"}`)},
			}})
			require.NoError(t, err)
			w, _, err := l.ReviseWorkflowStep(ctx, "wf:S-1", "b", opledger.Revision{Payload: json.RawMessage(`{"to":"bo@example.invalid"}`),
				Version: 2, Actor: "ana", SensitiveFields: []string{"to"}})
			require.NoError(t, err)
			require.NotContains(t, string(w.Step("b").Payload), "bo@example.invalid", "the waiting step is shown masked")
			c, err := l.Claim(ctx, "wf:S-1/a", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:S-1/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1"})
			require.NoError(t, err)
			_, err = l.ResumeWorkflow(ctx, "wf:S-1")
			require.NoError(t, err)
			step, err := l.Get(ctx, "wf:S-1/b")
			require.NoError(t, err)
			require.Equal(t, []string{"to"}, step.SensitiveFields, "recorded with the fields its revision named")
		})
	}
}

// TestRevisedRecordedStepFilled: a revision of a workflow step already
// recorded may use the placeholders of PutWorkflow, and they are filled
// from the earlier steps' results, never stored as text to be sent; a
// path filled with a value masked in the earlier step is masked in the
// revised step too. The same revision again is a replay, and one naming
// a step that is not earlier is refused and changes nothing.
func TestRevisedRecordedStepFilled(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			_, _, err = l.PutWorkflow(ctx, "wf:F-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"token":"tok-SECRET"}`), SensitiveFields: []string{"token"}},
				{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"task":"{steps.a.ref}"}`)},
			}})
			require.NoError(t, err)
			c, err := l.Claim(ctx, "wf:F-1/a", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:F-1/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
				DestinationRef: "T-10", Response: json.RawMessage(`{"token":"tok-SECRET"}`)})
			require.NoError(t, err)
			_, err = l.ResumeWorkflow(ctx, "wf:F-1")
			require.NoError(t, err)
			b, err := l.Get(ctx, "wf:F-1/b")
			require.NoError(t, err)
			require.JSONEq(t, `{"task":"T-10"}`, string(b.Payload), "recorded, filled")

			rev := opledger.Revision{Payload: json.RawMessage(`{"task":"{steps.a.ref}","t":"{steps.a.response.token}","note":"v2"}`),
				Version: 2, Actor: "ana"}
			_, replayed, err := l.ReviseWorkflowStep(ctx, "wf:F-1", "b", rev)
			require.NoError(t, err)
			require.False(t, replayed)
			b, err = l.Get(ctx, "wf:F-1/b")
			require.NoError(t, err)
			require.JSONEq(t, `{"task":"T-10","t":"tok-SECRET","note":"v2"}`, string(b.Payload), "the revision filled, as a worker's claim sends it")
			require.Equal(t, opledger.StateAwaitingApproval, b.State)
			require.EqualValues(t, 2, b.Version)
			require.Equal(t, []string{"t"}, b.SensitiveFields, "masked in a, masked in b")
			require.JSONEq(t, `{"task":"T-10","t":"***","note":"v2"}`, string(b.Masked().Payload))

			_, replayed, err = l.ReviseWorkflowStep(ctx, "wf:F-1", "b", rev)
			require.NoError(t, err)
			require.True(t, replayed, "the same revision again")

			_, _, err = l.ReviseWorkflowStep(ctx, "wf:F-1", "b", opledger.Revision{Payload: json.RawMessage(`{"task":"{steps.b.ref}"}`), Version: 3, Actor: "ana"})
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			require.ErrorContains(t, err, "{steps.b.ref} does not name an earlier step")
			after, err := l.Get(ctx, "wf:F-1/b")
			require.NoError(t, err)
			require.EqualValues(t, 2, after.Version, "refused: nothing changed")
			require.Equal(t, b.Payload, after.Payload)
		})
	}
}

// TestReviseAfterUndispatchedCall: an attempt that reports uncertain (or
// a late uncertain) without a dispatch mark may have called all the same,
// so once a retry is authorized the operation is not "never sent": its
// content is not revised under a new idempotency key, and the operation
// carries the attempt's claim as its first call.
func TestReviseAfterUndispatchedCall(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			in := func(key string) *opledger.Intent {
				return &opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}
			}
			revise := func(key string) error {
				t.Helper()
				_, _, err := l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Operator: "ana", Reason: "checked: absent"})
				require.NoError(t, err)
				_, _, err = l.Revise(ctx, key, opledger.Revision{Payload: json.RawMessage(`{"n":2}`), Version: 2, Actor: "ana"})
				return err
			}

			// Reported uncertain by the attempt holding the operation.
			c, err := l.Claim(ctx, "own:1", opledger.ClaimOptions{Intent: in("own:1")})
			require.NoError(t, err)
			op, err := l.Report(ctx, "own:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateUncertain, op.State)
			require.NotNil(t, op.FirstDispatchedAt, "the call may have started at the claim")
			require.True(t, op.FirstDispatchedAt.Equal(c.Operation.UpdatedAt), "dated from the claim")
			err = revise("own:1")
			require.ErrorIs(t, err, opledger.ErrInvalidState)
			require.ErrorContains(t, err, "a correction after that is a new operation with its own key")

			// A workflow's step says what can be done instead: a step's
			// key is the one its workflow waits on.
			_, _, err = l.PutWorkflow(ctx, "wf:S-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}}})
			require.NoError(t, err)
			stepKey := opledger.WorkflowStepKey("wf:S-1", "a")
			c, err = l.Claim(ctx, stepKey, opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, stepKey, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
			require.NoError(t, err)
			_, _, err = l.ReviseWorkflowStep(ctx, "wf:S-1", "a", opledger.Revision{Payload: json.RawMessage(`{"n":2}`), Version: 2, Actor: "ana"})
			require.ErrorIs(t, err, opledger.ErrInvalidState)
			require.ErrorContains(t, err, "a workflow step's content is fixed once it may have been sent: retry it as it is, or cancel it, which fails the workflow")
			require.NotContains(t, err.Error(), "new operation")

			// A late uncertain from an attempt whose lease ran out first.
			c, err = l.Claim(ctx, "late:1", opledger.ClaimOptions{Intent: in("late:1"), Lease: time.Second})
			require.NoError(t, err)
			clock.Advance(2 * time.Second)
			_, err = l.ExpireLeases(ctx)
			require.NoError(t, err)
			op, err = l.Get(ctx, "late:1")
			require.NoError(t, err)
			require.Nil(t, op.FirstDispatchedAt, "given up as never sent")
			_, err = l.Report(ctx, "late:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
			op, err = l.Get(ctx, "late:1")
			require.NoError(t, err)
			require.Equal(t, opledger.StateUncertain, op.State)
			require.NotNil(t, op.FirstDispatchedAt)
			require.ErrorIs(t, revise("late:1"), opledger.ErrInvalidState)

			// Never called: still revised.
			_, _, err = l.Record(ctx, *in("never:1"))
			require.NoError(t, err)
			_, _, err = l.Revise(ctx, "never:1", opledger.Revision{Payload: json.RawMessage(`{"n":2}`), Version: 2, Actor: "ana"})
			require.NoError(t, err)
		})
	}
}

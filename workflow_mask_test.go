package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// A destination that keys its answer by a sensitive value (results by
// recipient) has the member's name masked where the answer is shown, and
// a later step filled from that object keeps it masked too: the path it
// inherits is the object's, never one that spells the name.
func TestMaskedMemberNamesAndInheritedPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	const secret = "ana@example.invalid"
	_, _, err = l.PutWorkflow(ctx, "wf:m", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"` + secret + `"}`),
			SensitiveFields: []string{"to"}},
		{Name: "b", Action: "crm.note", Destination: "crm",
			Payload: json.RawMessage(`{"results":"{steps.a.response.results}","id":"{steps.a.response.id}"}`)},
	}})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "wf:m/a", opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	a, err := l.Report(ctx, "wf:m/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "M1", Response: json.RawMessage(`{"id":"M1","results":{"` + secret + `":"sent","ANA@example.invalid":"dup"}}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"M1","results":{"***":"dup","*** (2)":"sent"}}`, string(a.Masked().Response),
		"member names masked, told apart in the order of the real names")

	_, err = l.AdvanceWorkflowOf(ctx, "wf:m/a")
	require.NoError(t, err)
	b, err := l.Get(ctx, "wf:m/b")
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"M1","results":{"`+secret+`":"sent","ANA@example.invalid":"dup"}}`, string(b.Payload),
		"the step is sent the real object")
	require.Equal(t, []string{"results"}, b.SensitiveFields)
	shown, err := json.Marshal(b)
	require.NoError(t, err)
	require.NotContains(t, string(shown), "example.invalid")
	require.Contains(t, string(shown), `"id":"M1"`)
}

// TestStepPayloadWithoutPathToMask: a step payload that is not an object
// ("{steps.a.ref}", "hi {steps.a.response.mail}") has no path to mask a
// value an earlier step shows masked. It is refused when the workflow is
// put, if that step has sensitive fields; and a step whose earlier step
// gained them later is not recorded with the value in the clear: the
// workflow is held, saying why (before, the value was shown in the step's
// payload in lists, the API and the console).
func TestStepPayloadWithoutPathToMask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	const secret = "cat@example.invalid"
	a := opledger.WorkflowStep{Name: "a", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"email":"` + secret + `"}`)}
	for _, payload := range []string{`"{steps.a.response.mail}"`, `"hi {steps.a.ref}"`, `["{steps.a.ref}"]`} {
		sensitive := a
		sensitive.SensitiveFields = []string{"email"}
		_, _, err := l.PutWorkflow(ctx, "wf:refused", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{sensitive,
			{Name: "b", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(payload)}}})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, payload)
		require.ErrorContains(t, err, "a payload that is not an object has no path to mask them", payload)
	}
	// The key of a step is never sensitive: a payload of it alone is fine.
	sensitive := a
	sensitive.SensitiveFields = []string{"email"}
	_, _, err = l.PutWorkflow(ctx, "wf:key", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{sensitive,
		{Name: "b", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(`"{steps.a.key}"`)}}})
	require.NoError(t, err)

	// Step a without sensitive fields: b is taken. A repeat of the
	// workflow marking a's email sensitive is refused as the definition
	// would be; a repeat of step a's intent marks it, and a's reference
	// holds it.
	steps := []opledger.WorkflowStep{a, {Name: "b", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(`"created {steps.a.ref}"`)}}
	_, _, err = l.PutWorkflow(ctx, "wf:later", opledger.WorkflowSpec{Steps: steps})
	require.NoError(t, err)
	steps[0].SensitiveFields = []string{"email"}
	_, _, err = l.PutWorkflow(ctx, "wf:later", opledger.WorkflowSpec{Steps: steps})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "wf:later/a", Action: a.Action, Destination: a.Destination, Payload: a.Payload,
		SensitiveFields: []string{"email"}})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "wf:later/a", opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:later/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "r-" + secret})
	require.NoError(t, err)
	_, err = l.AdvanceWorkflowOf(ctx, "wf:later/a")
	require.ErrorAs(t, err, new(*opledger.StepError))
	w, err := l.GetWorkflow(ctx, "wf:later")
	require.NoError(t, err)
	require.Equal(t, opledger.WorkflowHeld, w.Status)
	require.Contains(t, w.Reason, "no sensitive_fields path can name it")
	_, err = l.Get(ctx, "wf:later/b")
	require.ErrorIs(t, err, opledger.ErrNotFound, "not recorded")
	shown, err := json.Marshal(w)
	require.NoError(t, err)
	require.NotContains(t, string(shown), secret)
}

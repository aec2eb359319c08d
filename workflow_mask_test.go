package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestStepPayloadWithoutPathToMask: a step payload whose text takes the
// reference or a response of a step with sensitive fields outside any
// object member ("{steps.a.ref}", "hi {steps.a.response.mail}",
// ["{steps.a.ref}"]) has no path to mask it: a new workflow with one is
// refused. Shapes with a path are taken: a member inside a list
// ([{"to": "{steps.a.ref}"}]), a whole response that may be an object. A
// step whose earlier step gained sensitive fields later (a repeat), or
// whose whole-response placeholder gets a text, is not recorded with the
// value in the clear: the workflow is held, saying why (before, the value
// was shown in the step's payload in lists, the API and the console).
func TestStepPayloadWithoutPathToMask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openSQLiteLedger(t)
	var err error
	const secret = "cat@example.invalid"
	a := opledger.WorkflowStep{Name: "a", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"email":"` + secret + `"}`)}
	sensitive := a
	sensitive.SensitiveFields = []string{"email"}
	for i, payload := range []string{`"{steps.a.response.mail}x"`, `"hi {steps.a.ref}"`, `"{steps.a.ref}"`, `["{steps.a.ref}"]`,
		`{"":"{steps.a.ref}"}`, `{"":{"to":"{steps.a.ref}"}}`} {
		_, _, err := l.PutWorkflow(ctx, fmt.Sprintf("wf:refused-%d", i), opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{sensitive,
			{Name: "b", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(payload)}}})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, payload)
		require.ErrorContains(t, err, "outside an object member no path can name it", payload)
	}
	for i, payload := range []string{`"{steps.a.key}"`, `[{"to":"{steps.a.ref}"}]`, `"{steps.a.response}"`} {
		_, _, err = l.PutWorkflow(ctx, fmt.Sprintf("wf:taken-%d", i), opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{sensitive,
			{Name: "b", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(payload)}}})
		require.NoError(t, err, payload)
	}

	// Step a without sensitive fields: b is taken; a repeat of the
	// workflow then marks a's email sensitive (a repeat is no new
	// definition), and a's reference holds it.
	steps := []opledger.WorkflowStep{a, {Name: "b", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(`"created {steps.a.ref}"`)}}
	_, _, err = l.PutWorkflow(ctx, "wf:later", opledger.WorkflowSpec{Steps: steps})
	require.NoError(t, err)
	steps[0].SensitiveFields = []string{"email"}
	_, _, err = l.PutWorkflow(ctx, "wf:later", opledger.WorkflowSpec{Steps: steps})
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

	// A whole response that is a text: held when the step's turn comes.
	c, err = l.Claim(ctx, "wf:taken-2/a", opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:taken-2/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "r1", Response: json.RawMessage(`"sent to ` + secret + `"`)})
	require.NoError(t, err)
	_, err = l.AdvanceWorkflowOf(ctx, "wf:taken-2/a")
	require.ErrorAs(t, err, new(*opledger.StepError))
	_, err = l.Get(ctx, "wf:taken-2/b")
	require.ErrorIs(t, err, opledger.ErrNotFound, "not recorded")
}

// TestWholeResponseMemberNameHoldsStep: a step whose payload is itself
// an earlier step's response object (or a list of one), a member of
// which is named by a value that step shows masked, has no path that
// can mask the name: the workflow is held until the step is revised
// with the value in a field, as for a response that turns out a text.
// Before, the step was recorded with the name in the clear, both in its
// payload ({"<address>":"***"}) and in its sensitive_fields.
func TestWholeResponseMemberNameHoldsStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openSQLiteLedger(t)
	const secret = "dan@example.invalid"
	for _, payload := range []string{`"{steps.a.response.results}"`, `["{steps.a.response.results}"]`} {
		wf := "wf:names-" + fmt.Sprint(len(payload))
		_, _, err := l.PutWorkflow(ctx, wf, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "a", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"` + secret + `"}`),
				SensitiveFields: []string{"to"}},
			{Name: "b", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(payload)},
		}})
		require.NoError(t, err, payload)
		c, err := l.Claim(ctx, wf+"/a", opledger.ClaimOptions{Dispatch: true})
		require.NoError(t, err)
		a, err := l.Report(ctx, wf+"/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
			DestinationRef: "M1", Response: json.RawMessage(`{"id":"M1","results":{"` + secret + `":"sent"}}`)})
		require.NoError(t, err)
		require.JSONEq(t, `{"id":"M1","results":{"***":"sent"}}`, string(a.Masked().Response), "step a shows the name masked")

		_, err = l.AdvanceWorkflowOf(ctx, wf+"/a")
		require.ErrorAs(t, err, new(*opledger.StepError), payload)
		_, err = l.Get(ctx, wf+"/b")
		require.ErrorIs(t, err, opledger.ErrNotFound, "%s: not recorded", payload)
		w, err := l.GetWorkflow(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowHeld, w.Status, payload)
		require.Contains(t, w.Reason, "no sensitive_fields path can name it", payload)
		shown, err := json.Marshal(w)
		require.NoError(t, err)
		require.NotContains(t, string(shown), secret, payload)

		// Revised with the object in a field, the step goes on, masked.
		_, _, err = l.ReviseWorkflowStep(ctx, wf, "b", opledger.Revision{Version: 2,
			Payload: json.RawMessage(`{"results":"{steps.a.response.results}"}`)})
		require.NoError(t, err)
		_, err = l.ResumeWorkflow(ctx, wf)
		require.NoError(t, err)
		b, err := l.Get(ctx, wf+"/b")
		require.NoError(t, err)
		require.JSONEq(t, `{"results":{"`+secret+`":"sent"}}`, string(b.Payload), "the step is sent the real object")
		require.Equal(t, []string{"results"}, b.SensitiveFields)
		shown, err = json.Marshal(b)
		require.NoError(t, err)
		require.NotContains(t, string(shown), secret, payload)
	}
}

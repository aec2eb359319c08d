package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A workflow step marked succeeded in the console records the workflow's
// next step before the answer, as the HTTP API's resolve route does: the
// workflow's page, opened next, shows the next step recorded, not "due to
// be recorded; resume the workflow", which the console offers no way to do.
// (No Maintain runs here: nothing else moves the workflow on.)
func TestMarkSucceededAdvancesWorkflow(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	ctx := context.Background()
	_, _, err := l.PutWorkflow(ctx, "wf:A-1", opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
		{Name: "task", Action: "crm.create_task", Destination: "crm", Payload: json.RawMessage(`{"t":1}`)},
		{Name: "email", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"task":"{steps.task.ref}"}`)}}})
	require.NoError(t, err)
	cl, err := l.Claim(ctx, "wf:A-1/task", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "wf:A-1/task", cl.AttemptID, cl.FencingToken)
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:A-1/task", cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	_, _, err = l.Reconcile(ctx, "wf:A-1/task", opledger.Finding{Evidence: "no lookup"})
	require.NoError(t, err)

	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	s.decide(url.PathEscape("wf:A-1/task"), url.Values{"decision": {"mark_succeeded"}, "ref": {"T-9"}, "reason": {"found task T-9 in the CRM"}})

	w, err := l.GetWorkflow(ctx, "wf:A-1")
	require.NoError(t, err)
	next := w.Step("email")
	require.NotNil(t, next.Operation, "the next step is recorded once the decision is answered: %s", w.Reason)
	require.Equal(t, json.RawMessage(`{"task":"T-9"}`), next.Operation.Payload)
	require.Contains(t, s.get("/workflows/wf:A-1"), `<a href="/operations/wf:A-1%2Femail">wf:A-1/email</a>`)
}

package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// The exception queue lists a workflow that cannot go on (its next step
// cannot be recorded), which has no operation in the queue's states.
func TestQueueShowsStuckWorkflows(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	_, _, err := l.PutWorkflow(ctx, "wf:stuck", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
	}})
	require.NoError(t, err)
	require.NotContains(t, s.get("/"), "Workflows that cannot go on")
	claim, err := l.Claim(ctx, "wf:stuck/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:stuck/a", claim.AttemptID, claim.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1", Response: json.RawMessage(`{"id":1}`)})
	require.NoError(t, err)

	page := s.get("/")
	require.Contains(t, page, "Workflows that cannot go on")
	require.Contains(t, page, `<a href="/workflows/wf:stuck">wf:stuck</a>: <bdi>step b cannot be recorded`)
	require.NotContains(t, page, "Nothing needs attention")
}

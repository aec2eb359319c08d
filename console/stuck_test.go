package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
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
	require.Contains(t, page, "opledger workflows cancel KEY --reason TEXT", "the way to give up on one")

	// Given up on, it leaves the queue; its page says who, at which
	// step and why.
	_, _, err = l.CancelWorkflow(ctx, "wf:stuck", opledger.WorkflowCancel{Operator: "ana", Reason: "customer left"})
	require.NoError(t, err)
	page = s.get("/")
	require.NotContains(t, page, "Workflows that cannot go on")
	page = s.get("/workflows/wf:stuck")
	require.Contains(t, page, `<span class="badge">cancelled</span>`)
	require.Contains(t, page, "cancelled by ana at step b: customer left")
}

// The exception queue lists at most a page of the workflows that cannot
// go on (the workflow list's bound, opledger.MaxWorkflowListLimit, or the
// queue's limit when lower) and says so when the list may have been cut,
// naming where the rest are.
func TestQueueSaysStuckWorkflowsCut(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	c.SetQueueLimit(2)
	ctx := context.Background()
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	stick := func(key string) {
		t.Helper()
		_, _, err := l.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
		}})
		require.NoError(t, err)
		claim, err := l.Claim(ctx, key+"/a", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = l.Report(ctx, key+"/a", claim.AttemptID, claim.FencingToken,
			opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1", Response: json.RawMessage(`{"id":1}`)})
		require.NoError(t, err)
	}
	stick("wf:1")
	require.NotContains(t, s.get("/"), "more may be stuck")
	stick("wf:2")
	stick("wf:3")
	page := s.get("/")
	require.Contains(t, page, `<a href="/workflows/wf:2">wf:2</a>`)
	require.NotContains(t, page, `<a href="/workflows/wf:3">wf:3</a>`)
	require.Contains(t, page, "The first 2 are shown; more may be stuck (the dashboard counts them): revising or giving up on these shows the next.")
}

// The exception queue names a pending operation that nothing has claimed
// for longer than console.DueNoticeAfter (a misspelt destination), which
// is in none of the queue's states; once claimed, the note goes.
func TestQueueShowsOperationNothingClaims(t *testing.T) {
	t.Parallel()
	l, token, c, offset := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	_, _, err := l.Record(ctx, opledger.Intent{Key: "typo:1", Action: "crm.create", Destination: "crmm", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	page := s.get("/")
	require.NotContains(t, page, "Waiting for a worker", "due for less than the notice's wait")
	require.Contains(t, page, "Nothing needs attention")

	offset.Add(int64(console.DueNoticeAfter + time.Minute))
	page = s.get("/")
	require.Contains(t, page, "Waiting for a worker")
	require.Contains(t, page, `<a href="/operations/typo:1">typo:1</a>, for destination <bdi>crmm</bdi>, has been due for 6 min and nothing has claimed it`)
	require.NotContains(t, page, "Nothing needs attention")
	require.Contains(t, page, `<a href="/operations?state=pending&amp;destination=crmm">Pending operations of <bdi>crmm</bdi></a>`)

	_, err = l.Claim(ctx, "typo:1", opledger.ClaimOptions{})
	require.NoError(t, err)
	require.NotContains(t, s.get("/"), "Waiting for a worker")
}

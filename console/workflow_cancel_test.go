package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A cancelled workflow's pages: the workflow's says who cancelled it,
// when and why, and so does the timeline of its failed step; its step
// never recorded shows cancelled (not waiting, not needing an approval),
// and the page of that step's key says it never runs; the failed step
// is offered no retry.
func TestCancelledWorkflowPages(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	yes := true
	_, _, err := l.PutWorkflow(ctx, "onb:X-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "pay", Action: "pay.charge", Destination: "pay", Payload: json.RawMessage(`{"cents":100}`), RequiresApproval: &yes},
	}})
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, "onb:X-1/create", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "wrong customer", Operator: "bob"})
	require.NoError(t, err)
	_, _, err = l.CancelWorkflow(ctx, "onb:X-1", opledger.WorkflowCancel{Operator: "ana", Reason: "customer withdrew"})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	page := s.get("/workflows/" + url.PathEscape("onb:X-1"))
	require.Contains(t, page, `<strong><bdi>pay</bdi></strong> <span class="badge ">cancelled</span>`)
	require.NotContains(t, page, "waiting")
	require.NotContains(t, page, "needs approval before it runs", "it never runs")
	require.Regexp(t, `<p class="notice" role="status" id="cancelled">Cancelled by <bdi>ana</bdi>, <time datetime="[^"]+Z">[^<]*\d\d:\d\d[^<]*</time>, at step <bdi>create</bdi>: <bdi>customer withdrew</bdi></p>`, page)
	op := s.get("/operations/" + url.PathEscape("onb:X-1/create"))
	require.Contains(t, op, "workflow cancelled", "the failed step's timeline says it")
	require.Contains(t, op, "workflow onb:X-1 cancelled at this step: customer withdrew")
	// Not attempted again: no retry is offered, only a success found.
	require.Contains(t, op, "Its workflow was cancelled at this step, so it is not attempted again.")
	require.Contains(t, op, "It happened")
	require.NotContains(t, op, "Send again")
	// A retry posted anyway (a form kept from elsewhere) is refused, and
	// said so, not taken for a store that does not answer.
	csrf := csrfField.FindStringSubmatch(op)
	require.Len(t, csrf, 2)
	failed, err := l.Get(ctx, "onb:X-1/create")
	require.NoError(t, err)
	code, body := s.post("/operations/"+url.PathEscape("onb:X-1/create")+"/resolve", url.Values{"csrf": {csrf[1]},
		"decision": {"authorize_retry"}, "reason": {"try again"}, "seen": {failed.UpdatedAt.Format(time.RFC3339Nano)}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "Its workflow was cancelled at this step, so it is not attempted again: your decision was not recorded.")
	other := "onb:X-2"
	_, _, err = l.PutWorkflow(ctx, other, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, other+"/create", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "wrong customer"})
	require.NoError(t, err)
	require.Contains(t, s.get("/operations/"+url.PathEscape(other+"/create")), "Send again", "a failed step of a workflow not cancelled may be retried")

	code, body = s.fetch("/operations/" + url.PathEscape("onb:X-1/pay"))
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, `No operation has this key yet: it is step <bdi>pay</bdi> of workflow `+
		`<a href="/workflows/onb:X-1">onb:X-1</a>, which was cancelled before it was recorded: it never runs.</p>`)
	require.Contains(t, body, "customer withdrew")
	require.NotContains(t, body, "No operation of tenant")
}

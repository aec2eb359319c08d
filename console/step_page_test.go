package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// The page of a workflow step not recorded yet says it is a step of its
// workflow, waiting, and links to the workflow, rather than sending the
// operator to look in another tenant; a key that names no step still
// names the tenant.
func TestStepNotRecordedPage(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	_, _, err := l.PutWorkflow(ctx, "onb:F-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "pay", Action: "pay.charge", Destination: "pay", Payload: json.RawMessage(`{"cents":100}`)},
	}})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	page := func(key string) (int, string) {
		t.Helper()
		resp, err := s.hc.Get(srv.URL + "/operations/" + url.PathEscape(key))
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	code, body := page("onb:F-1/pay")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, `<p class="notice" role="status" id="step-not-recorded">No operation has this key yet: it is step <bdi>pay</bdi> of workflow `+
		`<a href="/workflows/onb:F-1">onb:F-1</a>, waiting.</p>`)
	require.Contains(t, body, "It waits for step <bdi>create</bdi>")
	require.NotContains(t, body, "No operation of tenant")
	require.Contains(t, body, `<nav aria-label="Main">`, "signed in: the page keeps the navigation")

	for _, key := range []string{"onb:F-1/nope", "onb:F-2/pay"} {
		code, body = page(key)
		require.Equal(t, http.StatusNotFound, code)
		require.Contains(t, body, "No operation of tenant acme has the key "+key+".")
	}
	code, body = page("onb:F-1/create")
	require.Equal(t, http.StatusOK, code, "a recorded step is an operation")
	require.Contains(t, body, `<a href="/workflows/onb:F-1">onb:F-1</a>`)
}

// An operation recorded on its own under a key that looks like a step of
// a workflow ("onb:F-1/extra" beside workflow onb:F-1, which has no step
// extra) is not said to be one of its steps: its page names no workflow.
func TestOperationBesideWorkflowNamesNone(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	_, _, err := l.PutWorkflow(ctx, "onb:F-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
	}})
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "onb:F-1/extra", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err, "not a step of the workflow: the ledger records it on its own")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	page := s.get("/operations/" + url.PathEscape("onb:F-1/extra"))
	require.NotContains(t, page, "<dt>Workflow</dt>", "not a step of onb:F-1")
	require.Contains(t, s.get("/operations/"+url.PathEscape("onb:F-1/create")), "<dt>Workflow</dt>", "its step is")
}

package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestResumeDestinationNoLongerServed: a workflow stored while its steps'
// destinations served the tenant, whose next step's destination has
// since stopped serving it (serve's destinations file changed its
// tenants), still records that step when it is due: a workflow's steps
// are checked when it is put, and the executor refuses a step recorded
// later with a reason the workflow shows. Resuming it, and putting it
// again, answer 200 with the workflow, never 422 destination_not_served,
// which the OpenAPI document lists for a new workflow only.
func TestResumeDestinationNoLongerServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	serveWith := func(opts opledger.Options) (*opledger.Ledger, string) {
		l, err := opledger.Open(ctx, dsn, opts)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return l, srv.URL
	}
	before, beforeURL := serveWith(opledger.Options{DestinationTenants: map[string][]string{"email": {"acme", "beta"}}})
	acme, err := before.WithTenant("acme")
	require.NoError(t, err)
	token, _, err := acme.CreateToken(ctx, "t", opledger.ReadWrite)
	require.NoError(t, err)
	c := client.New(beforeURL, token, nil)
	spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "send", Destination: "email", Payload: json.RawMessage(`{}`)},
	}}
	_, created, err := c.PutWorkflow(ctx, "wf:1", spec)
	require.NoError(t, err)
	require.True(t, created)
	// email now serves beta only. Step a succeeds through the library,
	// which leaves the workflow to be resumed (the API's report, the
	// executor and serve's sweep resume it).
	after, afterURL := serveWith(opledger.Options{DestinationTenants: map[string][]string{"email": {"beta"}}})
	afterAcme, err := after.WithTenant("acme")
	require.NoError(t, err)
	stepA := opledger.WorkflowStepKey("wf:1", "a")
	cl, err := afterAcme.Claim(ctx, stepA, opledger.ClaimOptions{Worker: "w", Dispatch: true})
	require.NoError(t, err)
	_, err = afterAcme.Report(ctx, stepA, cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
	require.NoError(t, err)
	_, err = afterAcme.Get(ctx, opledger.WorkflowStepKey("wf:1", "b"))
	require.ErrorIs(t, err, opledger.ErrNotFound, "step b is due to be recorded")
	post := func(method, path, body string) (int, []byte) {
		req, err := http.NewRequest(method, afterURL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, data
	}
	specJSON, err := json.Marshal(spec)
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Description string `json:"description"`
			} `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(httpapi.OpenAPI, &doc))
	for _, rq := range []struct{ method, pattern, path, body string }{
		{"POST", "/v1/workflows/{key}/resume", "/v1/workflows/wf:1/resume", ""},
		{"PUT", "/v1/workflows/{key}", "/v1/workflows/wf:1", string(specJSON)},
	} {
		status, data := post(rq.method, rq.path, rq.body)
		require.Equal(t, http.StatusOK, status, "%s %s: %s", rq.method, rq.path, data)
		var wf opledger.Workflow
		require.NoError(t, json.Unmarshal(data, &wf))
		require.Equal(t, "b", wf.CurrentStep, rq.path)
		require.Equal(t, opledger.StepState(opledger.StatePending), wf.Steps[1].State, rq.path)
		description := doc.Paths[rq.pattern][strings.ToLower(rq.method)].Responses["200"].Description
		require.NotEmpty(t, description, "%s %s answers 200: the OpenAPI document lists it", rq.method, rq.pattern)
	}
	op, err := acme.Get(ctx, opledger.WorkflowStepKey("wf:1", "b"))
	require.NoError(t, err, "step b was recorded")
	require.Equal(t, "email", op.Destination)
	_, err = client.New(afterURL, token, nil).ResumeWorkflow(ctx, "wf:1")
	require.NoError(t, err)
}

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
// tenants), does not record that step: resuming it, and putting it
// again, answer 200 with the workflow held, its reason naming the
// destination, never 422 destination_not_served (which the OpenAPI
// document lists for a new workflow only); it is listed and counted as a
// stuck workflow (stuck=true, stuck_workflows of /v1/stats,
// opledger_workflows_stuck). Once the destination serves the tenant
// again, a resume records the step.
func TestResumeDestinationNoLongerServed(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			serveWith := func(served []string) (*opledger.Ledger, string) {
				l, err := opledger.Open(ctx, dsn, opledger.Options{DestinationTenants: map[string][]string{"email": served}})
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				require.NoError(t, err)
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				return l, srv.URL
			}
			before, beforeURL := serveWith([]string{"acme", "beta"})
			acme, err := before.WithTenant("acme")
			require.NoError(t, err)
			token, _, err := acme.CreateToken(ctx, "t", opledger.ReadWrite)
			require.NoError(t, err)
			spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "b", Action: "send", Destination: "email", Payload: json.RawMessage(`{}`)},
			}}
			_, created, err := client.New(beforeURL, token, nil).PutWorkflow(ctx, "wf:1", spec)
			require.NoError(t, err)
			require.True(t, created)
			// email now serves beta only. Step a succeeds through the
			// library, which leaves the workflow to be resumed (the API's
			// report, the executor and serve's sweep resume it).
			after, afterURL := serveWith([]string{"beta"})
			afterAcme, err := after.WithTenant("acme")
			require.NoError(t, err)
			stepA, stepB := opledger.WorkflowStepKey("wf:1", "a"), opledger.WorkflowStepKey("wf:1", "b")
			cl, err := afterAcme.Claim(ctx, stepA, opledger.ClaimOptions{Worker: "w", Dispatch: true})
			require.NoError(t, err)
			_, err = afterAcme.Report(ctx, stepA, cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
			require.NoError(t, err)
			send := func(url, method, path, body string) (int, []byte) {
				req, err := http.NewRequest(method, url+path, strings.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				data, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp.StatusCode, data
			}
			held := func(wf *opledger.Workflow, what string) {
				t.Helper()
				require.Equal(t, opledger.WorkflowHeld, wf.Status, "%s: %s", what, wf.Reason)
				require.Equal(t, "b", wf.CurrentStep, what)
				require.Contains(t, wf.Reason, `step b cannot be recorded: destination "email" does not serve tenant "acme"`, what)
				require.Equal(t, opledger.StepWaiting, wf.Steps[1].State, what)
				require.Nil(t, wf.Steps[1].Operation, what)
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
				status, data := send(afterURL, rq.method, rq.path, rq.body)
				require.Equal(t, http.StatusOK, status, "%s %s: %s", rq.method, rq.path, data)
				var wf opledger.Workflow
				require.NoError(t, json.Unmarshal(data, &wf))
				held(&wf, rq.method+" "+rq.path)
				description := doc.Paths[rq.pattern][strings.ToLower(rq.method)].Responses["200"].Description
				require.NotEmpty(t, description, "%s %s answers 200: the OpenAPI document lists it", rq.method, rq.pattern)
			}
			_, err = acme.Get(ctx, stepB)
			require.ErrorIs(t, err, opledger.ErrNotFound, "step b is not recorded")

			c := client.New(afterURL, token, nil)
			stuck, err := c.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Len(t, stuck, 1)
			held(stuck[0], "stuck=true")
			stats, err := c.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, stats.StuckWorkflows)
			status, metrics := send(afterURL, "GET", "/metrics", "")
			require.Equal(t, http.StatusOK, status)
			require.Contains(t, string(metrics), "\nopledger_workflows_stuck 1\n")

			// Served again: a resume records the step.
			_, againURL := serveWith([]string{"acme", "beta"})
			wf, err := client.New(againURL, token, nil).ResumeWorkflow(ctx, "wf:1")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowRunning, wf.Status, wf.Reason)
			op, err := acme.Get(ctx, stepB)
			require.NoError(t, err, "step b is recorded")
			require.Equal(t, opledger.StatePending, op.State)
			require.Equal(t, "email", op.Destination)
		})
	}
}

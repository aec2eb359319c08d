package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestStuckWorkflowFigures: a workflow whose next step cannot be recorded
// holds no operation, so only its own figure counts it: stuck_workflows
// of /v1/stats (the tenant's), opledger_workflows_stuck on /metrics
// (every tenant's); GET /v1/workflows?stuck=true lists it, and takes no
// other parameter but limit.
func TestStuckWorkflowFigures(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			// wf:1's first step answers without the url its second reads;
			// wf:2's first step has not run.
			putStuckWorkflow(t, b.ledger, "wf:1", true)
			putStuckWorkflow(t, b.ledger, "wf:2", false)

			stats, err := b.acme.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, stats.StuckWorkflows)
			other, err := b.other.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, other.StuckWorkflows, "another tenant's figure")
			require.Contains(t, b.scrape(t), "\nopledger_workflows_stuck 1\n")

			stuck, err := b.acme.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Len(t, stuck, 1)
			require.Equal(t, "wf:1", stuck[0].Key)
			require.Equal(t, opledger.WorkflowHeld, stuck[0].Status)
			none, err := b.other.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Empty(t, none)
			before, err := b.ledger.Now(ctx)
			require.NoError(t, err)
			status, body := b.raw(t, "GET", "/v1/workflows?stuck=true", b.otherToken, nil)
			require.Equal(t, http.StatusOK, status)
			after, err := b.ledger.Now(ctx)
			require.NoError(t, err)
			var page struct {
				Items      []json.RawMessage `json:"items"`
				NextCursor *string           `json:"next_cursor"`
				Now        time.Time         `json:"now"`
			}
			require.NoError(t, json.Unmarshal(body, &page), string(body))
			require.NotNil(t, page.Items, "[] rather than null: %s", body)
			require.Empty(t, page.Items)
			require.NotNil(t, page.NextCursor)
			require.Empty(t, *page.NextCursor)
			// The ledger's clock as the list was read.
			require.False(t, page.Now.Before(before) || page.Now.After(after), "now %s is the ledger's clock, from %s to %s", page.Now, before, after)
			for _, q := range []string{"stuck=true&open=true", "stuck=true&prefix=wf:", "stuck=true&cursor=x", "stuck=yes", "stuck=true&limit=201"} {
				status, body = b.raw(t, "GET", "/v1/workflows?"+q, b.token, nil)
				require.Equal(t, http.StatusBadRequest, status, q)
				require.Equal(t, "invalid_input", problemKind(t, body), q)
			}

			_, _, err = b.ledger.ReviseWorkflowStep(ctx, "wf:1", "b", opledger.Revision{Payload: json.RawMessage(`{"link":"x"}`), Version: 2})
			require.NoError(t, err)
			stats, err = b.acme.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, stats.StuckWorkflows, "revised, it can go on")
		})
	}
}

// putStuckWorkflow puts workflow key, whose step b reads a member (url)
// that step a's answer lacks; with aSucceeds, step a is claimed and
// succeeds without it, and the workflow is stuck.
func putStuckWorkflow(t *testing.T, l *opledger.Ledger, key string, aSucceeds bool) {
	t.Helper()
	ctx := context.Background()
	_, _, err := l.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
	}})
	require.NoError(t, err)
	if !aSucceeds {
		return
	}
	c, err := l.Claim(ctx, key+"/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, key+"/a", c.AttemptID, c.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1", Response: json.RawMessage(`{"id":1}`)})
	require.NoError(t, err)
}

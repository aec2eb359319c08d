package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestCancelWorkflowRoute: POST /v1/workflows/{key}/cancel gives up on a
// stuck workflow: the reason is required (400 reason_required), a worker
// token may not decide (403), a workflow changed since it was seen is
// refused (409 stale_decision), and one whose current step's operation has
// not finished too (409 invalid_state), until it fails; once cancelled it
// answers cancelled with who decided, leaves stuck_workflows of /v1/stats,
// and the same decision again is marked replayed.
func TestCancelWorkflowRoute(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			putStuckWorkflow(t, b.ledger, "wf:1", true)
			stats, err := b.acme.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, stats.StuckWorkflows)
			seen, err := b.acme.GetWorkflow(ctx, "wf:1")
			require.NoError(t, err)

			worker, _, err := b.ledger.CreateToken(ctx, "n8n", opledger.Worker)
			require.NoError(t, err)
			status, body := b.raw(t, "POST", "/v1/workflows/wf:1/cancel", worker, []byte(`{"reason":"gone"}`))
			require.Equal(t, http.StatusForbidden, status, string(body))
			status, body = b.raw(t, "POST", "/v1/workflows/wf:1/cancel", b.token, []byte(`{"operator":"ana"}`))
			require.Equal(t, http.StatusBadRequest, status, string(body))
			require.Equal(t, "reason_required", problemKind(t, body))
			status, body = b.raw(t, "POST", "/v1/workflows/wf:1/cancel", b.token,
				[]byte(`{"reason":"gone","seen_updated_at":"2001-01-01T00:00:00Z"}`))
			require.Equal(t, http.StatusConflict, status, string(body))
			require.Equal(t, "stale_decision", problemKind(t, body))
			status, body = b.raw(t, "POST", "/v1/workflows/wf:1/cancel", b.token, []byte(`{"reason":"gone","extra":1}`))
			require.Equal(t, http.StatusBadRequest, status, string(body))
			status, body = b.raw(t, "POST", "/v1/workflows/wf:none/cancel", b.token, []byte(`{"reason":"gone"}`))
			require.Equal(t, http.StatusNotFound, status, string(body))

			d := opledger.WorkflowCancel{Operator: "ana", Reason: "customer left", SeenUpdatedAt: seen.UpdatedAt}
			w, replayed, err := b.acme.CancelWorkflow(ctx, "wf:1", d)
			require.NoError(t, err)
			require.False(t, replayed)
			require.Equal(t, opledger.WorkflowCancelled, w.Status)
			require.NotNil(t, w.Cancelled)
			require.Equal(t, "b", w.Cancelled.Step)
			require.Contains(t, w.Cancelled.Operator, "ana")
			require.Equal(t, "customer left", w.Cancelled.Reason)
			require.Equal(t, opledger.StepCancelled, w.Steps[1].State, "never recorded: it never runs")
			status, body = b.raw(t, "GET", "/v1/workflows/wf:1", b.token, nil)
			require.Equal(t, http.StatusOK, status, string(body))
			require.Contains(t, string(body), `"name":"b","key":"wf:1/b","state":"cancelled"`)
			stats, err = b.acme.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, stats.StuckWorkflows)

			_, replayed, err = b.acme.CancelWorkflow(ctx, "wf:1", d)
			require.NoError(t, err)
			require.True(t, replayed)
			status, hdr, body := b.rawHeaders(t, "POST", "/v1/workflows/wf:1/cancel", b.token, []byte(`{"operator":"ana","reason":"other"}`), nil)
			require.Equal(t, http.StatusConflict, status, string(body))
			require.Equal(t, "invalid_state", problemKind(t, body))
			require.Empty(t, hdr.Get(httpapi.HeaderReplayed))

			// A workflow whose current step is recorded: cancel the step.
			_, _, err = b.ledger.PutWorkflow(ctx, "wf:2", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}})
			require.NoError(t, err)
			status, body = b.raw(t, "POST", "/v1/workflows/wf:2/cancel", b.token, []byte(`{"reason":"gone"}`))
			require.Equal(t, http.StatusConflict, status, string(body))
			require.Equal(t, "invalid_state", problemKind(t, body))
			require.Contains(t, string(body), "its step a is pending, not finished; cancel or settle its operation wf:2/a first")

			// Once that step failed, the workflow can be given up on.
			_, _, err = b.acme.Resolve(ctx, "wf:2/a", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "wrong customer"})
			require.NoError(t, err)
			failed, err := b.acme.GetWorkflow(ctx, "wf:2")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowFailed, failed.Status)
			w, replayed, err = b.acme.CancelWorkflow(ctx, "wf:2", opledger.WorkflowCancel{Operator: "ana", Reason: "customer left",
				SeenUpdatedAt: failed.UpdatedAt})
			require.NoError(t, err)
			require.False(t, replayed)
			require.Equal(t, opledger.WorkflowCancelled, w.Status)
			require.Equal(t, "a", w.Cancelled.Step)
			require.Equal(t, opledger.StepState(opledger.StateFailed), w.Steps[0].State)
			// The failed step's timeline says who gave up on its workflow, when and why.
			detail, err := b.acme.Get(ctx, "wf:2/a")
			require.NoError(t, err)
			last := detail.Timeline[len(detail.Timeline)-1]
			require.Equal(t, "workflow cancelled", last.Event)
			require.Equal(t, w.Cancelled.Operator, last.Actor)
			require.Equal(t, "workflow wf:2 cancelled at this step: customer left", last.Evidence)
			require.True(t, w.Cancelled.At.Equal(last.At))
			// It is not attempted again.
			status, body = b.raw(t, "POST", "/v1/operations/"+url.PathEscape("wf:2/a")+"/resolve", b.token,
				[]byte(`{"decision":"authorize_retry","reason":"try again"}`))
			require.Equal(t, http.StatusConflict, status, string(body))
			require.Equal(t, "invalid_state", problemKind(t, body))
			require.Contains(t, string(body), "its workflow was cancelled at this step by ")
		})
	}
}

package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWorkerToken: on both stores, a worker token does what an
// automation does (records, claims, reports, reconciles, puts a
// workflow, posts an event) but every operator's decision it sends,
// resolve and approve of an operation or of a workflow step and a
// workflow's cancel, is refused with 403 forbidden before its body is
// read, with a detail that names it, records nothing, and the
// client's error matches ErrForbidden; a read-write token of the same
// tenant then takes those decisions.
func TestWorkerToken(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			secret, info, err := b.ledger.CreateToken(ctx, "n8n", opledger.Worker)
			require.NoError(t, err)
			require.Equal(t, opledger.Worker, info.Access)
			worker := client.New(b.url, secret, nil)

			// The work: a whole protected operation, an uncertain one,
			// a lookup's finding, a workflow, an event.
			// run claims key with its intent, dispatched, and reports r.
			run := func(key string, units int, r client.Report) opledger.State {
				t.Helper()
				in := intent(units)
				c, err := worker.Claim(ctx, key, client.ClaimRequest{Worker: "w1", Intent: &in, Dispatch: true})
				require.NoError(t, err)
				r.FencingToken = c.FencingToken
				res, err := worker.Report(ctx, key, c.AttemptID, r)
				require.NoError(t, err)
				return res.State
			}
			require.Equal(t, opledger.StateSucceeded, run("order:1", 1, client.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "crm-1"}))
			lost := client.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"}
			require.Equal(t, opledger.StateUncertain, run("order:2", 2, lost))
			require.Equal(t, opledger.StateUncertain, run("order:3", 3, lost))
			op, _, err := worker.Reconcile(ctx, "order:3", client.Finding{Found: true, Matches: true, DestinationRef: "crm-3", Authoritative: true})
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State, "a lookup's finding is the work of automation")
			needsApproval := intent(4)
			needsApproval.RequiresApproval = true
			waiting, _, err := worker.Record(ctx, "order:4", needsApproval)
			require.NoError(t, err)
			require.Equal(t, opledger.StateAwaitingApproval, waiting.State)
			wf, _, err := worker.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{RequiresApproval: true, Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
			require.NoError(t, err)
			step := wf.Step("a")
			_, err = worker.ReceiveEvent(ctx, opledger.Event{Source: "forms", EventID: "e1", Type: "signup", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)

			// The decisions: refused, whatever their body, on every
			// route of one.
			var decisionRoutes int
			for _, pattern := range httpapi.Routes() {
				method, path, _ := strings.Cut(pattern, " ")
				if !strings.HasSuffix(path, "/resolve") && !strings.HasSuffix(path, "/approve") && !strings.HasSuffix(path, "/cancel") {
					continue
				}
				decisionRoutes++
				path = strings.NewReplacer("{key}", "order:2", "{step}", "a").Replace(path)
				path = strings.Replace(path, "/v1/workflows/order:2/", "/v1/workflows/wf:1/", 1)
				for _, body := range []string{`{}`, `not json`} {
					status, data := b.raw(t, method, path, secret, []byte(body))
					require.Equal(t, http.StatusForbidden, status, "%s %s with a worker token: %s", method, path, data)
					require.Equal(t, "forbidden", problemKind(t, data))
					require.Contains(t, string(data), "is a worker token: it may not take an operator's decision (resolve, approve) nor cancel a workflow; a read-write token may")
				}
			}
			require.Equal(t, 4, decisionRoutes, "resolve, approve, a workflow step's approve, a workflow's cancel")
			_, _, err = worker.Resolve(ctx, "order:2", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "crm-2", Reason: "found it"})
			require.ErrorIs(t, err, opledger.ErrForbidden)
			_, _, err = worker.Approve(ctx, "order:4", opledger.Approval{Version: 1, Fingerprint: waiting.Fingerprint, Approver: "bot"})
			require.ErrorIs(t, err, opledger.ErrForbidden)
			_, _, err = worker.ApproveWorkflowStep(ctx, "wf:1", "a", opledger.Approval{Version: 1, Fingerprint: step.Fingerprint, Approver: "bot"})
			require.ErrorIs(t, err, opledger.ErrForbidden)
			_, _, err = worker.CancelWorkflow(ctx, "wf:1", opledger.WorkflowCancel{Reason: "not needed"})
			require.ErrorIs(t, err, opledger.ErrForbidden)
			wf, err = b.acme.GetWorkflow(ctx, "wf:1")
			require.NoError(t, err)
			require.Nil(t, wf.Cancelled, "nothing recorded")
			for key, want := range map[string]opledger.State{"order:2": opledger.StateUncertain, "order:4": opledger.StateAwaitingApproval,
				"wf:1/a": opledger.StateAwaitingApproval} {
				d, err := b.acme.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, want, d.State, "%s: nothing recorded", key)
			}

			// An operator's token takes them.
			op, _, err = b.acme.Resolve(ctx, "order:2", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "crm-2", Reason: "found it", Operator: "ana"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			op, _, err = b.acme.Approve(ctx, "order:4", opledger.Approval{Version: 1, Fingerprint: waiting.Fingerprint, Approver: "ana"})
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)
		})
	}
}

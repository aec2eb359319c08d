package httpapi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/testdb"
)

// A step's success reported through the API moves its workflow on before
// the answer, as the executor's and the reconciler's do: by an outcome, a
// reconciler's finding or an operator's mark_succeeded, the next step is
// recorded at once, not at the next workflow sweep (which this test's
// server does not run).
func TestSuccessThroughTheAPIMovesTheWorkflowOn(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			steps := []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "b", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"a":"{steps.a.ref}"}`)},
				{Name: "c", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"b":"{steps.b.ref}"}`)},
				{Name: "d", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}
			_, _, err := b.acme.PutWorkflow(ctx, "wf:adv", opledger.WorkflowSpec{Steps: steps})
			require.NoError(t, err)
			next := func(step string) opledger.State {
				t.Helper()
				w, err := b.acme.GetWorkflow(ctx, "wf:adv")
				require.NoError(t, err)
				for _, s := range w.Steps {
					if s.Name == step {
						return opledger.State(s.State)
					}
				}
				t.Fatalf("no step %s", step)
				return ""
			}

			// An outcome.
			c, err := b.acme.Claim(ctx, "wf:adv/a", client.ClaimRequest{Dispatch: true})
			require.NoError(t, err)
			_, err = b.acme.Report(ctx, "wf:adv/a", c.AttemptID, client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1"})
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, next("b"), "recorded by the outcome's request")

			// A reconciler's finding.
			c, err = b.acme.Claim(ctx, "wf:adv/b", client.ClaimRequest{Dispatch: true})
			require.NoError(t, err)
			_, err = b.acme.Report(ctx, "wf:adv/b", c.AttemptID, client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			require.Equal(t, opledger.State(opledger.StepWaiting), next("c"))
			_, _, err = b.acme.Reconcile(ctx, "wf:adv/b", client.Finding{Found: true, Matches: true, DestinationRef: "B-1", Authoritative: true, AttemptCount: 1})
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, next("c"), "recorded by the finding's request")

			// An operator's decision.
			c, err = b.acme.Claim(ctx, "wf:adv/c", client.ClaimRequest{Dispatch: true})
			require.NoError(t, err)
			_, err = b.acme.Report(ctx, "wf:adv/c", c.AttemptID, client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			_, _, err = b.acme.Resolve(ctx, "wf:adv/c", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "C-1", Reason: "found C-1"})
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, next("d"), "recorded by the decision's request")
		})
	}
}

package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestListWorkflows: the tenant's workflows in key order, each with its
// status; a prefix and "open" filter them; pages follow one another
// without gaps or repeats; a cursor of other filters, a page too large
// and a prefix no key can start with are refused.
func TestListWorkflows(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			acme, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Tenant: "acme"})
			require.NoError(t, err)
			t.Cleanup(func() { acme.Close() })
			globex, err := acme.WithTenant("globex")
			require.NoError(t, err)
			spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}}
			for _, key := range []string{"pay:1", "onb:a3", "onb:a1", "onb:b", "onb:a2", "onb:a1x"} {
				_, _, err := acme.PutWorkflow(ctx, key, spec)
				require.NoError(t, err)
			}
			_, _, err = globex.PutWorkflow(ctx, "onb:a0", spec)
			require.NoError(t, err)
			// onb:a2 finishes.
			c, err := acme.Claim(ctx, "onb:a2/a", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = acme.Report(ctx, "onb:a2/a", c.AttemptID, c.FencingToken,
				opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-2"})
			require.NoError(t, err)

			keys := func(o opledger.WorkflowListOptions) (all []string, pages int) {
				t.Helper()
				for {
					page, err := acme.ListWorkflows(ctx, o)
					require.NoError(t, err)
					pages++
					for _, w := range page.Items {
						all = append(all, w.Key)
					}
					if page.NextCursor == "" {
						return all, pages
					}
					o.Cursor = page.NextCursor
				}
			}
			all, pages := keys(opledger.WorkflowListOptions{Limit: 2})
			require.Equal(t, []string{"onb:a1", "onb:a1x", "onb:a2", "onb:a3", "onb:b", "pay:1"}, all)
			require.Equal(t, 3, pages)
			got, _ := keys(opledger.WorkflowListOptions{Prefix: "onb:a"})
			require.Equal(t, []string{"onb:a1", "onb:a1x", "onb:a2", "onb:a3"}, got)
			got, _ = keys(opledger.WorkflowListOptions{Prefix: "onb:a1"})
			require.Equal(t, []string{"onb:a1", "onb:a1x"}, got, "a key equal to the prefix starts with it")
			got, _ = keys(opledger.WorkflowListOptions{Prefix: "onb:a", Open: true, Limit: 1})
			require.Equal(t, []string{"onb:a1", "onb:a1x", "onb:a3"}, got, "onb:a2 finished, not advanced yet")
			_, err = acme.AdvanceWorkflowOf(ctx, "onb:a2/a")
			require.NoError(t, err)
			got, _ = keys(opledger.WorkflowListOptions{Prefix: "onb:a", Open: true, Limit: 1})
			require.Equal(t, []string{"onb:a1", "onb:a1x", "onb:a3"}, got, "onb:a2 finished and advanced")

			page, err := acme.ListWorkflows(ctx, opledger.WorkflowListOptions{Prefix: "onb:a2"})
			require.NoError(t, err)
			require.Len(t, page.Items, 1)
			require.Equal(t, opledger.WorkflowSucceeded, page.Items[0].Status)
			require.Equal(t, opledger.StepState(opledger.StateSucceeded), page.Items[0].Steps[0].State)
			page, err = acme.ListWorkflows(ctx, opledger.WorkflowListOptions{Prefix: "onb:a3"})
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowRunning, page.Items[0].Status)
			require.Equal(t, "a", page.Items[0].CurrentStep)

			page, err = globex.ListWorkflows(ctx, opledger.WorkflowListOptions{})
			require.NoError(t, err)
			require.Len(t, page.Items, 1)
			require.Equal(t, "onb:a0", page.Items[0].Key, "another tenant's workflows are its own")

			// A list shows what GetWorkflow shows: sensitive fields masked.
			initech, err := acme.WithTenant("initech")
			require.NoError(t, err)
			_, _, err = initech.PutWorkflow(ctx, "sec:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"ana@example.invalid"}`),
					SensitiveFields: []string{"to"}},
				{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"pin":"981273"}`),
					SensitiveFields: []string{"pin"}},
			}})
			require.NoError(t, err)
			page, err = initech.ListWorkflows(ctx, opledger.WorkflowListOptions{})
			require.NoError(t, err)
			shown, err := json.Marshal(page)
			require.NoError(t, err)
			require.Contains(t, string(shown), `"key":"sec:1/a"`)
			require.NotContains(t, string(shown), "example.invalid")
			require.NotContains(t, string(shown), "981273")

			page, err = acme.ListWorkflows(ctx, opledger.WorkflowListOptions{Prefix: "onb:", Limit: 1})
			require.NoError(t, err)
			require.NotEmpty(t, page.NextCursor)
			// The refusal names the list's own filters: it has no order.
			const foreign = "cursor does not continue this list: it was issued for another prefix or open filter, or not by opledger (give the same prefix and open filter, or start without a cursor)"
			_, err = acme.ListWorkflows(ctx, opledger.WorkflowListOptions{Prefix: "onb:", Open: true, Cursor: page.NextCursor})
			require.ErrorIs(t, err, opledger.ErrInvalidInput, "a cursor continues only the list it came from")
			require.ErrorContains(t, err, foreign)
			require.NotContains(t, err.Error(), "order")
			_, err = acme.ListWorkflows(ctx, opledger.WorkflowListOptions{Cursor: "not-a-cursor"})
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			require.ErrorContains(t, err, foreign)
			_, err = acme.ListWorkflows(ctx, opledger.WorkflowListOptions{Limit: opledger.MaxWorkflowListLimit + 1})
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			_, err = acme.ListWorkflows(ctx, opledger.WorkflowListOptions{Prefix: "x@y"})
			require.ErrorIs(t, err, opledger.ErrInvalidKey)
			require.ErrorContains(t, err, "prefix")
		})
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWorkflowShowUnservedDestinationNext: workflows show of a workflow
// held because its next step's destination no longer serves the tenant
// advises what moves it on (serve the tenant from the destination, then
// resume; or cancel), not a revision, which would not; a workflow held
// because a step's content cannot be filled still advises a revision.
func TestWorkflowShowUnservedDestinationNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	open := func(served []string) *opledger.Ledger {
		t.Helper()
		l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme",
			DestinationTenants: map[string][]string{"email": served}})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l
	}
	before := open([]string{"acme"})
	_, _, err := before.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"to":"{steps.a.ref}"}`)},
	}})
	require.NoError(t, err)
	_, _, err = before.PutWorkflow(ctx, "wf:2", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"id":"{steps.a.response.id}"}`)},
	}})
	require.NoError(t, err)
	require.NoError(t, before.Close())

	after := open([]string{"beta"})
	for _, key := range []string{"wf:1", "wf:2"} {
		c, err := after.Claim(ctx, key+"/a", opledger.ClaimOptions{Worker: "w"})
		require.NoError(t, err)
		_, err = after.Report(ctx, key+"/a", c.AttemptID, c.FencingToken,
			opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1"})
		require.NoError(t, err)
	}

	show := func(key string) (*opledger.Workflow, string) {
		t.Helper()
		wf, err := after.GetWorkflow(ctx, key)
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowHeld, wf.Status, wf.Reason)
		var out bytes.Buffer
		require.NoError(t, writeWorkflow(&out, wf, " --tenant acme"))
		return wf, out.String()
	}
	wf, out := show("wf:1")
	require.Equal(t, opledger.WorkflowHoldDestinationNotServing, wf.HoldCause)
	require.Contains(t, out, "\nNext: configure destination email to serve tenant acme, then: opledger workflows resume wf:1 --tenant acme "+
		"(or give up: opledger workflows cancel wf:1 --reason TEXT --tenant acme)\n")
	require.NotContains(t, out, "workflows revise")

	wf, out = show("wf:2")
	require.Equal(t, opledger.WorkflowHoldUnfillable, wf.HoldCause)
	require.Contains(t, out, "\nNext: opledger workflows revise wf:2 b --version 2 --payload JSON --tenant acme, with content that can be filled")
}

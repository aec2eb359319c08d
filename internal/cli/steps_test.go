package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestOpsShowStepNotRecorded: ops show of a workflow step that is not
// recorded yet says so, which step it waits for and how to see the
// workflow, on the store and through a server, instead of suggesting
// another tenant; a key that names no step still names the tenant.
func TestOpsShowStepNotRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "steps.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	_, _, err = l.PutWorkflow(ctx, "onboarding:F-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "pay", Action: "pay.charge", Destination: "pay", Payload: json.RawMessage(`{"cents":100}`)},
	}})
	require.NoError(t, err)
	// stuck:1's step b is its current step, and cannot be recorded.
	_, _, err = l.PutWorkflow(ctx, "stuck:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
	}})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "stuck:1/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "stuck:1/a", c.AttemptID, c.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1", Response: json.RawMessage(`{"id":1}`)})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	// The command it names, with the flags that name the ledger.
	const waiting = "opledger: onboarding:F-1/pay is step pay of workflow onboarding:F-1, not recorded yet (it waits for step create): opledger workflows show onboarding:F-1"
	_, errOut, code := run(t, "ops", "show", "onboarding:F-1/pay", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 1, code, errOut)
	require.Equal(t, waiting+" --db "+dsn+" --tenant acme\n", errOut)
	_, errOut, code = run(t, "ops", "show", "stuck:1/b", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 1, code, errOut)
	require.True(t, strings.HasPrefix(errOut, "opledger: stuck:1/b is step b of workflow stuck:1, not recorded yet (step b cannot be recorded: "), errOut)
	require.True(t, strings.HasSuffix(errOut, "; revise the step): opledger workflows show stuck:1 --db "+dsn+" --tenant acme\n"), errOut)
	for _, key := range []string{"onboarding:F-1/nope", "nope:1/pay", "nope:1"} {
		_, errOut, code = run(t, "ops", "show", key, "--db", dsn, "--tenant", "acme")
		require.Equal(t, 1, code, errOut)
		require.Contains(t, errOut, `not found in tenant "acme" (if it is in another tenant, --tenant names that one)`, key)
	}
	// In another tenant the workflow is not there either: the tenant is
	// the mistake.
	_, errOut, code = run(t, "ops", "show", "onboarding:F-1/pay", "--db", dsn)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, `not found in tenant "default" (if it is in another tenant, --tenant names that one)`)

	out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	url, _ := startServe(t, dsn)
	_, errOut, code = run(t, "ops", "show", "onboarding:F-1/pay", "--server", url, "--token", strings.TrimSpace(out))
	require.Equal(t, 1, code, errOut)
	require.Equal(t, waiting+" --server "+url+"\n", errOut, "the server, never the token")
	_, errOut, code = run(t, "ops", "show", "onboarding:F-1/nope", "--server", url, "--token", strings.TrimSpace(out))
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "not_found (HTTP 404)")
}

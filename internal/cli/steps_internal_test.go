package cli

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// stepNotWorkflow names the workflow a step's key belongs to, for
// workflows show given a step's key; stepNotRecorded says a step is not
// recorded yet only while it is not.
func TestStepKeyMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, _, err = l.PutWorkflow(ctx, "onboarding:A-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "mail", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"task":"{steps.create.ref}"}`)},
	}})
	require.NoError(t, err)

	msg, ok := stepNotWorkflow(ctx, l.GetWorkflow, "onboarding:A-1/create", "")
	require.True(t, ok)
	require.Equal(t, "onboarding:A-1/create is not a workflow: it names step create of workflow onboarding:A-1: opledger workflows show onboarding:A-1; "+
		"the step's operation: opledger ops show onboarding:A-1/create", msg)
	msg, ok = stepNotWorkflow(ctx, l.GetWorkflow, "onboarding:A-1/mail", "")
	require.True(t, ok)
	require.Equal(t, "onboarding:A-1/mail is not a workflow: it names step mail of workflow onboarding:A-1: opledger workflows show onboarding:A-1", msg,
		"a waiting step has no operation to show")
	for _, key := range []string{"onboarding:A-1/nope", "onboarding:A-2/create", "onboarding:A-1", "a/b/c"} {
		_, ok := stepNotWorkflow(ctx, l.GetWorkflow, key, "")
		require.False(t, ok, key)
		_, ok = stepNotRecorded(ctx, l.GetWorkflow, key, "")
		require.False(t, ok, key)
	}

	_, ok = stepNotRecorded(ctx, l.GetWorkflow, "onboarding:A-1/create", "")
	require.False(t, ok, "a recorded step")
	msg, ok = stepNotRecorded(ctx, l.GetWorkflow, "onboarding:A-1/mail", "")
	require.True(t, ok)
	require.Equal(t, "onboarding:A-1/mail is step mail of workflow onboarding:A-1, not recorded yet (it waits for step create): opledger workflows show onboarding:A-1", msg)
	require.ErrorIs(t, keyNotFound(msg), opledger.ErrNotFound)
}

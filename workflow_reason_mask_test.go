package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestWorkflowReasonMasksFieldsAddedLater: a workflow's reason quotes
// its current step's timeline (why it is held, an operator's reason for
// cancelling it); text stored before a repeat of the workflow marked a
// field sensitive is masked there as the step's own timeline is.
func TestWorkflowReasonMasksFieldsAddedLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openSQLiteLedger(t)
	const secret = "ana.maria@example.invalid"
	spec := func(sensitive ...string) opledger.WorkflowSpec {
		return opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{{Name: "a", Action: "mail.send", Destination: "mail",
			Payload: json.RawMessage(`{"to":"` + secret + `"}`), SensitiveFields: sensitive}}}
	}
	for _, tc := range []struct {
		key    string
		decide func(step string)
		status opledger.WorkflowStatus
	}{
		{"wf:held", func(step string) {
			c, err := l.Claim(ctx, step, opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, step, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			_, err = l.Hold(ctx, step, "the provider bounced "+secret)
			require.NoError(t, err)
		}, opledger.WorkflowHeld},
		{"wf:cancelled", func(step string) {
			_, _, err := l.Resolve(ctx, step, opledger.Decision{Kind: opledger.DecisionCancel, Reason: "wrong address " + secret})
			require.NoError(t, err)
		}, opledger.WorkflowFailed},
	} {
		_, _, err := l.PutWorkflow(ctx, tc.key, spec())
		require.NoError(t, err)
		tc.decide(tc.key + "/a")
		w, err := l.GetWorkflow(ctx, tc.key)
		require.NoError(t, err)
		require.Equal(t, tc.status, w.Status, tc.key)
		require.Contains(t, w.Reason, secret, "%s: not sensitive yet", tc.key)

		_, _, err = l.PutWorkflow(ctx, tc.key, spec("to"))
		require.NoError(t, err)
		w, err = l.GetWorkflow(ctx, tc.key)
		require.NoError(t, err)
		require.NotContains(t, w.Reason, secret, tc.key)
		require.Contains(t, w.Reason, "***", tc.key)
	}
}

package console_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWorkflowMarksStepNothingReconciles: a workflow's page showed an
// uncertain step whose destination no reconciler of the server serves
// like any other, where the exception queue, the operations list and the
// step's own page mark it "no reconciler here: needs a person". Its step
// is marked the same way now; an uncertain step whose destination the
// server's reconciler serves is not. The workflow's reason no longer says
// "the reconciler is checking" of a step nothing may be checking.
func TestWorkflowMarksStepNothingReconciles(t *testing.T) {
	t.Parallel()
	l, token, srv, _ := storeConsoleOptions(t, testdb.SQLiteDSN(t), opledger.Options{}, console.Options{
		Reconciled: func(tenant, dest string) bool { return tenant == "acme" && dest == "crm" }})
	ctx := context.Background()
	for wf, dest := range map[string]string{"onb:served": "crm", "onb:unserved": "mailer"} {
		_, _, err := l.PutWorkflow(ctx, wf, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "first", Action: "create", Destination: dest, Payload: json.RawMessage(`{}`)},
			{Name: "second", Action: "create", Destination: dest, Payload: json.RawMessage(`{}`)},
		}})
		require.NoError(t, err)
		key := opledger.WorkflowStepKey(wf, "first")
		cl, err := l.Claim(ctx, key, opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = l.Dispatch(ctx, key, cl.AttemptID, cl.FencingToken)
		require.NoError(t, err)
		_, err = l.Report(ctx, key, cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout after 10 s"})
		require.NoError(t, err)
	}
	s := signIn(t, srv.URL, token)
	page := func(wf string) string { return s.get("/workflows/" + wf) }
	require.Contains(t, page("onb:unserved"), "step first is uncertain: whether it took effect is not known yet; a reconciler that serves mailer looks it up, or a person decides",
		"the workflow's reason claims no reconciler it cannot know of")
	const mark = `<span class="unreconciled">` + unreconciledMark + `</span>`
	require.Contains(t, page("onb:unserved"), `>uncertain</span> `+mark, "the uncertain step nothing here looks up is marked")
	require.NotContains(t, page("onb:served"), mark, "the step this server's reconciler looks up is not")
}

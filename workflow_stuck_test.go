package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestStuckWorkflows: a workflow whose next step cannot be recorded (it
// reads a response member the earlier step did not give) is listed, with
// the reason, and counted in Stats; one that can go on (its next step not
// recorded yet), and another tenant's stuck one, are not, but every
// tenant's figures count both stuck ones; once the step is revised it is
// no longer stuck.
func TestStuckWorkflows(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			acme, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
			require.NoError(t, err)
			t.Cleanup(func() { acme.Close() })
			globex, err := acme.WithTenant("globex")
			require.NoError(t, err)
			spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
			}}
			// wf:stuck's first step answers without the url b reads;
			// wf:fine's with it; globex has a stuck one of its own.
			for _, wf := range []struct {
				l        *opledger.Ledger
				key, res string
			}{{acme, "wf:stuck", `{"id":1}`}, {acme, "wf:fine", `{"url":"https://x.example/1"}`}, {globex, "wf:stuck", `{"id":1}`}} {
				_, _, err := wf.l.PutWorkflow(ctx, wf.key, spec)
				require.NoError(t, err)
				c, err := wf.l.Claim(ctx, wf.key+"/a", opledger.ClaimOptions{})
				require.NoError(t, err)
				_, err = wf.l.Report(ctx, wf.key+"/a", c.AttemptID, c.FencingToken,
					opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1", Response: json.RawMessage(wf.res)})
				require.NoError(t, err)
			}
			stuck, err := acme.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Len(t, stuck, 1)
			require.Equal(t, "wf:stuck", stuck[0].Key)
			require.Equal(t, opledger.WorkflowHeld, stuck[0].Status)
			require.Contains(t, stuck[0].Reason, "step b cannot be recorded")

			_, err = acme.StuckWorkflows(ctx, 0)
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			// Its bound is the workflow list's (each is read whole), as
			// the API's and the CLI's: not MaxListLimit.
			_, err = acme.StuckWorkflows(ctx, opledger.MaxWorkflowListLimit+1)
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			_, err = acme.StuckWorkflows(ctx, opledger.MaxWorkflowListLimit)
			require.NoError(t, err)
			counts := func() (acmes, globexes, all int) {
				t.Helper()
				for _, c := range []struct {
					l   *opledger.Ledger
					all bool
					n   *int
				}{{acme, false, &acmes}, {globex, false, &globexes}, {acme, true, &all}} {
					st, err := c.l.Stats(ctx, c.all)
					require.NoError(t, err)
					*c.n = st.StuckWorkflows
				}
				return acmes, globexes, all
			}
			acmes, globexes, all := counts()
			require.Equal(t, []int{1, 1, 2}, []int{acmes, globexes, all}, "acme's, globex's, every tenant's")

			_, _, err = acme.ReviseWorkflowStep(ctx, "wf:stuck", "b", opledger.Revision{Payload: json.RawMessage(`{"link":"https://x.example/fixed"}`), Version: 2})
			require.NoError(t, err)
			stuck, err = acme.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Empty(t, stuck, "revised, it can go on")
			acmes, globexes, all = counts()
			require.Equal(t, []int{0, 1, 1}, []int{acmes, globexes, all})
			stuck, err = globex.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Len(t, stuck, 1, "globex's own")
		})
	}
}

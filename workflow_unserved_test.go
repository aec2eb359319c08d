package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWorkflowStepDestinationNoLongerServed: a workflow stored while its
// steps' destinations served the tenant, whose next step's destination
// has since stopped serving it (DestinationTenants changed), does not
// record that step: the workflow is held, its reason naming the
// destination and the tenant, listed and counted as stuck, and skipped
// by the sweep, however it is advanced (a resume, the sweep, a repeated
// PutWorkflow). The step can still be revised. Once the destination
// serves the tenant again, a resume or the sweep records the step.
func TestWorkflowStepDestinationNoLongerServed(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			open := func(served []string) *opledger.Ledger {
				t.Helper()
				l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme",
					DestinationTenants: map[string][]string{"email": served}})
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				return l
			}
			spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"to":"{steps.a.ref}"}`)},
			}}
			before := open([]string{"acme", "beta"})
			for _, key := range []string{"wf:1", "wf:2"} {
				_, created, err := before.PutWorkflow(ctx, key, spec)
				require.NoError(t, err)
				require.True(t, created)
			}

			// email now serves beta only; step a of each succeeds.
			after := open([]string{"beta"})
			for _, key := range []string{"wf:1", "wf:2"} {
				c, err := after.Claim(ctx, key+"/a", opledger.ClaimOptions{Worker: "w"})
				require.NoError(t, err)
				_, err = after.Report(ctx, key+"/a", c.AttemptID, c.FencingToken,
					opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1"})
				require.NoError(t, err)
			}
			held := func(l *opledger.Ledger, w *opledger.Workflow) {
				t.Helper()
				require.Equal(t, opledger.WorkflowHeld, w.Status, w.Reason)
				require.Equal(t, "b", w.CurrentStep)
				require.Contains(t, w.Reason, "step b cannot be recorded")
				require.Contains(t, w.Reason, `destination "email" does not serve tenant "acme"`)
				require.Equal(t, opledger.StepWaiting, w.Step("b").State)
				require.Nil(t, w.Step("b").Operation)
				_, err := l.Get(ctx, w.Key+"/b")
				require.ErrorIs(t, err, opledger.ErrNotFound, "step b is not recorded")
			}

			_, err := after.ResumeWorkflow(ctx, "wf:1")
			var se *opledger.StepError
			require.True(t, errors.As(err, &se), "%v", err)
			require.Equal(t, "b", se.Step)
			require.ErrorIs(t, err, opledger.ErrDestinationNotServed)
			_, err = after.AdvanceWorkflowOf(ctx, "wf:1/a")
			require.True(t, errors.As(err, &se), "%v", err)
			n, err := after.AdvanceWorkflows(ctx)
			require.NoError(t, err, "a held workflow is no failure of the sweep")
			require.Zero(t, n)
			w, created, err := after.PutWorkflow(ctx, "wf:1", spec)
			require.NoError(t, err, "a repeat answers with the workflow")
			require.False(t, created)
			held(after, w)
			for _, key := range []string{"wf:1", "wf:2"} {
				w, err := after.GetWorkflow(ctx, key)
				require.NoError(t, err)
				held(after, w)
			}
			stuck, err := after.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Len(t, stuck, 2)
			require.Equal(t, "wf:1", stuck[0].Key)
			require.Equal(t, "wf:2", stuck[1].Key)
			stats, err := after.Stats(ctx, false)
			require.NoError(t, err)
			require.Equal(t, 2, stats.StuckWorkflows)

			// The waiting step may be revised; its destination still does
			// not serve the tenant, so the workflow stays held.
			w, _, err = after.ReviseWorkflowStep(ctx, "wf:2", "b", opledger.Revision{Payload: json.RawMessage(`{"to":"x"}`), Version: 2})
			require.NoError(t, err)
			held(after, w)

			// Served again: a resume records wf:1's step b, the sweep wf:2's.
			again := open([]string{"acme", "beta"})
			w, err = again.ResumeWorkflow(ctx, "wf:1")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowRunning, w.Status, w.Reason)
			require.Equal(t, opledger.StepState(opledger.StatePending), w.Step("b").State)
			n, err = again.AdvanceWorkflows(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			w, err = again.GetWorkflow(ctx, "wf:2")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowAwaitingApproval, w.Status, "its revision awaits approval: %s", w.Reason)
			stuck, err = again.StuckWorkflows(ctx, 10)
			require.NoError(t, err)
			require.Empty(t, stuck)
		})
	}
}

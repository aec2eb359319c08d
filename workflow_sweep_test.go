package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestAdvanceWorkflowsPastAFailure: a workflow that cannot be resumed (its
// row locked past the store's lock timeout) does not stop the sweep; the
// others move on, and the error counts the failure without the key.
func TestAdvanceWorkflowsPastAFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn+"&lock_timeout=200", opledger.Options{Worker: "w"})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
	}}
	keys := []string{"intake:alice-secret", "intake:bob", "intake:zed"}
	for _, k := range keys {
		_, _, err := l.PutWorkflow(ctx, k, spec)
		require.NoError(t, err)
		c, err := l.Claim(ctx, k+"/a", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = l.Report(ctx, k+"/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R"})
		require.NoError(t, err)
	}

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close(ctx) })
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM workflows WHERE key = 'intake:alice-secret' FOR UPDATE`)
	require.NoError(t, err)
	n, err := l.AdvanceWorkflows(ctx)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 2, n, "the workflows after the locked one moved on")
	require.ErrorContains(t, err, "advance workflows: 1 could not be resumed")
	require.ErrorContains(t, err, "lock timeout")
	require.NotContains(t, err.Error(), "alice", "the error is for a log: no key")
	for _, k := range keys[1:] {
		w, err := l.GetWorkflow(ctx, k)
		require.NoError(t, err)
		require.Equal(t, opledger.StepState(opledger.StatePending), w.Steps[1].State, k)
	}

	n, err = l.AdvanceWorkflows(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "tried again on the next run")
}

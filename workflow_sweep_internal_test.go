package opledger

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// forgottenWorkflowStore lists, first among the workflows ready to move
// on, one that is not stored: a workflow that retention forgot between
// AdvanceWorkflows' list and its resume.
type forgottenWorkflowStore struct {
	store.Store
	forgotten store.OperationID
}

type forgottenWorkflowReader struct {
	store.Reader
	forgotten store.OperationID
}

func (s forgottenWorkflowStore) View(ctx context.Context, fn func(context.Context, store.Reader) error) error {
	return s.Store.View(ctx, func(ctx context.Context, r store.Reader) error {
		return fn(ctx, forgottenWorkflowReader{Reader: r, forgotten: s.forgotten})
	})
}

func (r forgottenWorkflowReader) WorkflowsReady(ctx context.Context, tenant string, after store.OperationID, limit int) ([]store.OperationID, error) {
	ids, err := r.Reader.WorkflowsReady(ctx, tenant, after, limit)
	if err != nil || after != (store.OperationID{}) {
		return ids, err
	}
	return append([]store.OperationID{r.forgotten}, ids...), nil
}

// TestAdvanceWorkflowsPastAForgottenWorkflow: a workflow listed as ready
// and gone when the sweep resumes it (forgotten by retention meanwhile)
// is nothing to advance, not a failure: the sweep returns no error, which
// Maintain would log, and the other workflows move on.
func TestAdvanceWorkflowsPastAForgottenWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), Options{Worker: "w"})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	spec := WorkflowSpec{Steps: []WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
	}}
	_, _, err = l.PutWorkflow(ctx, "intake", spec)
	require.NoError(t, err)
	c, err := l.Claim(ctx, "intake/a", ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "intake/a", c.AttemptID, c.FencingToken, Report{Outcome: OutcomeSucceeded, DestinationRef: "R"})
	require.NoError(t, err)

	l.store = forgottenWorkflowStore{Store: l.store, forgotten: store.OperationID{Tenant: l.tenant, Key: "forgotten"}}
	n, err := l.AdvanceWorkflows(ctx)
	require.NoError(t, err, "a workflow forgotten since the list is no failure")
	require.Equal(t, 1, n, "the stored workflow moved on")
	w, err := l.GetWorkflow(ctx, "intake")
	require.NoError(t, err)
	require.Equal(t, StepState(StatePending), w.Steps[1].State)
}

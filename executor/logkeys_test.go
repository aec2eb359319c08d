package executor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
)

// answeringDest answers every call with the same reference.
type answeringDest struct{}

func (answeringDest) Name() string                           { return "crm" }
func (answeringDest) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (answeringDest) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{Ref: "R1", Response: json.RawMessage(`{"id":"R1"}`)}, nil
}

// TestWorkflowKeysStayOutOfLogs: when the next step of a workflow cannot
// be recorded (its payload reads a field the first step's answer lacks),
// the executor logs it, as the hold it is (not an error), without the
// workflow's key or the steps' keys (it used to log the ledger's error as
// it was, which names both).
func TestWorkflowKeysStayOutOfLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	set, err := destination.NewSet(answeringDest{})
	require.NoError(t, err)
	var logs bytes.Buffer
	ex, err := executor.New(l, executor.Config{Destinations: set, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	const workflow = "intake:I17-customer"
	_, _, err = l.PutWorkflow(ctx, workflow, opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"x":1}`)},
		{Name: "notify", Action: "mail.send", Destination: "crm", Payload: json.RawMessage(`{"u":"{steps.create.response.url}"}`)},
	}})
	require.NoError(t, err)
	op, err := ex.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Contains(t, logs.String(), `level=INFO msg="workflow cannot go on"`, "logged as what it is: a hold for a person, not a failure")
	require.NotContains(t, logs.String(), "level=ERROR")
	require.Contains(t, logs.String(), "<workflow> step notify", "naming the step, not the workflow")
	require.NotContains(t, logs.String(), workflow)
}

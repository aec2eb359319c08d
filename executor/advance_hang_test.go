package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestAdvanceBoundedOnHungStore: recording a workflow's next step after
// its step succeeded had no deadline of its own. On PostgreSQL, with the
// workflows table locked by another session (a LOCK TABLE; the DSN sets
// no lock_timeout), the worker waited for it for ever after the outcome
// was recorded: no worker to spare, and an executor that stopped only
// when Stop gave up on the store. It is now bounded by the lease, as the
// executor's other writes are, and logged at WARN ("advance workflow");
// the step returns, its success recorded, while the lock is still held,
// and the server's workflow sweep advances the workflow later.
func TestAdvanceBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, l, s, sink, ex := hungStoreExecutor(t, "advance workflow")
	_, _, err := l.PutWorkflow(ctx, "wf:W1", opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
		{Name: "one", Action: "send", Destination: "slow", Payload: json.RawMessage(`{"n":1}`)},
		{Name: "two", Action: "send", Destination: "slow", Payload: json.RawMessage(`{"n":2}`)},
	}})
	require.NoError(t, err)

	stepped := runOnceAside(ctx, ex)
	<-s.started
	_, unlock := testdb.HoldTableLock(t, dsn, "workflows")
	defer unlock()
	close(s.release) // the call succeeds; the workflow's next step waits for the table lock

	var res stepResult
	select {
	case res = <-stepped:
	case <-time.After(time.Minute):
		// A failure guard only: with the bound the step returns within
		// a lease of its report, without it never.
		t.Fatal("the step still waits for the workflows table")
	}
	require.NoError(t, res.err)
	require.Equal(t, "wf:W1/one", res.op.Key)
	require.Equal(t, opledger.StateSucceeded, res.op.State)
	rec := sink.Waited(t)
	require.Equal(t, slog.LevelWarn, rec.Level)
	require.ErrorIs(t, testrig.Attr(t, rec, "error").Any().(error), context.DeadlineExceeded)
	unlock()
}

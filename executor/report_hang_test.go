package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestReportBoundedOnHungStore: the write of an attempt's outcome had no
// deadline of its own. On PostgreSQL, with the operation's row locked by
// another session (a client's long transaction; the DSN sets no
// lock_timeout), or a connection that stopped answering, the worker
// waited for it for ever, holding the claim: no retry on another
// connection, and no worker to spare. Each try is now bounded by the
// lease (past it, another worker may claim the operation) and tried
// again, as any failed outcome write is: once the lock is gone, the
// outcome lands.
func TestReportBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, l, s, sink, ex := hungStoreExecutor(t, "recording the outcome failed; trying again")
	op, _, err := l.Record(ctx, opledger.Intent{Key: "hung:1", Action: "create", Destination: "slow", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	stepped := runOnceAside(ctx, ex)
	<-s.started
	unlock := testdb.HoldLock(t, dsn, op.Tenant, "hung:1")
	defer unlock()
	close(s.release) // the call returns; its report waits for the row lock

	// Without a bound of its own the write waits for the lock for ever,
	// and this line never comes (Waited fails after a minute).
	rec := sink.Waited(t)
	require.Equal(t, slog.LevelWarn, rec.Level)
	unlock()
	res := <-stepped
	require.NoError(t, res.err)
	require.Equal(t, opledger.StateSucceeded, res.op.State)
	require.Equal(t, "S1", res.op.DestinationRef)
}

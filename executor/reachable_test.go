package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestReachableOnlyWhenTheStoreAnswered: a worker's step that asked the
// store nothing (every destination at its limit of abandoned calls
// still running: nothing may be claimed) returned no error, and the
// worker took that for an answer of the store: during an outage it
// logged "store reachable again", though the store had not answered,
// and ended the outage's count. Only a step the store answered ends it
// now: the line comes at the worker's first claim the store answers.
func TestReachableOnlyWhenTheStoreAnswered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{SQLiteBusyTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	s := &stuck{started: make(chan struct{}, 1), release: make(chan struct{})}
	set, err := destination.NewSet(s)
	require.NoError(t, err)
	sink := testrig.NewRecordSink("")
	ex, err := executor.New(l, executor.Config{Destinations: set, Workers: 1, Lease: time.Second, CallTimeout: 500 * time.Millisecond,
		PollInterval: time.Second, SweepInterval: -1, Logger: slog.New(sink)})
	require.NoError(t, err)
	ex.SetMaxAbandoned(1)
	ended := make(chan struct{}, 1)
	ex.SetAbandonedEnded(func() { ended <- struct{}{} })
	var releaseCall sync.Once
	defer releaseCall.Do(func() { close(s.release) })
	pauses, next := gatePauses(ex)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "stuck:1", Action: "create", Destination: "stuck", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	var unlock, stop sync.Once
	release := testdb.HoldWrites(t, dsn)
	defer unlock.Do(release)
	require.NoError(t, ex.Start(ctx))
	defer stop.Do(func() { require.NoError(t, ex.Stop(ctx)) })
	<-pauses // the worker's claim failed: the outage began
	unlock.Do(release)

	// While the worker waits, the destination reaches its limit of
	// abandoned calls (RunOnce's claim, which the store answers, is not
	// the worker's).
	op, err := ex.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, opledger.StateInProgress, op.State)
	require.Equal(t, 1, ex.AbandonedCalls())
	next <- struct{}{}
	<-pauses // nothing may be claimed: the worker asked the store nothing
	for _, rec := range sink.Drain() {
		require.NotEqual(t, "store reachable again", rec.Message, "the store was not asked")
	}

	releaseCall.Do(func() { close(s.release) })
	<-ended
	require.Zero(t, ex.AbandonedCalls())
	next <- struct{}{}
	require.Equal(t, time.Second, <-pauses, "the store answered: the poll interval")
	stop.Do(func() { require.NoError(t, ex.Stop(ctx)) })
	reachable := 0
	for _, rec := range sink.Drain() {
		if rec.Message == "store reachable again" {
			reachable++
			n, ok := attrOf(rec, "failures")
			require.True(t, ok)
			require.EqualValues(t, 1, n.Int64())
		}
	}
	require.Equal(t, 1, reachable, "once, when the store answered the worker's claim")
}

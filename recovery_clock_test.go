package opledger_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestRecoveryTimeNotNegative: a decision whose clock reads earlier than
// the moment its operation became uncertain (the ledger's clock set back,
// a demo's clock run ahead and then a real one) records a recovery time
// of 0, not a negative one that would pull the mean below zero.
func TestRecoveryTimeNotNegative(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var offset atomic.Int64
			offset.Store(int64(time.Hour))
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{
				Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			_, _, err = l.Record(ctx, opledger.Intent{Key: "k1", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			c, err := l.Claim(ctx, "k1", opledger.ClaimOptions{Worker: "w"})
			require.NoError(t, err)
			_, err = l.Dispatch(ctx, "k1", c.AttemptID, c.FencingToken)
			require.NoError(t, err)
			op, err := l.Report(ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateUncertain, op.State)

			offset.Store(0) // an hour back
			_, _, err = l.Resolve(ctx, "k1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "R1",
				Reason: "found it", Operator: "ana"})
			require.NoError(t, err)
			stats, err := l.Stats(ctx, false)
			require.NoError(t, err)
			require.Equal(t, 1, stats.Recoveries)
			require.Zero(t, stats.RecoveryMeanSeconds)
			require.Zero(t, stats.RecoveryP90Seconds)
			timeline, err := l.Timeline(ctx, "k1")
			require.NoError(t, err)
			last := timeline[len(timeline)-1]
			require.Contains(t, last.Evidence, "recovery time 0s")
		})
	}
}

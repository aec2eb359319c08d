package opledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestRetryableReportWithRefIsUncertain: a worker that reports retryable
// with the destination_ref the destination named (POST …/outcome, or
// Report called directly) said the destination made a record, yet the
// operation became pending and was sent again, while ReportOf, which the
// executor and Do use, records the same answer uncertain. Now Report
// records it uncertain too, and the same report sent again (its answer
// lost) is recognised as the one recorded.
func TestRetryableReportWithRefIsUncertain(t *testing.T) {
	t.Parallel()
	eachStore(t, opledger.Options{}, func(t *testing.T, l *opledger.Ledger) {
		ctx := context.Background()
		in := opledger.Intent{Key: "intake:I17:create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":2}`)}
		c, err := l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
		require.NoError(t, err)
		report := opledger.Report{Outcome: opledger.OutcomeRetryable, DestinationRef: "R1", Error: "503 Service Unavailable", RetryAfter: time.Second}
		op, err := l.Report(ctx, in.Key, c.AttemptID, c.FencingToken, report)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "the destination named record R1: not sent again unchecked")
		require.Equal(t, opledger.ReportOf(opledger.Result{Ref: "R1"}, opledger.Retryable(nil, 0)).Outcome, opledger.OutcomeUncertain,
			"as ReportOf records it")
		attempts, err := l.Attempts(ctx, in.Key)
		require.NoError(t, err)
		require.Equal(t, string(opledger.OutcomeUncertain), attempts[0].Outcome)
		require.Equal(t, "R1", attempts[0].DestinationRef)
		require.Contains(t, attempts[0].Error, "not retried on its own: the destination reported a reference with a retryable error")

		tl, err := l.Timeline(ctx, in.Key)
		require.NoError(t, err)
		again, err := l.Report(ctx, in.Key, c.AttemptID, c.FencingToken, report)
		require.NoError(t, err, "the same report sent again is the one recorded")
		require.Equal(t, opledger.StateUncertain, again.State)
		tl2, err := l.Timeline(ctx, in.Key)
		require.NoError(t, err)
		require.Len(t, tl2, len(tl), "recorded once")

		_, err = l.Claim(ctx, in.Key, opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidState, "nothing is sent before reconciliation")

		// Without an error text, the note says what was reported.
		in.Key = "intake:I18:create"
		c, err = l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
		require.NoError(t, err)
		op, err = l.Report(ctx, in.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, DestinationRef: "R2"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
		require.True(t, strings.HasPrefix(op.LastError, "retryable; not retried on its own"), op.LastError)
	})
}

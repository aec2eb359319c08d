package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

func testDo(t *testing.T, h Harness) {
	t.Run("SucceedsOnceThenReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		calls := 0
		act := func(ctx context.Context, c opledger.Call) (opledger.Result, error) {
			calls++
			require.Equal(t, opledger.DestinationIdempotencyKey("default", "k1", 1), c.IdempotencyKey)
			return opledger.Result{Ref: "H42", Response: json.RawMessage(`{"id":"H42"}`)}, nil
		}
		op, err := b.ledger.Do(b.ctx, intent("k1"), act)
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
		again, err := b.ledger.Do(b.ctx, intent("k1"), act)
		require.NoError(t, err)
		require.Equal(t, 1, calls, "the repeat replays, it does not act")
		require.Equal(t, "H42", again.DestinationRef)
		require.JSONEq(t, `{"id":"H42"}`, string(again.Response))

		other := intent("k1")
		other.Payload = json.RawMessage(`{"units":3}`)
		_, err = b.ledger.Do(b.ctx, other, act)
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		require.Equal(t, 1, calls)
	})

	cases := []struct {
		name  string
		err   error
		state opledger.State
	}{
		{"Rejected", opledger.Rejected(errors.New("422 invalid email field")), opledger.StateFailed},
		{"Retryable", opledger.Retryable(errors.New("429"), 2*time.Second), opledger.StatePending},
		{"Uncertain", opledger.Uncertain(errors.New("read timeout")), opledger.StateUncertain},
		{"Unclassified", errors.New("something odd"), opledger.StateUncertain},
		{"DialRefused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, opledger.StatePending},
		{"DeadlineExceeded", context.DeadlineExceeded, opledger.StateUncertain},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			op, err := b.ledger.Do(b.ctx, intent("k1"), func(context.Context, opledger.Call) (opledger.Result, error) {
				return opledger.Result{}, tc.err
			})
			var ae *opledger.AttemptError
			require.True(t, errors.As(err, &ae), "%v", err)
			require.Equal(t, tc.state, ae.State)
			require.Equal(t, tc.state, op.State)
			require.ErrorIs(t, err, tc.err)
			if tc.name == "Retryable" {
				require.False(t, op.NotBefore.Before(op.UpdatedAt.Add(2*time.Second)), "Retry-After honoured")
			}
		})
	}

	t.Run("NoRefIsUncertain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op, err := b.ledger.Do(b.ctx, intent("k1"), func(context.Context, opledger.Call) (opledger.Result, error) {
			return opledger.Result{}, nil
		})
		require.Error(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
	})

	t.Run("ReportsAfterCallerGaveUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ctx, cancel := context.WithCancel(b.ctx)
		op, err := b.ledger.Do(ctx, intent("k1"), func(ctx context.Context, _ opledger.Call) (opledger.Result, error) {
			cancel()
			return opledger.Result{}, ctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, opledger.StateUncertain, op.State, "recorded despite the cancelled context")
		b.requireState(t, "k1", opledger.StateUncertain)
	})
}

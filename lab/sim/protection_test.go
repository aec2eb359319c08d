package sim_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/lab"
	"github.com/opledger/opledger/reconciler"
)

// Found by the simulation, minimal: the reconciler releases an uncertain
// payment for a protected retry inside the key's retention, nobody claims
// it until the retention has passed. The claim must not be made (it
// would be an unprotected resend that charges a second time): the
// operation is held for a person instead.
func TestProtectedRetryPastRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "l.db"), opledger.Options{
		Clock: func(time.Time) time.Time { return clock() }})
	require.NoError(t, err)
	defer l.Close()
	pay := lab.NewPayment(lab.PaymentOptions{Now: clock, Retention: 10 * time.Minute})
	set, err := destination.NewSet(pay)
	require.NoError(t, err)
	rec, err := reconciler.New(l, reconciler.Config{Destinations: set, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	const key = "charge:1"
	_, _, err = l.Record(ctx, opledger.Intent{Key: key, Action: "charge", Destination: "payment", Payload: json.RawMessage(`{"amount":5}`)})
	require.NoError(t, err)
	require.NoError(t, pay.Inject(lab.FaultLostResponse))
	c, err := l.Claim(ctx, key, opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, key, c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	_, callErr := pay.Call(ctx, opledger.Call{Operation: c.Operation, AttemptID: c.AttemptID, IdempotencyKey: c.IdempotencyKey})
	require.Error(t, callErr)
	_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "lost"})
	require.NoError(t, err)
	_, err = rec.RunOnce(ctx) // protected retry: pending
	require.NoError(t, err)
	op, err := l.Get(ctx, key)
	require.NoError(t, err)
	require.True(t, op.Protected)
	require.NotNil(t, op.ProtectedUntil)

	mu.Lock()
	now = now.Add(11 * time.Minute) // the workers were busy
	mu.Unlock()
	_, err = l.Claim(ctx, key, opledger.ClaimOptions{})
	var se *opledger.StateError
	require.ErrorAs(t, err, &se, "a claim past the retention must be refused")
	require.Equal(t, opledger.StateHeld, se.State)
	require.Equal(t, 1, pay.EffectsFor(key), "the payment charged once")
}

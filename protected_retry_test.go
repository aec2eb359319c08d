package opledger_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A protected retry that gets a retryable answer (429, 503) has still not
// established what the uncertain attempt before it did. Found by the lab
// simulation (lab/sim, seed 25 with -ops 12): the operation used to become
// an ordinary pending retry, unprotected, and once the destination's key
// retention had passed the resend charged a second time. It must go back
// to uncertain, due for reconciliation after the backoff, so that the
// reconciler decides again: another protected retry inside the retention,
// held after it.
func TestRetryableProtectedRetryStaysUncertain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{
		Clock: func(time.Time) time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })

	const key = "charge:1"
	in := opledger.Intent{Key: key, Action: "payment.charge", Destination: "payment", Payload: json.RawMessage(`{"amount":5}`)}
	_, _, err = l.Record(ctx, in)
	require.NoError(t, err)
	attempt := func(r opledger.Report) (*opledger.Claim, *opledger.Operation) {
		t.Helper()
		c, err := l.Claim(ctx, key, opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = l.Dispatch(ctx, key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		op, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, r)
		require.NoError(t, err)
		return c, op
	}
	retention := opledger.Finding{ProtectionRetention: 10 * time.Minute, Evidence: "idempotency key kept 10m"}

	// The first attempt's answer is lost: the charge may have been made.
	_, op := attempt(opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "no answer"})
	require.Equal(t, opledger.StateUncertain, op.State)
	op, err = l.Reconcile(ctx, key, retention)
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	require.True(t, op.Protected)

	// The protected retry is answered 429: nothing was done by it, but
	// the first attempt is still unexplained.
	advance(9 * time.Minute)
	c, op := attempt(opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "429", RetryAfter: 2 * time.Minute})
	require.True(t, c.Protected)
	require.Equal(t, opledger.StateUncertain, op.State, "a retryable answer to a protected retry settles nothing")
	require.NotNil(t, op.NotBefore)
	require.Equal(t, 2*time.Minute, op.NotBefore.Sub(op.UpdatedAt))

	// Not due for reconciliation before the Retry-After.
	queue, err := l.ReconcileQueue(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, queue)

	// By then the key's retention has passed: the reconciler holds it
	// instead of letting an unprotected resend charge twice.
	advance(2 * time.Minute)
	queue, err = l.ReconcileQueue(ctx, 10)
	require.NoError(t, err)
	require.Len(t, queue, 1)
	op, err = l.Reconcile(ctx, key, retention)
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State)
}

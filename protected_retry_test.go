package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
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
	clock := newManualClock()
	advance := clock.Advance
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{Clock: clock.Map})
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
	op, _, err = l.Reconcile(ctx, key, retention)
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
	queue, err := l.ReconcileQueue(ctx, opledger.ReconcileQueueOptions{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, queue)

	// By then the key's retention has passed: the reconciler holds it
	// instead of letting an unprotected resend charge twice.
	advance(2 * time.Minute)
	queue, err = l.ReconcileQueue(ctx, opledger.ReconcileQueueOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, queue, 1)
	op, _, err = l.Reconcile(ctx, key, retention)
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State)
}

// A protected retry released inside the key's retention must not be made
// after it, however late the claim or the dispatch mark comes (found by
// lab/sim): the operation is held instead and nothing is sent. On both
// stores, through Claim, ClaimNext and Dispatch.
func TestProtectedRetryWindowIsEnforced(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			advance := clock.Advance
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			retention := opledger.Finding{ProtectionRetention: 10 * time.Minute, Evidence: "idempotency key kept 10m"}
			// protectedRetry leaves key pending for a protected retry whose
			// window closes 10 minutes after its first dispatch.
			protectedRetry := func(key string) time.Time {
				t.Helper()
				_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "payment.charge", Destination: "payment", Payload: json.RawMessage(`{"amount":5}`)})
				require.NoError(t, err)
				c, err := l.Claim(ctx, key, opledger.ClaimOptions{})
				require.NoError(t, err)
				op, err := l.Dispatch(ctx, key, c.AttemptID, c.FencingToken)
				require.NoError(t, err)
				require.NotNil(t, op.FirstDispatchedAt, "dispatched")
				_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "no answer"})
				require.NoError(t, err)
				op, _, err = l.Reconcile(ctx, key, retention)
				require.NoError(t, err)
				require.Equal(t, opledger.StatePending, op.State)
				require.True(t, op.Protected)
				require.NotNil(t, op.ProtectedUntil)
				require.Equal(t, op.FirstDispatchedAt.Add(10*time.Minute), *op.ProtectedUntil)
				return *op.ProtectedUntil
			}
			requireHeld := func(key string, err error, step string) {
				t.Helper()
				var se *opledger.StateError
				require.ErrorAs(t, err, &se)
				require.Equal(t, opledger.StateHeld, se.State)
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, opledger.StateHeld, op.State)
				require.False(t, op.Protected)
				require.Nil(t, op.ProtectedUntil)
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				last := tl[len(tl)-1]
				require.Equal(t, "protection expired", last.Event)
				require.Contains(t, last.Evidence, "before the protected retry was "+step)
			}

			// Inside the window the claim is protected and carries the deadline.
			until := protectedRetry("inside")
			c, err := l.Claim(ctx, "inside", opledger.ClaimOptions{Lease: 20 * time.Minute})
			require.NoError(t, err)
			require.True(t, c.Protected)
			require.Equal(t, until, c.ProtectedUntil)
			// The dispatch mark comes after the window: refused, held, the
			// attempt abandoned.
			advance(11 * time.Minute)
			_, err = l.Dispatch(ctx, "inside", c.AttemptID, c.FencingToken)
			requireHeld("inside", err, "dispatched")
			attempts, err := l.Attempts(ctx, "inside")
			require.NoError(t, err)
			require.Equal(t, opledger.AttemptAbandoned, attempts[len(attempts)-1].Outcome)
			require.Nil(t, attempts[len(attempts)-1].DispatchedAt)

			// The claim itself comes after the window.
			protectedRetry("late-claim")
			advance(11 * time.Minute)
			_, err = l.Claim(ctx, "late-claim", opledger.ClaimOptions{})
			requireHeld("late-claim", err, "claimed")

			// ClaimNext holds an expired one it finds, keeps looking, and
			// commits the hold even when nothing else is due.
			protectedRetry("late-next")
			advance(11 * time.Minute)
			_, err = l.ClaimNext(ctx, opledger.ClaimNextOptions{})
			require.ErrorIs(t, err, opledger.ErrNothingDue)
			op, err := l.Get(ctx, "late-next")
			require.NoError(t, err)
			require.Equal(t, opledger.StateHeld, op.State)

			protectedRetry("late-next-2")
			advance(11 * time.Minute)
			_, _, err = l.Record(ctx, opledger.Intent{Key: "plain", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			next, err := l.ClaimNext(ctx, opledger.ClaimNextOptions{})
			require.NoError(t, err)
			require.Equal(t, "plain", next.Operation.Key)
			_, err = l.ClaimNext(ctx, opledger.ClaimNextOptions{})
			require.ErrorIs(t, err, opledger.ErrNothingDue)
			op, err = l.Get(ctx, "late-next-2")
			require.NoError(t, err)
			require.Equal(t, opledger.StateHeld, op.State)
		})
	}
}

// A protected retry the destination rejects (an idempotency key still in
// use, a check added since the first attempt) did nothing itself, and
// says nothing of the uncertain attempt before it: failed would claim "no
// effect" without evidence. The operation is held for its owner, with the
// refusal as evidence, and nothing is sent again.
func TestRejectedProtectedRetryHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })

	const key = "charge:2"
	in := opledger.Intent{Key: key, Action: "payment.charge", Destination: "payment", Payload: json.RawMessage(`{"amount":5}`), Owner: "billing"}
	_, _, err = l.Record(ctx, in)
	require.NoError(t, err)
	attempt := func(r opledger.Report) (*opledger.Claim, *opledger.Operation) {
		t.Helper()
		c, err := l.Claim(ctx, key, opledger.ClaimOptions{Dispatch: true})
		require.NoError(t, err)
		op, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, r)
		require.NoError(t, err)
		return c, op
	}
	_, op := attempt(opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "no answer"})
	require.Equal(t, opledger.StateUncertain, op.State)
	op, _, err = l.Reconcile(ctx, key, opledger.Finding{ProtectionRetention: time.Hour})
	require.NoError(t, err)
	require.True(t, op.Protected)

	c, op := attempt(opledger.Report{Outcome: opledger.OutcomeRejected, Error: "409 idempotency key in use"})
	require.True(t, c.Protected)
	require.Equal(t, opledger.StateHeld, op.State, "a rejected protected retry settles nothing")
	require.Empty(t, op.FailureKind)
	require.Equal(t, "billing", op.Owner)
	require.NotNil(t, op.ReviewBy)
	require.False(t, op.Protected)
	require.Equal(t, "409 idempotency key in use", op.LastError)
	tl, err := l.Timeline(ctx, key)
	require.NoError(t, err)
	last := tl[len(tl)-1]
	require.Equal(t, "protected retry rejected", last.Event)
	require.Contains(t, last.Evidence, "an earlier attempt may have taken effect")
	_, err = l.Claim(ctx, key, opledger.ClaimOptions{})
	require.ErrorIs(t, err, opledger.ErrInvalidState, "nothing is sent again until someone decides")
}

// TestClaimCallTimeoutHoldsLateProtectedRetry: a claim that says how long
// its call may take (ClaimOptions.CallTimeout, ClaimNextOptions.CallTimeout)
// holds a protected retry whose window closes before that call could end,
// and makes no attempt; with time enough it claims. A negative or
// too long CallTimeout is refused.
func TestClaimCallTimeoutHoldsLateProtectedRetry(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			protected := func(key string) {
				t.Helper()
				in := opledger.Intent{Key: key, Action: "payment.charge", Destination: "payment", Payload: json.RawMessage(`{"amount":5}`)}
				c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
				require.NoError(t, err)
				_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "no answer"})
				require.NoError(t, err)
				op, _, err := l.Reconcile(ctx, key, opledger.Finding{ProtectionRetention: 10 * time.Minute, Evidence: "key kept 10m"})
				require.NoError(t, err)
				require.True(t, op.Protected)
			}
			protected("charge:late")
			protected("charge:next")
			clock.Advance(10*time.Minute - 20*time.Second) // 20 s of the window left

			for name, opts := range map[string]opledger.ClaimOptions{
				"negative":     {CallTimeout: -time.Second},
				"above a week": {CallTimeout: opledger.MaxLease + time.Second},
			} {
				_, err := l.Claim(ctx, "charge:late", opts)
				require.ErrorIs(t, err, opledger.ErrInvalidInput, name)
				require.Contains(t, err.Error(), "ClaimOptions.CallTimeout")
			}
			_, err = l.ClaimNext(ctx, opledger.ClaimNextOptions{CallTimeout: -time.Second})
			require.ErrorIs(t, err, opledger.ErrInvalidInput)

			_, err = l.Claim(ctx, "charge:late", opledger.ClaimOptions{CallTimeout: 30 * time.Second})
			require.ErrorIs(t, err, opledger.ErrInvalidState, "a 30 s call would outlast the window")
			op, err := l.Get(ctx, "charge:late")
			require.NoError(t, err)
			require.Equal(t, opledger.StateHeld, op.State)
			require.False(t, op.Protected)
			require.Equal(t, 1, op.AttemptCount, "no attempt was made")
			tl, err := l.Timeline(ctx, "charge:late")
			require.NoError(t, err)
			last := tl[len(tl)-1]
			require.Equal(t, "protection expired", last.Event)
			require.Contains(t, last.Evidence, "before a call claimed now could end (it may take 30s)")

			// ClaimNext holds it the same way, and has nothing else due.
			_, err = l.ClaimNext(ctx, opledger.ClaimNextOptions{CallTimeout: 30 * time.Second})
			require.ErrorIs(t, err, opledger.ErrNothingDue)
			op, err = l.Get(ctx, "charge:next")
			require.NoError(t, err)
			require.Equal(t, opledger.StateHeld, op.State)

			// A call that fits is claimed, protected.
			protected("charge:fits")
			c, err := l.ClaimNext(ctx, opledger.ClaimNextOptions{CallTimeout: 30 * time.Second})
			require.NoError(t, err)
			require.True(t, c.Protected)
			require.Equal(t, "charge:fits", c.Operation.Key)
		})
	}
}

// TestDoCallCarriesProtectedUntil: the action of a protected retry run by
// Do is told when the destination may forget its idempotency key
// (Call.ProtectedUntil, the claim's), so that it starts no call of its
// own, a retry inside the action included, at or after it; an action
// that is not a protected retry gets the zero time.
func TestDoCallCarriesProtectedUntil(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newManualClock()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{Clock: clock.Map})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })

	in := opledger.Intent{Key: "charge:1", Action: "payment.charge", Destination: "payment", Payload: json.RawMessage(`{"amount":5}`)}
	var calls []opledger.Call
	_, err = l.Do(ctx, in, func(_ context.Context, c opledger.Call) (opledger.Result, error) {
		calls = append(calls, c)
		return opledger.Result{}, opledger.Uncertain(nil)
	})
	require.Error(t, err)
	op, _, err := l.Reconcile(ctx, in.Key, opledger.Finding{ProtectionRetention: 10 * time.Minute, Evidence: "idempotency key kept 10m"})
	require.NoError(t, err)
	require.True(t, op.Protected)
	require.NotNil(t, op.ProtectedUntil)
	op, err = l.Do(ctx, in, func(_ context.Context, c opledger.Call) (opledger.Result, error) {
		calls = append(calls, c)
		return opledger.Result{Ref: "CH-1"}, nil
	})
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Len(t, calls, 2)
	require.False(t, calls[0].Protected)
	require.True(t, calls[0].ProtectedUntil.IsZero(), "not a protected retry: no window")
	require.True(t, calls[1].Protected)
	require.True(t, calls[1].ProtectedUntil.Equal(*calls[1].Operation.ProtectedUntil), "the claim's window: %v", calls[1].ProtectedUntil)
	require.False(t, calls[1].ProtectedUntil.IsZero())
}

// Do bounds the action of a protected retry by its window, as the
// executor bounds its calls: the action's context ends when the window
// does. It used to carry no deadline at all, so that an action started
// just before the window closed could go on past it, when the
// destination may have forgotten its idempotency key and repeat the
// effect. On both stores.
func TestDoBoundsProtectedRetryByItsWindow(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			in := opledger.Intent{Key: "charge:1", Action: "payment.charge", Destination: "payment", Payload: json.RawMessage(`{"amount":5}`)}
			_, err = l.Do(ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
				return opledger.Result{}, errors.New("no answer")
			})
			require.Error(t, err)
			op, _, err := l.Reconcile(ctx, in.Key, opledger.Finding{ProtectionRetention: 10 * time.Minute, Evidence: "idempotency key kept 10m"})
			require.NoError(t, err)
			require.True(t, op.Protected)

			// The retry is claimed 100ms before its window closes.
			const left = time.Second
			clock.Advance(op.ProtectedUntil.Sub(*op.FirstDispatchedAt) - left)
			var cause error
			op, err = l.Do(ctx, in, func(ctx context.Context, call opledger.Call) (opledger.Result, error) {
				require.True(t, call.Protected)
				deadline, ok := ctx.Deadline()
				require.True(t, ok, "the action of a protected retry has a deadline")
				require.False(t, deadline.After(time.Now().Add(left)), "no later than the window's end")
				<-ctx.Done()
				cause = context.Cause(ctx)
				return opledger.Result{}, ctx.Err()
			})
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.ErrorIs(t, cause, context.DeadlineExceeded)
			require.ErrorContains(t, cause, "the protected retry's window ended")
			require.Equal(t, opledger.StateUncertain, op.State, "the action may have acted")
		})
	}
}

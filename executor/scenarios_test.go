package executor_test

// The rows of issue 4's "Prove it" list, each on SQLite and PostgreSQL,
// against a real HTTP destination on 127.0.0.1 that counts effects. Time
// moves only through the rig's test clock; nothing sleeps.

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

const payload = `{"units": 2}`

// Row 1: ordinary success: one effect, ref stored.
func TestRow01OrdinarySuccess(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I17:create", "crm", payload)

		op := r.Step()
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "R1", op.DestinationRef)
		require.JSONEq(t, `{"id": "R1", "external_ref": "intake:I17:create", "units": 2}`, string(op.Response))
		require.Equal(t, 1, op.AttemptCount)
		require.Equal(t, 1, r.Server.Creates())
		require.Equal(t, 1, r.Server.Effects())
		require.Nil(t, r.Step(), "nothing left to do")
		require.Equal(t, 1, r.Server.Creates())
	})
}

// Row 2: 503 then success: two attempts, one effect.
func TestRow02UnavailableThenSuccess(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I18:create", "crm", payload)
		r.Server.Fail(fakedest.Unavailable)

		op := r.Step()
		require.Equal(t, opledger.StatePending, op.State)
		require.Contains(t, op.LastError, "503 Service Unavailable")
		require.NotNil(t, op.NotBefore)
		require.LessOrEqual(t, op.NotBefore.Sub(op.UpdatedAt), time.Second, "full jitter under the 1 s ceiling")

		r.Clock.Advance(2 * time.Second) // past the 1 s ceiling of the first backoff
		op = r.Step()
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, 2, op.AttemptCount)
		require.Equal(t, 2, r.Server.Creates())
		require.Equal(t, 1, r.Server.Effects())
		attempts := r.Attempts("intake:I18:create")
		require.Equal(t, string(opledger.OutcomeRetryable), attempts[0].Outcome)
		require.Equal(t, string(opledger.OutcomeSucceeded), attempts[1].Outcome)
	})
}

// Row 3: the response is lost after the destination committed; the
// destination has a lookup: one effect, succeeded with the destination's
// ref, no second request.
func TestRow03LostResponseLookup(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I19:create", "crm", payload)
		r.Server.Fail(fakedest.LoseResponse)

		op := r.Step()
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Contains(t, op.LastError, "sent, no answer")
		require.Equal(t, 1, r.Server.Effects(), "the destination committed")
		require.Nil(t, r.Step(), "an uncertain operation is never simply retried")

		pass := r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Succeeded])
		op = r.Get("intake:I19:create")
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "R1", op.DestinationRef)
		require.Contains(t, r.Events("intake:I19:create"), "lookup found the effect")
		require.Nil(t, r.Step())
		require.Equal(t, 1, r.Server.Creates(), "no second request")
		require.Equal(t, 1, r.Server.Effects())
	})
}

// Row 4: the same, on a destination with an idempotency key inside its
// retention: the protected retry sends the same key, the destination
// deduplicates, one effect.
func TestRow04ProtectedRetry(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		rec := r.Record("intake:I20:create", "crm-key", payload)
		r.Server.Fail(fakedest.LoseResponse)

		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Clock.Advance(30 * time.Minute) // still inside the 1 h retention

		pass := r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Retry])
		op := r.Get("intake:I20:create")
		require.Equal(t, opledger.StatePending, op.State)
		require.True(t, op.Protected)

		op = r.Step()
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "R1", op.DestinationRef, "the destination answered with the original record")
		require.Equal(t, 2, r.Server.Creates())
		require.Equal(t, 1, r.Server.Effects())
		keys := r.Server.Keys()
		require.Equal(t, []string{rec.IdempotencyKey(), rec.IdempotencyKey()}, keys, "the same key both times")
		attempts := r.Attempts("intake:I20:create")
		require.Len(t, attempts, 2)
		require.False(t, attempts[0].Protected)
		require.True(t, attempts[1].Protected, "the retry is recorded as protected")
	})
}

// A protected retry released just inside the retention, but so late that
// its call could still be running when the destination forgets the key:
// the claim holds it (the executor claims with its call timeout), so
// nothing is sent, no attempt is made, and the operation waits for a
// person. Before, the executor claimed it, marked it dispatched and
// refused to call; the reconciler released it again at its next pass,
// and the two went round until the attempt limit.
func TestProtectedRetryTooCloseToTheWindowsEnd(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I22:create", "crm-key", payload)
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Clock.Advance(time.Hour - 5*time.Second) // 5 s of the 1 h retention left, less than a call may take

		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Retry], "inside the retention: released as protected")
		require.Nil(t, r.Step(), "held by the claim: nothing to attempt")
		op := r.Get("intake:I22:create")
		require.Equal(t, opledger.StateHeld, op.State)
		require.Contains(t, r.Evidence("intake:I22:create", "protection expired"), "before a call claimed now could end")
		require.Len(t, r.Attempts("intake:I22:create"), 1, "no attempt was made")
		require.Equal(t, 1, r.Server.Creates(), "the late protected retry sent nothing")
		r.Clock.Advance(time.Second)
		require.Zero(t, r.Reconcile().Decisions[reconciler.Retry], "held: not released again")
		require.Equal(t, 1, r.Server.Creates())
	})
}

// A protected retry claimed with time enough for its call is sent even
// when preparing the call took a while: the call's deadline counts from
// the claim, so it still ends inside the window. (For a while the
// executor checked the window again after preparing, from its end, and
// refused such calls: an attempt spent, and the operation held.)
func TestProtectedRetryPreparedLateStillSent(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I23:create", "crm-key", payload)
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Clock.Advance(time.Hour - 10*time.Second) // 10 s left: a call claimed now may take 6⅔ s
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Retry])

		r.Exec.SetBeforeDispatch(func(context.Context) { r.Clock.Advance(4 * time.Second) })
		op := r.Step()
		r.Exec.SetBeforeDispatch(nil)
		require.Equal(t, opledger.StateSucceeded, op.State)
		attempts := r.Attempts("intake:I23:create")
		require.Len(t, attempts, 2)
		require.True(t, attempts[1].Protected)
		require.NotNil(t, attempts[1].DispatchedAt)
		require.Equal(t, 1, r.Server.Effects(), "the destination deduplicated the protected retry")
	})
}

// Row 5: the same, but the retention has passed: held, no second request.
func TestRow05RetentionPassed(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I21:create", "crm-key", payload)
		r.Server.Fail(fakedest.LoseResponse)

		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Clock.Advance(2 * time.Hour)

		pass := r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Held])
		op := r.Get("intake:I21:create")
		require.Equal(t, opledger.StateHeld, op.State)
		require.Equal(t, "ops-team", op.Owner)
		require.NotNil(t, op.ReviewBy)
		require.Contains(t, r.Events("intake:I21:create"), "protection expired")
		require.Nil(t, r.Step())
		require.Equal(t, 1, r.Server.Creates(), "no second request")
	})
}

// Row 6: the same, on a destination with no lookup and no key (an e-mail
// provider): held, no resend.
func TestRow06NoLookupNoKey(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("mail:welcome:C9", "email", `{"template": "welcome", "customer": "C9"}`)
		r.Server.Fail(fakedest.LoseResponse)

		require.Equal(t, opledger.StateUncertain, r.Step().State)
		pass := r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Held])
		op := r.Get("mail:welcome:C9")
		require.Equal(t, opledger.StateHeld, op.State)
		require.NotNil(t, op.ReviewBy)
		require.Contains(t, r.Evidence("mail:welcome:C9", "cannot be decided automatically"), "declares no lookup and no idempotency key")
		require.Nil(t, r.Step())
		require.Zero(t, r.Server.Lookups())
		require.Equal(t, 1, r.Server.Creates(), "no resend")
	})
}

// Row 7: the lookup is empty during the visibility delay: the operation
// stays uncertain; empty after it, on an authoritative lookup: retried,
// one effect.
func TestRow07VisibilityDelay(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I22:create", "crm", payload)
		r.Server.Fail(fakedest.DropBeforeCommit) // nothing committed, but the client cannot know

		require.Equal(t, opledger.StateUncertain, r.Step().State)
		pass := r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Wait])
		require.Equal(t, 1, r.Server.Lookups())
		op := r.Get("intake:I22:create")
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Contains(t, r.Evidence("intake:I22:create", "reconcile deferred"), "may stay invisible for 30s")
		require.Nil(t, r.Step())
		require.Zero(t, r.Reconcile().Examined, "the next check waits")

		r.Clock.Advance(31 * time.Second)
		pass = r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Retry])
		require.Contains(t, r.Events("intake:I22:create"), "lookup proved absence")
		op = r.Step()
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, 2, r.Server.Creates())
		require.Equal(t, 1, r.Server.Effects())
	})
}

// Row 7, the other way round: the record appears during the visibility
// delay; the next lookup finds it, nothing is resent.
func TestRow07RecordAppearsDuringDelay(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I23:create", "crm", payload)
		r.Server.HideNew()
		r.Server.Fail(fakedest.LoseResponse)

		require.Equal(t, opledger.StateUncertain, r.Step().State)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Wait])
		r.Server.Reveal()
		r.Clock.Advance(20 * time.Second)
		require.Equal(t, 1, r.Reconcile().Decisions[reconciler.Succeeded])
		require.Equal(t, "R1", r.Get("intake:I23:create").DestinationRef)
		require.Equal(t, 1, r.Server.Creates())
	})
}

// Row 8: 422 validation: failed (rejected) after one attempt, in the
// exception queue.
func TestRow08Rejected(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I24:create", "crm", payload)
		r.Server.Fail(fakedest.Invalid)

		op := r.Step()
		require.Equal(t, opledger.StateFailed, op.State)
		require.Equal(t, opledger.FailureRejected, op.FailureKind)
		require.Equal(t, 1, op.AttemptCount)
		require.Contains(t, op.LastError, "422 Unprocessable Entity")
		require.JSONEq(t, `{"error": "validation failed", "field": "email"}`, string(op.Response), "the refusal is kept for the operator")
		require.Nil(t, r.Step())
		require.Zero(t, r.Server.Effects())

		queue, err := r.Ledger.List(r.Ctx, opledger.ListOptions{States: []opledger.State{opledger.StateUncertain, opledger.StateHeld, opledger.StateFailed}})
		require.NoError(t, err)
		require.Len(t, queue.Items, 1)
		require.Equal(t, "intake:I24:create", queue.Items[0].Key)
		require.Equal(t, "ops-team", queue.Items[0].Owner)
	})
}

// Row 9: 429 with Retry-After: 2: the next attempt is not made before 2 s.
func TestRow09RetryAfter(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I25:create", "crm", payload)
		r.Server.SetRetryAfter("2")
		r.Server.Fail(fakedest.TooMany)

		op := r.Step()
		require.Equal(t, opledger.StatePending, op.State)
		require.Equal(t, 2*time.Second, op.NotBefore.Sub(op.UpdatedAt),
			"Retry-After is the floor of the backoff (whose ceiling is 1 s here)")
		require.Nil(t, r.Step())
		r.Clock.Advance(time.Second)
		require.Nil(t, r.Step(), "1 s later: still not due")
		r.Clock.Advance(1500 * time.Millisecond)
		op = r.Step()
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, 2, r.Server.Creates())
		require.Equal(t, 1, r.Server.Effects())
	})
}

// Row 10: retry limit exhausted: failed (exhausted), attempts = limit.
func TestRow10Exhausted(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:I26:create", "crm", payload)
		r.Server.Fail(fakedest.Unavailable, fakedest.Unavailable, fakedest.Unavailable, fakedest.Unavailable)

		for range 2 {
			require.Equal(t, opledger.StatePending, r.Step().State)
			r.Clock.Advance(11 * time.Second) // past the 10 s cap
		}
		op := r.Step()
		require.Equal(t, opledger.StateFailed, op.State)
		require.Equal(t, opledger.FailureExhausted, op.FailureKind)
		require.Equal(t, 3, op.AttemptCount, "attempts = the limit of 3")
		require.Contains(t, op.LastError, "503")
		require.Contains(t, r.Evidence("intake:I26:create", "exhausted"), "attempt limit 3 reached")
		r.Clock.Advance(time.Hour)
		require.Nil(t, r.Step())
		require.Equal(t, 3, r.Server.Creates())
		require.Zero(t, r.Server.Effects())
	})
}

// The retry policy on a test clock: full-jitter backoff stays under the
// doubling ceiling and its cap; the total deadline exhausts; Retry-After as
// an HTTP date is honoured.
func TestRetryPolicyOnTestClock(t *testing.T) {
	t.Parallel()
	const yaml = `
destinations:
  - name: flaky
    url: @URL@/records
    ref: /id
    timeout: 5s
    retry: {max_attempts: 8, initial_delay: 1s, max_delay: 4s, deadline: 1h}
  - name: short
    url: @URL@/records
    ref: /id
    timeout: 5s
    retry: {max_attempts: 100, initial_delay: 1s, max_delay: 1s, deadline: 30s}
`
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		t.Run("Backoff", func(t *testing.T) {
			r := testrig.New(t, newDSN, func(o *testrig.Options) { o.YAML = yaml })
			r.Record("flaky:1", "flaky", `{}`)
			for range 7 {
				r.Server.Fail(fakedest.Unavailable)
			}
			ceilings := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
			for n, ceiling := range ceilings {
				op := r.Step()
				require.Equal(t, opledger.StatePending, op.State, "attempt %d", n+1)
				wait := op.NotBefore.Sub(op.UpdatedAt)
				require.GreaterOrEqual(t, wait, time.Duration(0))
				require.LessOrEqual(t, wait, ceiling, "attempt %d", n+1)
				r.Clock.Advance(ceiling + time.Millisecond)
			}
			op := r.Step()
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, 8, op.AttemptCount)
		})

		t.Run("Deadline", func(t *testing.T) {
			r := testrig.New(t, newDSN, func(o *testrig.Options) { o.YAML = yaml })
			r.Record("short:1", "short", `{}`)
			r.Server.SetRetryAfter("20")
			r.Server.Fail(fakedest.TooMany, fakedest.TooMany)
			op := r.Step()
			require.Equal(t, opledger.StatePending, op.State)
			r.Clock.Advance(21 * time.Second)
			op = r.Step()
			require.Equal(t, opledger.StateFailed, op.State, "a third attempt would start after the 30 s deadline")
			require.Equal(t, opledger.FailureExhausted, op.FailureKind)
			require.Contains(t, r.Evidence("short:1", "exhausted"), "deadline")
		})

		t.Run("RetryAfterDate", func(t *testing.T) {
			r := testrig.New(t, newDSN, func(o *testrig.Options) { o.YAML = yaml })
			r.Record("flaky:2", "flaky", `{}`)
			r.Server.SetRetryAfter(time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat))
			r.Server.Fail(fakedest.TooMany)
			op := r.Step()
			require.Equal(t, opledger.StatePending, op.State)
			wait := op.NotBefore.Sub(op.UpdatedAt)
			require.GreaterOrEqual(t, wait, 3*time.Second, "whole seconds of an HTTP date")
			require.LessOrEqual(t, wait, 5*time.Second)
		})
	})
}

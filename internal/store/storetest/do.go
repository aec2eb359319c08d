package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
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
		// A Retry-After already past (time.Until of a reset time) means
		// none: the report is not refused.
		{"NegativeRetryAfter", opledger.Retryable(errors.New("429"), -time.Second), opledger.StatePending},
		// Marks of no error still classify, and Do does not panic.
		{"RejectedNil", opledger.Rejected(nil), opledger.StateFailed},
		{"RetryableNil", opledger.Retryable(nil, 0), opledger.StatePending},
		{"UncertainNil", opledger.Uncertain(nil), opledger.StateUncertain},
		// A proxy that is down: net/http wraps the dial in "proxyconnect".
		{"ProxyConnectRefused", &url.Error{Op: "Post", URL: "https://crm.example/v1", Err: &net.OpError{Op: "proxyconnect", Net: "tcp",
			Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}}, opledger.StatePending},
		{"ReadAfterWrite", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, opledger.StateUncertain},
		// Several marks: the most cautious wins, and a part without a
		// mark counts as it would alone (uncertain).
		{"JoinedRejectedUncertain", errors.Join(opledger.Rejected(errors.New("422")), opledger.Uncertain(errors.New("read timeout"))), opledger.StateUncertain},
		{"JoinedUncertainRejected", errors.Join(opledger.Uncertain(errors.New("read timeout")), opledger.Rejected(errors.New("422"))), opledger.StateUncertain},
		{"JoinedRejectedRetryable", fmt.Errorf("%w; %w", opledger.Rejected(errors.New("422")), opledger.Retryable(errors.New("503"), 0)), opledger.StatePending},
		{"JoinedRejectedUnmarked", errors.Join(opledger.Rejected(errors.New("422")), errors.New("something odd")), opledger.StateUncertain},
		{"JoinedRejectedRejected", errors.Join(opledger.Rejected(errors.New("422")), opledger.Rejected(errors.New("403"))), opledger.StateFailed},
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
			if strings.HasSuffix(tc.name, "Nil") {
				require.Equal(t, "no cause given", op.LastError)
			}
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

	// A context that ended before Do: nothing is recorded, nothing runs.
	t.Run("CancelledBeforeDo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		_, err := b.ledger.Do(ctx, intent("k1"), func(context.Context, opledger.Call) (opledger.Result, error) {
			t.Error("the action must not run")
			return opledger.Result{Ref: "X"}, nil
		})
		require.ErrorIs(t, err, context.Canceled)
		_, err = b.ledger.Get(b.ctx, "k1")
		require.ErrorIs(t, err, opledger.ErrNotFound)
	})

	// A success whose reference the ledger cannot store is not lost to a
	// refused report: it is uncertain, and the error quotes the reference.
	t.Run("UnstorableRefIsUncertain", func(t *testing.T) {
		t.Parallel()
		for i, tc := range []struct{ ref, quoted string }{
			{strings.Repeat("R", opledger.MaxDestinationRefBytes+1), `"` + strings.Repeat("R", 64) + `"… (201 bytes)`},
			{"H\x0042", `"H\x0042"`},
			{"H\xff42", `"H\xff42"`},
		} {
			b := setup(t, h)
			key := fmt.Sprintf("k%d", i)
			op, err := b.ledger.Do(b.ctx, intent(key), func(context.Context, opledger.Call) (opledger.Result, error) {
				return opledger.Result{Ref: tc.ref, Response: json.RawMessage(`{"id":1}`)}, nil
			})
			var ae *opledger.AttemptError
			require.True(t, errors.As(err, &ae), "%v", err)
			require.False(t, errors.Is(err, opledger.ErrInvalidInput), "the input was fine: %v", err)
			require.Equal(t, opledger.OutcomeUncertain, ae.Outcome)
			require.Equal(t, opledger.StateUncertain, ae.State)
			require.Equal(t, opledger.StateUncertain, op.State)
			stored := b.requireState(t, key, opledger.StateUncertain)
			require.Contains(t, stored.LastError, tc.quoted)
			require.Contains(t, stored.LastError, "cannot be stored")
			require.Empty(t, stored.DestinationRef)
		}
	})

	t.Run("InvalidResponseIsDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op, err := b.ledger.Do(b.ctx, intent("k1"), func(context.Context, opledger.Call) (opledger.Result, error) {
			return opledger.Result{Ref: "H42", Response: json.RawMessage(`created H42`)}, nil
		})
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "H42", op.DestinationRef)
		require.Empty(t, op.Response)
		require.Equal(t, "H42", b.requireState(t, "k1", opledger.StateSucceeded).DestinationRef)
	})

	// The error stored for operators carries no classification prefix,
	// however the mark is wrapped or joined.
	t.Run("StoredErrorWithoutMarks", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for key, tc := range map[string]struct {
			err  error
			want string
		}{
			"k1": {opledger.Rejected(errors.New("422 invalid email")), "422 invalid email"},
			"k2": {fmt.Errorf("crm: %w", opledger.Rejected(errors.New("422 invalid email"))), "crm: 422 invalid email"},
			"k3": {errors.Join(opledger.Rejected(errors.New("422")), opledger.Uncertain(errors.New("read timeout"))), "422\nread timeout"},
		} {
			op, err := b.ledger.Do(b.ctx, intent(key), func(context.Context, opledger.Call) (opledger.Result, error) {
				return opledger.Result{}, tc.err
			})
			require.Error(t, err)
			require.Equal(t, tc.want, op.LastError, key)
		}
	})

	// A late success of an earlier attempt that arrives while the action
	// runs settles the operation: Do returns it succeeded, with no error,
	// whatever the action answers.
	t.Run("LateSuccessWhileActionRuns", func(t *testing.T) {
		t.Parallel()
		for i, answer := range []struct {
			res opledger.Result
			err error
		}{
			{err: opledger.Retryable(errors.New("503"), 0)},
			{err: opledger.Uncertain(errors.New("read timeout"))},
			{err: opledger.Rejected(errors.New("422"))},
			{res: opledger.Result{Ref: "OTHER"}},
		} {
			b := setup(t, h)
			key := fmt.Sprintf("k%d", i)
			first := b.claimed(t, key) // its lease runs out before it reports
			b.clock.Advance(11 * time.Second)
			op, err := b.ledger.Do(b.ctx, intent(key), func(ctx context.Context, c opledger.Call) (opledger.Result, error) {
				_, err := b.ledger.Report(ctx, key, first.AttemptID, first.FencingToken,
					opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "EARLY"})
				require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
				return answer.res, answer.err
			})
			require.NoError(t, err, "answer %d", i)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "EARLY", op.DestinationRef)
			stored := b.requireState(t, key, opledger.StateSucceeded)
			want := 0
			if answer.err == nil {
				want = 1 // the action made a second effect
			}
			require.Equal(t, want, stored.DuplicateEffects)
		}
	})

	// A panicking action may have sent its request: uncertain, and the
	// panic goes on.
	t.Run("PanicIsUncertain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		require.PanicsWithValue(t, "boom", func() {
			_, _ = b.ledger.Do(b.ctx, intent("k1"), func(context.Context, opledger.Call) (opledger.Result, error) {
				panic("boom")
			})
		})
		op := b.requireState(t, "k1", opledger.StateUncertain)
		require.Equal(t, "action panicked: boom", op.LastError)
	})

	// The error of an action longer than the ledger keeps is masked before
	// it is cut, as Report's is, with or without a note ReportOf adds: a
	// sensitive value across the cut is not stored in part.
	t.Run("SensitiveValueAcrossTheCut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const secret = "ana.maria.silva@example.invalid"
		for i, answer := range []struct {
			res opledger.Result
			err error
		}{
			{err: opledger.Uncertain(errors.New(strings.Repeat("d", 980) + " bad to " + secret + " and more"))},
			// A reference with a retryable error adds a note at the end.
			{res: opledger.Result{Ref: "R1"}, err: opledger.Retryable(errors.New(strings.Repeat("d", 830)+" bad to "+secret+" and more"), 0)},
		} {
			key := fmt.Sprintf("k%d", i)
			in := intent(key)
			in.Payload = json.RawMessage(`{"to":"` + secret + `","units":2}`)
			in.SensitiveFields = []string{"to"}
			op, err := b.ledger.Do(b.ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
				return answer.res, answer.err
			})
			require.Error(t, err)
			require.Equal(t, opledger.StateUncertain, op.State)
			attempts, err := b.ledger.Attempts(b.ctx, key)
			require.NoError(t, err)
			tl, err := b.ledger.Timeline(b.ctx, key)
			require.NoError(t, err)
			texts := []string{op.LastError, attempts[0].Error}
			for _, e := range tl {
				texts = append(texts, e.Evidence)
			}
			require.Contains(t, op.LastError, "bad to ***", "answer %d", i)
			for _, text := range texts {
				require.NotContains(t, text, "ana.m", "answer %d: no part of the value is kept", i)
			}
		}
	})

	// A success whose destination reference the ledger cannot store (too
	// long, or not text) is recorded uncertain, its error quoting the
	// start of the reference: the values of sensitive fields are masked
	// in the whole reference before the quote is cut, so that a value
	// across the cut is not stored in part.
	t.Run("SensitiveValueAcrossTheRefQuote", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const secret = "ana.maria.silva@example.invalid"
		prefix := "https://crm.example/contacts/" + strings.Repeat("c", 20) + "?to=" // the value starts at byte 53
		for i, ref := range []string{
			prefix + secret + "&" + strings.Repeat("y", opledger.MaxDestinationRefBytes), // too long
			prefix + secret + "&x=\x00", // not text
			prefix + secret + "&x=\xff",
		} {
			require.Error(t, opledger.CheckDestinationRef(ref), "answer %d: the ledger cannot store it", i)
			key := fmt.Sprintf("k%d", i)
			in := intent(key)
			in.Payload = json.RawMessage(`{"to":"` + secret + `","units":2}`)
			in.SensitiveFields = []string{"to"}
			op, err := b.ledger.Do(b.ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
				return opledger.Result{Ref: ref}, nil
			})
			require.Error(t, err)
			require.Equal(t, opledger.StateUncertain, op.State)
			attempts, err := b.ledger.Attempts(b.ctx, key)
			require.NoError(t, err)
			tl, err := b.ledger.Timeline(b.ctx, key)
			require.NoError(t, err)
			texts := []string{op.LastError, attempts[0].Error}
			for _, e := range tl {
				texts = append(texts, e.Evidence)
			}
			require.Contains(t, op.LastError, "cannot be stored", "answer %d", i)
			require.Contains(t, op.LastError, `"`+prefix+"***", "answer %d: the value is masked in the quote", i)
			for _, text := range texts {
				require.NotContains(t, text, "ana.m", "answer %d: no part of the value is kept", i)
			}
		}
	})
}

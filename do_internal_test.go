package opledger

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/marker"
)

// The tests here set Do's step hook, which is global: they do not run in
// parallel, and each hook acts only on its own key.

// onDoStep runs fn when Do reaches step for key, until the test ends.
func onDoStep(t *testing.T, key, step string, fn func()) {
	h := func(k, s string) {
		if k == key && s == step {
			fn()
		}
	}
	doTestHook.Store(&h)
	t.Cleanup(func() { doTestHook.Store(nil) })
}

// openDoTest opens a ledger on a SQLite file whose clock the test moves
// with the returned function.
func openDoTest(t *testing.T) (*Ledger, func(time.Duration)) {
	t.Helper()
	var offset atomic.Int64
	l, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), Options{
		Worker: "test-worker", Lease: 10 * time.Second,
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l, func(d time.Duration) { offset.Add(int64(d)) }
}

func doTestIntent(key string) Intent {
	return Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"submission":"847"}`)}
}

func neverCalled(t *testing.T) Action {
	return func(context.Context, Call) (Result, error) {
		t.Error("the action must not run")
		return Result{Ref: "X"}, nil
	}
}

// A context that ends between the dispatch mark and the action: the
// action is not started, and the attempt is retryable, not uncertain.
func TestDoContextEndsBeforeAction(t *testing.T) {
	l, _ := openDoTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	onDoStep(t, "k1", "dispatched", cancel)
	op, err := l.Do(ctx, doTestIntent("k1"), neverCalled(t))
	require.ErrorIs(t, err, context.Canceled)
	var ae *AttemptError
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, OutcomeRetryable, ae.Outcome)
	require.Equal(t, StatePending, op.State)
	stored, err := l.Get(context.Background(), "k1")
	require.NoError(t, err)
	require.Equal(t, StatePending, stored.State)
	require.Contains(t, stored.LastError, "nothing sent")
}

// A dispatch mark that fails after the claim committed gives the claim
// back: the operation is pending at once, not in progress until its lease
// runs out.
func TestDoDispatchFailureReleasesClaim(t *testing.T) {
	l, _ := openDoTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	onDoStep(t, "k1", "claimed", cancel)
	_, err := l.Do(ctx, doTestIntent("k1"), neverCalled(t))
	require.ErrorIs(t, err, context.Canceled)

	bg := context.Background()
	stored, err := l.Get(bg, "k1")
	require.NoError(t, err)
	require.Equal(t, StatePending, stored.State)
	attempts, err := l.Attempts(bg, "k1")
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, AttemptAbandoned, attempts[0].Outcome)
	require.Nil(t, attempts[0].DispatchedAt)
	// Due at once: no wait for the lease.
	op, err := l.Do(bg, doTestIntent("k1"), func(context.Context, Call) (Result, error) { return Result{Ref: "H1"}, nil })
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, op.State)
}

// A late success of an earlier attempt that arrives between Do's claim and
// its dispatch mark: nothing is sent, and Do returns the operation as it
// is now (succeeded), with no error.
func TestDoLateSuccessBeforeDispatch(t *testing.T) {
	l, advance := openDoTest(t)
	ctx := context.Background()
	_, _, err := l.Record(ctx, doTestIntent("k1"))
	require.NoError(t, err)
	first, err := l.Claim(ctx, "k1", ClaimOptions{})
	require.NoError(t, err)
	advance(11 * time.Second) // the first attempt's lease runs out
	onDoStep(t, "k1", "claimed", func() {
		_, err := l.Report(ctx, "k1", first.AttemptID, first.FencingToken, Report{Outcome: OutcomeSucceeded, DestinationRef: "EARLY"})
		require.ErrorIs(t, err, ErrStaleFencingToken)
	})
	op, err := l.Do(ctx, doTestIntent("k1"), neverCalled(t))
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, op.State)
	require.Equal(t, "EARLY", op.DestinationRef)
}

// The same, with Do's own lease running out before its dispatch mark: the
// mark settles the lease, which takes the late success, and is refused;
// Do still returns the succeeded operation with no error, as documented.
func TestDoLateSuccessThenLeaseExpiryBeforeDispatch(t *testing.T) {
	ctx := context.Background()
	l, advance := openDoTest(t)
	in := doTestIntent("k1")
	c1, err := l.Claim(ctx, "k1", ClaimOptions{Intent: &in})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "k1", c1.AttemptID, c1.FencingToken)
	require.NoError(t, err)
	advance(11 * time.Second)
	_, err = l.ExpireLeases(ctx)
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, "k1", Decision{Kind: DecisionAuthorizeRetry, Reason: "checked"})
	require.NoError(t, err)
	onDoStep(t, "k1", "claimed", func() {
		_, err := l.Report(ctx, "k1", c1.AttemptID, c1.FencingToken, Report{Outcome: OutcomeSucceeded, DestinationRef: "R1"})
		require.ErrorIs(t, err, ErrStaleFencingToken)
		advance(11 * time.Second) // Do's lease runs out before its mark
	})
	op, err := l.Do(ctx, in, neverCalled(t))
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, op.State)
	require.Equal(t, "R1", op.DestinationRef)
}

type takenError struct{}

func (takenError) Error() string        { return "409 external_ref taken" }
func (takenError) Is(target error) bool { return target == marker.ErrExists }

// TestReportOfExists: an action's error that matches destination.ErrExists
// in its own words is recorded led by the mark the reconciler reads.
func TestReportOfExists(t *testing.T) {
	r, _ := reportOf(Result{}, Uncertain(takenError{}))
	if r.Outcome != OutcomeUncertain || !strings.HasPrefix(r.Error, marker.Exists+": 409 external_ref taken") {
		t.Fatalf("report %+v", r)
	}
}

// A protected retry whose window closes between the dispatch mark and
// the action's start: the action used to be started all the same, with a
// context already ended, and its error recorded as it said (uncertain,
// or whatever the action made of it). It is not started now: the attempt
// is recorded retryable, nothing sent, and the error says the window
// closed before the action could start; the operation is uncertain again
// for its reconciliation to decide.
func TestDoProtectedWindowClosesBeforeAction(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var offset atomic.Int64
	l, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), Options{
		Worker: "test-worker", Lease: 10 * time.Second,
		Clock: func(time.Time) time.Time { return base.Add(time.Duration(offset.Load())) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	ctx := context.Background()
	in := doTestIntent("k1")
	_, err = l.Do(ctx, in, func(context.Context, Call) (Result, error) { return Result{}, errors.New("no answer") })
	require.Error(t, err)
	op, _, err := l.Reconcile(ctx, in.Key, Finding{ProtectionRetention: 10 * time.Minute, Evidence: "idempotency key kept 10m"})
	require.NoError(t, err)
	require.True(t, op.Protected)

	// Claimed and marked dispatched 5ms before the window closes (the
	// ledger's clock stands still); the window has closed, by this
	// machine's clock, when the action would start.
	const left = 5 * time.Millisecond
	offset.Add(int64(op.ProtectedUntil.Sub(*op.FirstDispatchedAt) - left))
	onDoStep(t, "k1", "dispatched", func() { <-time.After(left) })
	op, err = l.Do(ctx, in, neverCalled(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "window")
	var ae *AttemptError
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, OutcomeRetryable, ae.Outcome)
	require.Equal(t, StateUncertain, op.State, "its reconciliation decides again")
	require.Contains(t, op.LastError, "nothing was sent")
	require.Contains(t, op.LastError, "before the action could start")
}

// What a context ending after the claim costs against the destination's
// attempt limit: before the dispatch mark, nothing (the claim is given
// back, its attempt abandoned); after it, one attempt, as any retryable
// report (the mark cannot be given back), so that with an attempt limit
// of 1 the operation is exhausted.
func TestDoContextEndsCountTowardAttemptLimit(t *testing.T) {
	l, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), Options{
		Worker: "test-worker", RetryPolicy: &RetryPolicy{MaxAttempts: 1, InitialDelay: time.Second, MaxDelay: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	for _, step := range []string{"claimed", "dispatched"} {
		key := "k-" + step
		ctx, cancel := context.WithCancel(context.Background())
		onDoStep(t, key, step, cancel)
		op, err := l.Do(ctx, doTestIntent(key), neverCalled(t))
		cancel()
		require.ErrorIs(t, err, context.Canceled)
		if step == "claimed" {
			require.Equal(t, StatePending, op.State, "given back: no attempt used")
			continue
		}
		require.Equal(t, StateFailed, op.State, "the dispatched attempt counts")
		require.Equal(t, FailureExhausted, op.FailureKind)
	}
}

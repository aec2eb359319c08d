package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// eachStore runs test on a fresh ledger of each store (SQLite and
// PostgreSQL), opened with opts.
func eachStore(t *testing.T, opts opledger.Options, test func(t *testing.T, l *opledger.Ledger)) {
	t.Helper()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			l, err := opledger.Open(context.Background(), st.NewDSN(t), opts)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			test(t, l)
		})
	}
}

// requireOwnPayload checks that op still has payload want and matches its
// fingerprint after the caller's buffer changed.
func requireOwnPayload(t *testing.T, op *opledger.Operation, want string) {
	t.Helper()
	require.JSONEq(t, want, string(op.Payload), "the operation keeps the payload it was recorded with")
	fp, err := opledger.Fingerprint(op.Action, op.Destination, op.Payload, op.Version)
	require.NoError(t, err)
	require.Equal(t, op.Fingerprint, fp, "the payload matches the operation's fingerprint")
}

// The operation Record (or a claim that records) returns has a payload
// of its own, and the operation Report returns a response of its own: a
// caller that reuses its buffers afterwards changes neither.
func TestReturnedOperationOwnsItsBuffers(t *testing.T) {
	t.Parallel()
	eachStore(t, opledger.Options{}, func(t *testing.T, l *opledger.Ledger) {
		ctx := context.Background()
		const first, second = `{"n":1}`, `{"n":2}`

		buf := []byte(first)
		op, created, err := l.Record(ctx, opledger.Intent{Key: "own:record", Action: "crm.create", Destination: "crm", Payload: buf})
		require.NoError(t, err)
		require.True(t, created)
		copy(buf, second)
		requireOwnPayload(t, op, first)

		// A claim that records the key, on the speculative path.
		buf = []byte(first)
		claim, err := l.Claim(ctx, "own:claim", opledger.ClaimOptions{Intent: &opledger.Intent{
			Key: "own:claim", Action: "crm.create", Destination: "crm", Payload: buf}})
		require.NoError(t, err)
		copy(buf, second)
		requireOwnPayload(t, claim.Operation, first)
		stored, err := l.Get(ctx, "own:claim")
		require.NoError(t, err)
		requireOwnPayload(t, stored, first)

		// Report's response.
		resp := []byte(`{"id":"R1"}`)
		op, err = l.Report(ctx, "own:claim", claim.AttemptID, claim.FencingToken,
			opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1", Response: resp})
		require.NoError(t, err)
		copy(resp, `{"id":"XX"}`)
		require.JSONEq(t, `{"id":"R1"}`, string(op.Response))

		// Revise's payload.
		_, _, err = l.Record(ctx, opledger.Intent{Key: "own:revise", Action: "crm.create", Destination: "crm", Payload: []byte(`{}`)})
		require.NoError(t, err)
		buf = []byte(first)
		op, _, err = l.Revise(ctx, "own:revise", opledger.Revision{Payload: buf, Version: 2})
		require.NoError(t, err)
		copy(buf, second)
		requireOwnPayload(t, op, first)
	})
}

// A negative lease in ClaimOptions or ClaimNextOptions is refused as
// Open refuses a negative Options.Lease, before anything is recorded or
// claimed; zero still means the Ledger's lease.
func TestClaimRefusesNegativeLease(t *testing.T) {
	t.Parallel()
	const lease = 42 * time.Second
	eachStore(t, opledger.Options{Lease: lease}, func(t *testing.T, l *opledger.Ledger) {
		ctx := context.Background()
		in := doIntent("lease:new")

		_, err := l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in, Lease: -5 * time.Second})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "ClaimOptions.Lease is -5s")
		_, err = l.Get(ctx, in.Key)
		require.ErrorIs(t, err, opledger.ErrNotFound, "nothing was recorded")

		_, _, err = l.Record(ctx, in)
		require.NoError(t, err)
		_, err = l.Claim(ctx, in.Key, opledger.ClaimOptions{Lease: -time.Nanosecond})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "ClaimOptions.Lease")
		_, err = l.ClaimNext(ctx, opledger.ClaimNextOptions{Lease: -5 * time.Second})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "ClaimNextOptions.Lease is -5s")
		require.False(t, errors.Is(err, opledger.ErrNothingDue))
		op, err := l.Get(ctx, in.Key)
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State, "nothing was claimed")
		require.Zero(t, op.AttemptCount)

		// Zero is the Ledger's lease.
		c, err := l.ClaimNext(ctx, opledger.ClaimNextOptions{})
		require.NoError(t, err)
		require.Equal(t, lease, c.LeaseExpiresAt.Sub(c.Operation.UpdatedAt))
	})
}

// A success names its effect: a destination reference of spaces only
// names none, so Report and Reconcile refuse it as Resolve does, and the
// operation stays as it was (its lease still held, uncertain).
func TestBlankDestinationRefRefused(t *testing.T) {
	t.Parallel()
	eachStore(t, opledger.Options{}, func(t *testing.T, l *opledger.Ledger) {
		ctx := context.Background()
		in := doIntent("ref:blank")
		c, err := l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		_, err = l.Report(ctx, in.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: " \t "})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "needs a destination_ref")
		op, err := l.Get(ctx, in.Key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateInProgress, op.State, "nothing was recorded")

		op, err = l.Report(ctx, in.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
		_, _, err = l.Reconcile(ctx, in.Key, opledger.Finding{Found: true, Matches: true, DestinationRef: "  ", AttemptCount: 1})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "needs its destination_ref")
		op, err = l.Get(ctx, in.Key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "still uncertain")
		require.Empty(t, op.DestinationRef)
	})
}

// When Do's claim is refused by the operation's state, Do returns the
// operation as it is with the *StateError, as it does with an
// *AttemptError; nil only when it has no operation to give.
func TestDoReturnsOperationWithRefusal(t *testing.T) {
	t.Parallel()
	eachStore(t, opledger.Options{}, func(t *testing.T, l *opledger.Ledger) {
		ctx := context.Background()
		ran := 0
		answer := func(err error) opledger.Action {
			return func(context.Context, opledger.Call) (opledger.Result, error) {
				ran++
				return opledger.Result{}, err
			}
		}
		refused := func(in opledger.Intent, want error, state opledger.State) *opledger.Operation {
			t.Helper()
			before := ran
			op, err := l.Do(ctx, in, answer(nil))
			require.ErrorIs(t, err, want)
			var se *opledger.StateError
			require.ErrorAs(t, err, &se)
			require.NotNil(t, op, "Do returns the operation with the refusal")
			require.Same(t, se.Operation, op)
			require.Equal(t, state, op.State)
			require.Equal(t, in.Key, op.Key)
			require.Equal(t, before, ran, "the action did not run")
			return op
		}

		// Awaiting approval: recorded and refused by the same call.
		in := doIntent("do:approval")
		in.RequiresApproval = true
		refused(in, opledger.ErrInvalidState, opledger.StateAwaitingApproval)

		// Not due: a retryable attempt put it off for an hour.
		in = doIntent("do:later")
		op, err := l.Do(ctx, in, answer(opledger.Retryable(errors.New("503 before anything was done"), time.Hour)))
		var ae *opledger.AttemptError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, opledger.StatePending, op.State)
		op = refused(in, opledger.ErrNotDue, opledger.StatePending)
		require.NotNil(t, op.NotBefore)

		// Uncertain.
		in = doIntent("do:uncertain")
		_, err = l.Do(ctx, in, answer(opledger.Uncertain(errors.New("timeout after sending"))))
		require.ErrorAs(t, err, &ae)
		refused(in, opledger.ErrInvalidState, opledger.StateUncertain)

		// Failed.
		in = doIntent("do:rejected")
		_, err = l.Do(ctx, in, answer(opledger.Rejected(errors.New("422"))))
		require.ErrorAs(t, err, &ae)
		refused(in, opledger.ErrInvalidState, opledger.StateFailed)

		// In progress: another worker holds it.
		in = doIntent("do:held")
		_, err = l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in, Worker: "other"})
		require.NoError(t, err)
		refused(in, opledger.ErrInProgress, opledger.StateInProgress)

		// No operation to give: other content under a known key.
		other := doIntent("do:held")
		other.Payload = json.RawMessage(`{"submission":"848"}`)
		op, err = l.Do(ctx, other, answer(nil))
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		require.Nil(t, op)
	})
}

package opledger_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestFindingAfterDecision: a lookup that found the record answers after
// the operation left uncertain while it ran (an operator authorized a
// retry or cancelled it, or a retry was claimed). The record is evidence
// of the effect: it used to be refused and dropped, with no trace, and
// the retry made the effect twice. Now a matching record succeeds the
// operation (or keeps the attempt holding it from sending), and one with
// other content holds an operation about to be sent.
func TestFindingAfterDecision(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			// uncertain leaves key uncertain after one dispatched attempt,
			// then applies the operator's decision d.
			uncertain := func(key string, d opledger.DecisionKind) {
				t.Helper()
				in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"amount":100}`)}
				c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
				require.NoError(t, err)
				_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
				require.NoError(t, err)
				if d != "" {
					_, _, err = l.Resolve(ctx, key, opledger.Decision{Kind: d, Reason: "the CRM said nothing", Operator: "maria"})
					require.NoError(t, err)
				}
			}
			found := opledger.Finding{Found: true, Matches: true, DestinationRef: "R1", Authoritative: true, AttemptCount: 1, Evidence: "GET /records?ref=k"}

			for _, d := range []opledger.DecisionKind{opledger.DecisionAuthorizeRetry, opledger.DecisionCancel} {
				key := "found-after-" + string(d)
				uncertain(key, d)
				op, decided, err := l.Reconcile(ctx, key, found)
				require.NoError(t, err, d)
				require.True(t, decided, "the finding moved it on: %s", d)
				require.Equal(t, opledger.StateSucceeded, op.State, d)
				require.Equal(t, "R1", op.DestinationRef)
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				require.Equal(t, "lookup found the effect", tl[len(tl)-1].Event)
				require.Contains(t, tl[len(tl)-1].Evidence, "found while the lookup ran, after the operation had become")
				_, err = l.Claim(ctx, key, opledger.ClaimOptions{})
				require.Error(t, err, "nothing is sent again")
			}

			// A retry claimed already, not dispatched: it is not sent.
			uncertain("found-while-claimed", opledger.DecisionAuthorizeRetry)
			c, err := l.Claim(ctx, "found-while-claimed", opledger.ClaimOptions{})
			require.NoError(t, err)
			op, decided, err := l.Reconcile(ctx, "found-while-claimed", found)
			require.NoError(t, err, "a found record is not a stale finding")
			require.True(t, decided, "the finding decided the outcome: the attempt that holds it is not sent, and settles it succeeded")
			require.Equal(t, opledger.StateInProgress, op.State)
			_, err = l.Dispatch(ctx, "found-while-claimed", c.AttemptID, c.FencingToken)
			require.Error(t, err)
			op, err = l.Get(ctx, "found-while-claimed")
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R1", op.DestinationRef)

			// Other content: the retry waits for a person.
			uncertain("other-after-retry", opledger.DecisionAuthorizeRetry)
			other := found
			other.Matches = false
			op, decided, err = l.Reconcile(ctx, "other-after-retry", other)
			require.NoError(t, err)
			require.True(t, decided)
			require.Equal(t, opledger.StateHeld, op.State)

			// Other content while a retry is claimed, not sent: it is not
			// sent, and the operation waits for a person.
			uncertain("other-while-claimed", opledger.DecisionAuthorizeRetry)
			c, err = l.Claim(ctx, "other-while-claimed", opledger.ClaimOptions{})
			require.NoError(t, err)
			op, _, err = l.Reconcile(ctx, "other-while-claimed", other)
			require.NoError(t, err)
			require.Equal(t, opledger.StateHeld, op.State)
			_, err = l.Dispatch(ctx, "other-while-claimed", c.AttemptID, c.FencingToken)
			require.ErrorContains(t, err, "it was never sent: a lookup found a record with other content, and the operation is held for a person")

			// Other content while a retry is claimed, an effect confirmed
			// already (an earlier attempt's late success): noted only;
			// the effect settles the operation.
			uncertain("other-after-confirmed", opledger.DecisionAuthorizeRetry)
			first, err := l.Attempts(ctx, "other-after-confirmed")
			require.NoError(t, err)
			c, err = l.Claim(ctx, "other-after-confirmed", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "other-after-confirmed", first[0].ID, first[0].FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
			op, decided, err = l.Reconcile(ctx, "other-after-confirmed", other)
			require.NoError(t, err)
			require.False(t, decided, "noted only")
			require.Equal(t, opledger.StateInProgress, op.State)
			_, err = l.Dispatch(ctx, "other-after-confirmed", c.AttemptID, c.FencingToken)
			require.ErrorContains(t, err, "operation is succeeded", "the call does not start: the effect exists")
			attempts, err := l.Attempts(ctx, "other-after-confirmed")
			require.NoError(t, err)
			require.Equal(t, "not sent: an earlier attempt's late report had confirmed the effect", attempts[1].Error)
			op, err = l.Get(ctx, "other-after-confirmed")
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R1", op.DestinationRef)

			// A second record found while a retry holds the operation,
			// an effect confirmed: counted, and not again when the retry
			// reports that same record.
			uncertain("second-while-held", opledger.DecisionAuthorizeRetry)
			c, err = l.Claim(ctx, "second-while-held", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, _, err = l.Reconcile(ctx, "second-while-held", found)
			require.NoError(t, err)
			third := found
			third.DestinationRef = "R3"
			op, _, err = l.Reconcile(ctx, "second-while-held", third)
			require.NoError(t, err)
			require.Equal(t, 1, op.DuplicateEffects)
			op, err = l.Report(ctx, "second-while-held", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R3"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R1", op.DestinationRef)
			require.Equal(t, 1, op.DuplicateEffects, "R3 is counted once")

			// Succeeded meanwhile with another record (the retry's): the
			// one found is a second effect, counted once.
			uncertain("second-record", opledger.DecisionAuthorizeRetry)
			c, err = l.Claim(ctx, "second-record", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, "second-record", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R2"})
			require.NoError(t, err)
			for range 2 {
				op, decided, err = l.Reconcile(ctx, "second-record", found)
				require.NoError(t, err)
				require.False(t, decided, "a duplicate effect noted on an operation succeeded meanwhile")
				require.Equal(t, opledger.StateSucceeded, op.State)
				require.Equal(t, "R2", op.DestinationRef)
				require.Equal(t, 1, op.DuplicateEffects, "R1 and R2 both exist; the same finding again counts nothing more")
			}
			// Its own record found: nothing new.
			_, _, err = l.Reconcile(ctx, "second-record", opledger.Finding{Found: true, Matches: true, DestinationRef: "R2", AttemptCount: 2})
			require.ErrorIs(t, err, opledger.ErrInvalidState)

			// Uncertain again after a newer attempt: a record the older
			// lookup found still settles it (an effect, whoever made it).
			uncertain("found-after-newer", opledger.DecisionAuthorizeRetry)
			c, err = l.Claim(ctx, "found-after-newer", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, "found-after-newer", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			op, _, err = l.Reconcile(ctx, "found-after-newer", found)
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R1", op.DestinationRef)
			_, _, err = l.Reconcile(ctx, "found-after-newer", opledger.Finding{Authoritative: true, AttemptCount: 1})
			require.ErrorIs(t, err, opledger.ErrInvalidState)

			// Anything but a record found is still refused there.
			uncertain("absent-after-retry", opledger.DecisionAuthorizeRetry)
			_, _, err = l.Reconcile(ctx, "absent-after-retry", opledger.Finding{Authoritative: true, AttemptCount: 1})
			require.ErrorIs(t, err, opledger.ErrInvalidState)
		})
	}
}

// TestClaimLookup: a lookup is taken once per sighting of the operation:
// a second take from the same sighting (another process's) is refused,
// one from a fresh read is not, and an operation no longer uncertain is
// not taken. Bad input is refused.
func TestClaimLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	in := opledger.Intent{Key: "k", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
	c, err := l.Claim(ctx, "k", opledger.ClaimOptions{Intent: &in, Dispatch: true})
	require.NoError(t, err)
	seen, err := l.Report(ctx, "k", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)

	taken, err := l.ClaimLookup(ctx, seen, time.Minute)
	require.NoError(t, err)
	require.True(t, taken)
	taken, err = l.ClaimLookup(ctx, seen, time.Minute)
	require.NoError(t, err)
	require.False(t, taken, "taken already, by the first")
	fresh, err := l.Get(ctx, "k")
	require.NoError(t, err)
	require.NotNil(t, fresh.NotBefore, "the next check moved past the lookup")
	taken, err = l.ClaimLookup(ctx, fresh, time.Minute)
	require.NoError(t, err)
	require.True(t, taken, "a fresh read may take it again (its lookup outlived the lease)")

	_, _, err = l.Resolve(ctx, "k", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "gave up", Operator: "maria"})
	require.NoError(t, err)
	fresh, err = l.Get(ctx, "k")
	require.NoError(t, err)
	taken, err = l.ClaimLookup(ctx, fresh, time.Minute)
	require.NoError(t, err)
	require.False(t, taken, "not uncertain")

	_, err = l.ClaimLookup(ctx, nil, time.Minute)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	_, err = l.ClaimLookup(ctx, fresh, 0)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
}

// TestWorkerErrorNotTakenForLedgerEnding: a worker's own error that
// reads like the ledger's ending ("not sent: …") does not change what a
// stale attempt is told: its lease ran out before its dispatch.
func TestWorkerErrorNotTakenForLedgerEnding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newManualClock()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{Clock: clock.Map, Lease: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	in := opledger.Intent{Key: "k", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)}
	c, err := l.Claim(ctx, "k", opledger.ClaimOptions{Intent: &in})
	require.NoError(t, err)
	clock.Advance(11 * time.Second)
	_, err = l.ExpireLeases(ctx)
	require.NoError(t, err)
	for range 2 {
		_, err = l.Report(ctx, "k", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "not sent: invalid address"})
		require.ErrorContains(t, err, "it ended before its dispatch: it gave the claim back, or its lease ran out")
	}
	_, err = l.Dispatch(ctx, "k", c.AttemptID, c.FencingToken)
	require.ErrorContains(t, err, "it ended before its dispatch")
}

// TestOtherContentFoundAfterSuccessIsNoted: a lookup begun while the
// operation was uncertain finds a record with other content, after the
// operation succeeded meanwhile (a retry's record). It used to be taken
// for nothing new and refused, leaving no trace that the destination
// holds a second, different record. It is now noted on the timeline; the
// operation stays succeeded, with its own reference.
func TestOtherContentFoundAfterSuccessIsNoted(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			const key = "other-after-success"
			in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"amount":100}`)}
			c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			_, _, err = l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "the CRM said nothing", Operator: "maria"})
			require.NoError(t, err)
			c, err = l.Claim(ctx, key, opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R2"})
			require.NoError(t, err)

			op, _, err := l.Reconcile(ctx, key, opledger.Finding{Found: true, DestinationRef: "R9", AttemptCount: 1, Evidence: "GET /records?ref=k"})
			require.NoError(t, err, "a record found is never dropped")
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R2", op.DestinationRef)
			require.Zero(t, op.DuplicateEffects, "other content is not the intended effect")
			tl, err := l.Timeline(ctx, key)
			require.NoError(t, err)
			last := tl[len(tl)-1]
			require.Equal(t, "lookup found other content", last.Event)
			require.Contains(t, last.Evidence, "destination ref R9 does not match the intent; found while the lookup ran, after the operation had become succeeded")
			require.Contains(t, last.Evidence, "GET /records?ref=k")
		})
	}
}

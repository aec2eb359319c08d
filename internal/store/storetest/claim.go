package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/marker"
)

func testClaim(t *testing.T, h Harness) {
	t.Run("Pending", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.claimed(t, "k1")
		require.EqualValues(t, 1, c.FencingToken)
		require.Len(t, c.AttemptID, 26, "a ULID")
		require.Equal(t, opledger.DestinationIdempotencyKey("default", "k1", 1), c.IdempotencyKey)
		require.Equal(t, opledger.StateInProgress, c.Operation.State)
		require.False(t, c.Operation.Dispatched)
		require.Equal(t, 1, c.Operation.AttemptCount)
		require.WithinDuration(t, c.Operation.UpdatedAt.Add(10*time.Second), c.LeaseExpiresAt, time.Millisecond)
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Equal(t, c.AttemptID, attempts[0].ID)
		require.Equal(t, "test-worker", attempts[0].Worker)
	})

	// A new key recorded and claimed in one step the ordinary way (a key
	// with '/' must be checked against the workflows, which a decision on
	// a snapshot cannot read): the attempt refers to the row inserted with
	// it.
	t.Run("IntentWithSlashKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := opledger.Intent{Key: "orders/17:create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":2}`)}
		c, err := b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
		require.NoError(t, err)
		require.Equal(t, opledger.StateInProgress, c.Operation.State)
		require.True(t, c.Operation.Dispatched)
		attempts, err := b.ledger.Attempts(b.ctx, in.Key)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		op, err := b.ledger.Do(b.ctx, opledger.Intent{Key: "orders/18:create", Action: "crm.create", Destination: "crm"},
			func(context.Context, opledger.Call) (opledger.Result, error) { return opledger.Result{Ref: "R18"}, nil })
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
	})

	t.Run("SecondClaimRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.claimed(t, "k1")
		_, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Worker: "other"})
		require.ErrorIs(t, err, opledger.ErrInProgress)
		var se *opledger.StateError
		require.True(t, errors.As(err, &se))
		require.Equal(t, opledger.StateInProgress, se.State)
		require.Contains(t, err.Error(), "in_progress")
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, err := b.ledger.Claim(b.ctx, "nope", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrNotFound)
	})

	t.Run("SucceededReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateSucceeded)
		_, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrAlreadySucceeded)
		var se *opledger.StateError
		require.True(t, errors.As(err, &se))
		require.Equal(t, "REF-k1", se.Operation.DestinationRef)
		require.JSONEq(t, `{"id":1}`, string(se.Operation.Response))
		// A repeated Record replays too.
		op, created, err := b.ledger.Record(b.ctx, intent("k1"))
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, "REF-k1", op.DestinationRef)
	})

	t.Run("NotDue", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		op := b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503", RetryAfter: time.Minute})
		require.Equal(t, opledger.StatePending, op.State)
		_, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrNotDue)
		b.clock.Advance(time.Minute + time.Millisecond)
		c2, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 2, c2.FencingToken)
		require.Equal(t, c.IdempotencyKey, c2.IdempotencyKey, "stable across attempts")
	})

	t.Run("InlineIntent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		require.Equal(t, opledger.StateInProgress, c.Operation.State)
		require.Equal(t, []string{"recorded", "claimed"}, b.events(t, "k1"))
		// Same intent again: in progress. Other content: mismatch.
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Intent: &in})
		require.ErrorIs(t, err, opledger.ErrInProgress)
		other := intent("k1")
		other.Payload = json.RawMessage(`{"units":3}`)
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Intent: &other})
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		wrong := intent("k2")
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Intent: &wrong})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
	})

	// ClaimOptions.Dispatch writes the dispatch mark with the claim: for a
	// new key claimed with its intent (decided without reading) and for a
	// recorded one, the same as a Dispatch call right after the claim.
	t.Run("WithDispatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("new")
		_, _, err := b.ledger.Record(b.ctx, intent("recorded"))
		require.NoError(t, err)
		claims := map[string]opledger.ClaimOptions{"new": {Intent: &in, Dispatch: true}, "recorded": {Dispatch: true}}
		for key, opts := range claims {
			c, err := b.ledger.Claim(b.ctx, key, opts)
			require.NoError(t, err, key)
			require.True(t, c.Operation.Dispatched, key)
			op := b.requireState(t, key, opledger.StateInProgress)
			require.True(t, op.Dispatched, "%s: read back", key)
			require.Equal(t, []string{"recorded", "claimed", "dispatched"}, b.events(t, key))
			attempts, err := b.ledger.Attempts(b.ctx, key)
			require.NoError(t, err)
			require.Len(t, attempts, 1)
			require.NotNil(t, attempts[0].DispatchedAt, key)
			// A Dispatch call afterwards changes nothing.
			_, err = b.ledger.Dispatch(b.ctx, key, c.AttemptID, c.FencingToken)
			require.NoError(t, err, key)
			require.Equal(t, []string{"recorded", "claimed", "dispatched"}, b.events(t, key))
		}
		// Interrupted: uncertain when the lease expires, never pending.
		b.clock.Advance(11 * time.Second)
		n, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		for key := range claims {
			b.requireState(t, key, opledger.StateUncertain)
		}
	})
}

func testReport(t *testing.T, h Harness) {
	// An empty response (a Go worker's io.ReadAll of a 204's body) is no
	// response, on every store: the operation, as answered and as read
	// again, encodes as JSON, and a repeat replays it the same way.
	t.Run("EmptyResponseIsNone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		op := b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42", Response: json.RawMessage{}})
		read, err := b.ledger.Get(b.ctx, "k1")
		require.NoError(t, err)
		again, created, err := b.ledger.Record(b.ctx, intent("k1"))
		require.NoError(t, err)
		require.False(t, created)
		for _, o := range []*opledger.Operation{op, read, again} {
			require.Equal(t, opledger.StateSucceeded, o.State)
			require.Nil(t, o.Response)
			out, err := json.Marshal(o)
			require.NoError(t, err)
			require.Contains(t, string(out), `"response":null`)
		}
	})
	t.Run("Succeeded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		_, err := b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "succeeded needs a ref")
		op := b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42", Response: []byte(`{"id":"H42"}`)})
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "H42", op.DestinationRef)
		require.Nil(t, op.LeaseExpiresAt)
		require.Equal(t, []string{"recorded", "claimed", "dispatched", "succeeded"}, b.events(t, "k1"))
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, "succeeded", attempts[0].Outcome)
		require.NotNil(t, attempts[0].DispatchedAt)
	})

	// A destination's error that repeats a sensitive value (its own
	// validation message, an echoed body) is stored with the value masked:
	// the attempt's error, the operation's last error, the timeline's
	// evidence and an operator's reason alike. Short values and other
	// operations' text are left alone.
	t.Run("SensitiveValuesMaskedInText", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		in.Payload = json.RawMessage(`{"contact":{"email":"ana@example.invalid","pin":12345678901234567890},"flag":"ab","units":2}`)
		in.SensitiveFields = []string{"contact", "flag"}
		_, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		c := b.claimDispatched(t, "k1")
		op := b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain,
			Error: "422 invalid address ana@example.invalid (pin 12345678901234567890) ab units 2"})
		const masked = "422 invalid address *** (pin ***) ab units 2"
		require.Equal(t, masked, op.LastError)
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, masked, attempts[0].Error)
		op, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel,
			Reason: "ana@example.invalid asked us to stop", Operator: "oncall"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateFailed, op.State)
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		var text []string
		for _, e := range tl {
			text = append(text, e.Evidence)
		}
		all := strings.Join(text, "\n")
		require.NotContains(t, all, "ana@example.invalid")
		require.NotContains(t, all, "12345678901234567890")
		require.Contains(t, all, "*** asked us to stop")

		// The phrases the reconciler reads back to decide stay whole, even
		// when a sensitive value is part of one ("ready" in "already",
		// "failed" in "lookup failed: ").
		in = intent("k3")
		in.Payload = json.RawMessage(`{"customer":{"status":"ready","check":"failed","email":"ana@example.invalid"}}`)
		in.SensitiveFields = []string{"customer"}
		_, _, err = b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		c = b.claimDispatched(t, "k3")
		op = b.report(t, "k3", c, opledger.Report{Outcome: opledger.OutcomeUncertain,
			Error: "409 ready for ana@example.invalid: " + marker.Exists})
		require.Equal(t, "409 *** for ***: "+marker.Exists, op.LastError)
		op, err = b.ledger.DeferReconcile(b.ctx, "k3", time.Minute, marker.LookupFailed+"failed to reach ready")
		require.NoError(t, err)
		require.Equal(t, "409 *** for ***: "+marker.Exists, op.LastError, "deferring keeps the masked error")
		tl, err = b.ledger.Timeline(b.ctx, "k3")
		require.NoError(t, err)
		require.True(t, strings.HasSuffix(tl[len(tl)-1].Evidence, marker.LookupFailed+"*** to reach ***"), tl[len(tl)-1].Evidence)

		c = b.dispatched(t, "k2") // no sensitive fields: nothing masked
		op = b.report(t, "k2", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "422 invalid address ana@example.invalid"})
		require.Equal(t, "422 invalid address ana@example.invalid", op.LastError)
	})

	// Text longer than the ledger keeps is masked before it is cut: a
	// sensitive value across the cut is not stored in part.
	t.Run("SensitiveValueAcrossTheCut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const secret = "ana.maria.silva@example.invalid"
		for _, key := range []string{"k1", "k2", "k3"} {
			in := intent(key)
			in.Payload = json.RawMessage(`{"to":"` + secret + `","units":2}`)
			in.SensitiveFields = []string{"to"}
			_, _, err := b.ledger.Record(b.ctx, in)
			require.NoError(t, err)
		}
		long := func(n int) string { return strings.Repeat("d", n) + " bad to " + secret + " and more" }
		c := b.claimDispatched(t, "k1")
		op := b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: long(980)})
		_, err := b.ledger.DeferReconcile(b.ctx, "k1", time.Minute, long(1980))
		require.NoError(t, err)
		_, _, err = b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Evidence: long(1985)})
		require.NoError(t, err)
		c3 := b.claimDispatched(t, "k3")
		b.report(t, "k3", c3, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		_, err = b.ledger.Hold(b.ctx, "k3", long(1990))
		require.NoError(t, err)
		c2, err := b.ledger.Claim(b.ctx, "k2", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = b.ledger.Release(b.ctx, "k2", c2.AttemptID, c2.FencingToken, long(1995))
		require.NoError(t, err)
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		texts := []string{op.LastError, attempts[0].Error}
		for _, key := range []string{"k1", "k2", "k3"} {
			tl, err := b.ledger.Timeline(b.ctx, key)
			require.NoError(t, err)
			for _, e := range tl {
				texts = append(texts, e.Evidence)
			}
		}
		require.Contains(t, op.LastError, "bad to ***")
		for _, text := range texts {
			require.NotContains(t, text, "ana.m", "no part of the value is kept")
		}
	})

	// A sensitive value is masked in stored text however the text spells
	// it: JSON-escaped as Python's json.dumps (\u00eb) and Go (\u003c)
	// write it, URL-escaped in a query (%40) or a path (%20), and an
	// e-mail address in any case. Where the operation is shown, a
	// destination reference that holds one is masked too, while a repeat
	// of Do is answered with the real one.
	t.Run("SensitiveValueSpellingsMaskedInText", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		in.Payload = json.RawMessage(`{"to":"Ana.Silva@Example.invalid","name":"Zoë <Lang>","units":2}`)
		in.SensitiveFields = []string{"to", "name"}
		_, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		c := b.claimDispatched(t, "k1")
		op := b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeRetryable,
			Error: `422 {"to": "ana.silva@example.INVALID", "name": "Zo\u00eb <Lang>"} {"name":"Zoë \u003cLang\u003e"} ` +
				`GET /contacts?email=Ana.Silva%40Example.invalid&n=Zo%C3%AB+%3CLang%3E /names/Zo%C3%AB%20%3CLang%3E units 2`})
		const masked = `422 {"to": "***", "name": "***"} {"name":"***"} GET /contacts?email=***&n=*** /names/*** units 2`
		require.Equal(t, masked, op.LastError)
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, masked, attempts[0].Error)
		op, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel,
			Reason: "ANA.SILVA@EXAMPLE.INVALID (Zo%C3%AB%20%3CLang%3E) asked us to stop", Operator: "oncall"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateFailed, op.State, "cancelled")
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, "*** (***) asked us to stop", tl[len(tl)-1].Evidence)

		// A reference that is, or holds, the sensitive value.
		in = intent("k2")
		in.Payload = json.RawMessage(`{"to":"ana@example.invalid"}`)
		in.SensitiveFields = []string{"to"}
		done, err := b.ledger.Do(b.ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
			return opledger.Result{Ref: "<m1.ana@example.invalid>", Response: json.RawMessage(`{"note":"sent to ana@example.invalid"}`)}, nil
		})
		require.NoError(t, err)
		require.Equal(t, "<m1.ana@example.invalid>", done.DestinationRef, "the caller gets its own result")
		again, err := b.ledger.Do(b.ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
			return opledger.Result{}, errors.New("a repeat must not run")
		})
		require.NoError(t, err)
		require.Equal(t, "<m1.ana@example.invalid>", again.DestinationRef, "and the real one on a repeat")
		require.JSONEq(t, `{"note":"sent to ana@example.invalid"}`, string(again.Response))
		shown, err := json.Marshal(again)
		require.NoError(t, err)
		require.NotContains(t, string(shown), "ana@")
		require.Contains(t, string(shown), `"destination_ref":"\u003cm1.***\u003e"`)
		require.Contains(t, string(shown), `"note":"sent to ***"`)
		attempts, err = b.ledger.Attempts(b.ctx, "k2")
		require.NoError(t, err)
		require.Equal(t, "<m1.***>", again.MaskedAttempts(attempts)[0].DestinationRef)
		tl, err = b.ledger.Timeline(b.ctx, "k2")
		require.NoError(t, err)
		require.Equal(t, "destination ref <m1.***>", tl[len(tl)-1].Evidence)
		page, err := b.ledger.List(b.ctx, opledger.ListOptions{})
		require.NoError(t, err)
		listed, err := json.Marshal(page)
		require.NoError(t, err)
		require.NotContains(t, string(listed), "ana@")
		require.NotContains(t, string(listed), "Silva")
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op := b.inState(t, "k1", opledger.StateFailed)
		require.Equal(t, opledger.FailureRejected, op.FailureKind)
		require.Equal(t, "422 invalid field", op.LastError)
		require.Equal(t, 1, op.AttemptCount)
	})

	t.Run("RetryableThenExhausted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h) // MaxAttempts 3
		_, _, err := b.ledger.Record(b.ctx, intent("k1"))
		require.NoError(t, err)
		var op *opledger.Operation
		for i := 1; i <= 3; i++ {
			c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
			require.NoError(t, err, "attempt %d", i)
			op = b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503 unavailable"})
			if i < 3 {
				require.Equal(t, opledger.StatePending, op.State)
				require.NotNil(t, op.NotBefore)
				require.False(t, op.NotBefore.After(op.UpdatedAt.Add(time.Duration(1<<(i-1))*time.Second)), "full jitter stays under the ceiling")
				b.clock.Advance(time.Minute)
			}
		}
		require.Equal(t, opledger.StateFailed, op.State)
		require.Equal(t, opledger.FailureExhausted, op.FailureKind)
		require.Equal(t, 3, op.AttemptCount)
		require.Equal(t, "503 unavailable", op.LastError)
		require.Equal(t, "ops", op.Owner)
	})

	t.Run("AbandonedAttemptsDoNotCount", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h) // MaxAttempts 3
		_, _, err := b.ledger.Record(b.ctx, intent("k1"))
		require.NoError(t, err)
		for range 2 { // two workers die before calling anything
			_, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
			require.NoError(t, err)
			b.clock.Advance(11 * time.Second)
			_, err = b.ledger.ExpireLeases(b.ctx)
			require.NoError(t, err)
		}
		for i := 1; i <= 3; i++ {
			c := b.claimDispatched(t, "k1")
			op := b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
			if i < 3 {
				require.Equal(t, opledger.StatePending, op.State, "call %d of 3", i)
				b.clock.Advance(time.Minute)
				continue
			}
			require.Equal(t, opledger.StateFailed, op.State)
			require.Equal(t, 5, op.AttemptCount, "every attempt is on record")
		}
	})

	t.Run("AbandonedAttemptReportsUncertainLate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		lost := b.abandoned(t, "k1") // never marked dispatched: pending, nothing sent
		b.requireState(t, "k1", opledger.StatePending)
		// Its worker says it may have called after all: the retry waits.
		_, err := b.ledger.Report(b.ctx, "k1", lost.AttemptID, lost.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		var stale *opledger.StaleError
		require.ErrorAs(t, err, &stale)
		require.True(t, stale.Recorded)
		op := b.requireState(t, "k1", opledger.StateUncertain)
		require.NotNil(t, op.UnresolvedSince)
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidState, "nothing is sent again before reconciliation")
	})

	// An attempt given up as never sent whose operation was revised
	// meanwhile reports that its call acted: version 2 is not approved
	// unseen on top of version 1's effect, the operation is held.
	t.Run("LateReportAfterRevision", func(t *testing.T) {
		t.Parallel()
		for _, outcome := range []opledger.Outcome{opledger.OutcomeSucceeded, opledger.OutcomeUncertain} {
			b := setup(t, h)
			lost := b.abandoned(t, "k1")
			_, _, err := b.ledger.Revise(b.ctx, "k1", opledger.Revision{Payload: json.RawMessage(`{"units":3}`), Version: 2})
			require.NoError(t, err)
			b.requireState(t, "k1", opledger.StateAwaitingApproval)
			_, err = b.ledger.Report(b.ctx, "k1", lost.AttemptID, lost.FencingToken, opledger.Report{Outcome: outcome, DestinationRef: "R-v1"})
			var stale *opledger.StaleError
			require.ErrorAs(t, err, &stale, outcome)
			require.True(t, stale.Recorded)
			op := b.requireState(t, "k1", opledger.StateHeld)
			require.NotNil(t, op.ReviewBy)
			require.Contains(t, b.events(t, "k1"), "late report on an earlier version")
			_, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lead"})
			require.ErrorIs(t, err, opledger.ErrInvalidState, "nothing is approved before a person looked")
		}
	})

	t.Run("AbandonedAttemptWithLateReportCounts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h) // MaxAttempts 3
		lost := b.abandoned(t, "k1")
		// Abandoned, yet its worker reports a call after all: the attempt
		// keeps its outcome, and counts towards the limit.
		_, err := b.ledger.Report(b.ctx, "k1", lost.AttemptID, lost.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		for i := 1; i <= 2; i++ {
			c := b.claimDispatched(t, "k1")
			op := b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
			if i < 2 {
				require.Equal(t, opledger.StatePending, op.State, "call %d of 3", i+1)
				b.clock.Advance(time.Minute)
				continue
			}
			require.Equal(t, opledger.StateFailed, op.State, "the third call")
			require.Equal(t, opledger.FailureExhausted, op.FailureKind)
		}
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, opledger.AttemptAbandoned, attempts[0].Outcome)
		require.Equal(t, "retryable", attempts[0].LateOutcome)
	})

	t.Run("Uncertain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op := b.inState(t, "k1", opledger.StateUncertain)
		require.Equal(t, opledger.StateUncertain, op.State)
		require.NotNil(t, op.UnresolvedSince)
		_, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidState, "uncertain is never claimed without reconciliation")
	})

	t.Run("BadOutcome", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		_, err := b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: "done"})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		_, err = b.ledger.Report(b.ctx, "k1", "01HUNKNOWNATTEMPT000000000", c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain})
		require.ErrorIs(t, err, opledger.ErrNotFound)
		b.requireState(t, "k1", opledger.StateInProgress)
	})
}

func testLease(t *testing.T, h Harness) {
	t.Run("NotDispatchedReturnsToPending", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.claimed(t, "k1")
		n, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n, "lease still running")
		b.clock.Advance(11 * time.Second)
		n, err = b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		op := b.requireState(t, "k1", opledger.StatePending)
		require.False(t, op.Dispatched)
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, opledger.AttemptAbandoned, attempts[0].Outcome)
		c2, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		require.Greater(t, c2.FencingToken, c.FencingToken)
	})

	t.Run("ExtendLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.claimed(t, "k1") // a lease of 10 s
		b.clock.Advance(8 * time.Second)
		op, err := b.ledger.ExtendLease(b.ctx, "k1", c.AttemptID, c.FencingToken, 10*time.Second)
		require.NoError(t, err)
		require.True(t, op.LeaseExpiresAt.After(c.LeaseExpiresAt), "%s", op.LeaseExpiresAt)
		_, err = b.ledger.ExtendLease(b.ctx, "k1", c.AttemptID, c.FencingToken, time.Second)
		require.NoError(t, err, "a shorter extension leaves the lease as it is")
		b.clock.Advance(8 * time.Second) // past the first lease, within the extended one
		n, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n, "the extended lease holds")
		_, err = b.ledger.Dispatch(b.ctx, "k1", c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, *op.LeaseExpiresAt, attempts[0].LeaseExpiresAt)
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		for _, e := range tl {
			require.NotContains(t, e.Event, "lease", "no timeline entry per extension")
		}

		_, err = b.ledger.ExtendLease(b.ctx, "k1", c.AttemptID, c.FencingToken+1, time.Minute)
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		_, err = b.ledger.ExtendLease(b.ctx, "k1", c.AttemptID, c.FencingToken, 0)
		require.ErrorIs(t, err, opledger.ErrInvalidInput)

		b.clock.Advance(3 * time.Second) // the extended lease has run out
		_, err = b.ledger.ExtendLease(b.ctx, "k1", c.AttemptID, c.FencingToken, time.Minute)
		var stale *opledger.StaleError
		require.ErrorAs(t, err, &stale, "too late: another worker may hold it")
		b.requireState(t, "k1", opledger.StateUncertain)
	})

	t.Run("SweepPagesAcrossTenants", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		other, err := b.ledger.WithTenant("other")
		require.NoError(t, err)
		const each = 230 // more than a page of the sweep (200) in all and in each tenant
		for i := range each {
			for _, l := range []*opledger.Ledger{b.ledger, other} {
				k := fmt.Sprintf("sweep:%03d", i)
				in := opledger.Intent{Key: k, Action: "crm.create", Destination: "crm"}
				_, err := l.Claim(b.ctx, k, opledger.ClaimOptions{Intent: &in, Lease: 10 * time.Second})
				require.NoError(t, err)
			}
		}
		b.clock.Advance(11 * time.Second)
		n, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 2*each, n, "every lease of both tenants, each once")
		for _, l := range []*opledger.Ledger{b.ledger, other} {
			for _, k := range []string{"sweep:000", "sweep:199", "sweep:200", fmt.Sprintf("sweep:%03d", each-1)} {
				op, err := l.Get(b.ctx, k)
				require.NoError(t, err)
				require.Equal(t, opledger.StatePending, op.State, k)
			}
		}
		n, err = b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("DispatchedBecomesUncertain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.dispatched(t, "k1")
		b.clock.Advance(11 * time.Second)
		n, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		op := b.requireState(t, "k1", opledger.StateUncertain)
		require.NotNil(t, op.UnresolvedSince)
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, opledger.AttemptLeaseExpired, attempts[0].Outcome)
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidState, "never back to pending")
	})

	t.Run("ClaimSettlesExpiredLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.claimed(t, "k1")
		b.dispatched(t, "k2")
		b.clock.Advance(11 * time.Second)
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err, "undispatched expired claim is reclaimable at once")
		require.EqualValues(t, 2, c.FencingToken)
		_, err = b.ledger.Claim(b.ctx, "k2", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidState)
		b.requireState(t, "k2", opledger.StateUncertain)
	})

	t.Run("DispatchAfterLeaseRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.claimed(t, "k1")
		b.clock.Advance(11 * time.Second)
		_, err := b.ledger.Dispatch(b.ctx, "k1", c.AttemptID, c.FencingToken)
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "too late to start the call")
		b.requireState(t, "k1", opledger.StatePending)
	})
}

func testFencing(t *testing.T, h Harness) {
	t.Run("StaleDispatchAndReport", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		old := b.claimed(t, "k1")
		b.clock.Advance(11 * time.Second)
		fresh, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Worker: "w2"})
		require.NoError(t, err)

		_, err = b.ledger.Dispatch(b.ctx, "k1", old.AttemptID, old.FencingToken)
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		_, err = b.ledger.Dispatch(b.ctx, "k1", fresh.AttemptID, old.FencingToken)
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "the right attempt with the wrong token")

		_, err = b.ledger.Report(b.ctx, "k1", old.AttemptID, old.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "late"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		var se *opledger.StaleError
		require.True(t, errors.As(err, &se))
		require.Equal(t, fresh.FencingToken, se.Current)
		op := b.requireState(t, "k1", opledger.StateInProgress)
		require.Equal(t, fresh.AttemptID, op.CurrentAttemptID)

		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.True(t, attempts[0].Stale, "kept as evidence")
		require.Equal(t, opledger.AttemptAbandoned, attempts[0].Outcome, "what the attempt ended with, when w2 claimed")
		require.Equal(t, "rejected", attempts[0].LateOutcome, "the report, beside it")
		require.Contains(t, b.events(t, "k1"), "stale report kept as evidence")

		_, err = b.ledger.Dispatch(b.ctx, "k1", fresh.AttemptID, fresh.FencingToken)
		require.NoError(t, err)
	})

	t.Run("ReportWithAnotherTokenRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.uncertain(t, "k1")
		before, err := b.ledger.Get(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, before.State)
		eventsBefore := b.events(t, "k1")
		// No claim ever issued token 0 or 99: a success claimed with them
		// is not the attempt's report, and must neither resolve the
		// operation nor be kept as its evidence.
		for _, token := range []int64{0, c.FencingToken + 98} {
			_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, token, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "FAKE"})
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "token %d", token)
			var se *opledger.StaleError
			require.True(t, errors.As(err, &se))
			require.False(t, se.Recorded, "token %d", token)
		}
		after, err := b.ledger.Get(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, before, after, "nothing written")
		require.Equal(t, eventsBefore, b.events(t, "k1"))
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Empty(t, attempts[0].DestinationRef)
		require.Empty(t, attempts[0].LateOutcome)

		// The attempt's own token is still heard.
		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42"})
		var se *opledger.StaleError
		require.True(t, errors.As(err, &se))
		require.True(t, se.Recorded)
		b.requireState(t, "k1", opledger.StateSucceeded)
	})

	// A retry authorized, then the first attempt's success arrives before
	// the retry is claimed: the operation is succeeded, and nothing is
	// sent again.
	t.Run("LateSuccessResolvesPending", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "CRM has no lookup"})
		require.NoError(t, err)
		b.requireState(t, "k1", opledger.StatePending)
		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op := b.requireState(t, "k1", opledger.StateSucceeded)
		require.Equal(t, "R1", op.DestinationRef)
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidState, "nothing left to claim")
	})

	// The first attempt's success arrives while a retry is running: it
	// cannot move the operation then, but the retry's own report must not
	// hide it. Whatever the retry answers, the operation ends succeeded
	// with the first effect's reference, and a second effect is counted.
	t.Run("LateSuccessWhileRetryRuns", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name       string
			report     opledger.Report
			duplicates int
		}{
			{"RetrySucceedsElsewhere", opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R2"}, 1},
			{"RetrySucceedsSameRecord", opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1", Response: json.RawMessage(`{"id":"R1"}`)}, 0},
			{"RetryRetryable", opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"}, 0},
			{"RetryRejected", opledger.Report{Outcome: opledger.OutcomeRejected, Error: "409 already exists"}, 0},
			{"RetryUncertain", opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"}, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, h)
				first := b.retryAuthorized(t, "k1")
				retry := b.claimDispatched(t, "k1")
				_, err := b.ledger.Report(b.ctx, "k1", first.AttemptID, first.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
					DestinationRef: "R1", Response: json.RawMessage(`{"id":"R1"}`)})
				require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
				b.requireState(t, "k1", opledger.StateInProgress)

				_, err = b.ledger.Report(b.ctx, "k1", retry.AttemptID, retry.FencingToken, tc.report)
				require.NoError(t, err)
				op := b.requireState(t, "k1", opledger.StateSucceeded)
				require.Equal(t, "R1", op.DestinationRef, "the effect confirmed first stays the result")
				require.JSONEq(t, `{"id":"R1"}`, string(op.Response))
				require.Equal(t, tc.duplicates, op.DuplicateEffects)
				events := b.events(t, "k1")
				if tc.report.DestinationRef != "R1" {
					require.Contains(t, events, "late success resolved")
				}
				if tc.duplicates > 0 {
					require.Contains(t, events, "duplicate effect")
				}
				attempts, err := b.ledger.Attempts(b.ctx, "k1")
				require.NoError(t, err)
				require.Len(t, attempts, 2)
				require.Equal(t, string(tc.report.Outcome), attempts[1].Outcome, "the retry keeps its own answer")
			})
		}
	})

	// The same late success, before the retry was dispatched: the call
	// must not start, and a lost worker or a claim given back must not
	// send the operation again either.
	t.Run("LateSuccessBeforeRetryDispatched", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name    string
			settle  func(b *bundle, retry *opledger.Claim) error
			outcome string
		}{
			{"Dispatch", func(b *bundle, retry *opledger.Claim) error {
				_, err := b.ledger.Dispatch(b.ctx, "k1", retry.AttemptID, retry.FencingToken)
				if !errors.Is(err, opledger.ErrAlreadySucceeded) {
					return fmt.Errorf("dispatch: want ErrAlreadySucceeded, got %v", err)
				}
				return nil
			}, opledger.AttemptAbandoned},
			{"Release", func(b *bundle, retry *opledger.Claim) error {
				_, err := b.ledger.Release(b.ctx, "k1", retry.AttemptID, retry.FencingToken, "shutting down")
				return err
			}, opledger.AttemptAbandoned},
			{"LeaseExpires", func(b *bundle, _ *opledger.Claim) error {
				b.clock.Advance(time.Hour)
				_, err := b.ledger.ExpireLeases(b.ctx)
				return err
			}, opledger.AttemptAbandoned},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, h)
				first := b.retryAuthorized(t, "k1")
				retry, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
				require.NoError(t, err)
				_, err = b.ledger.Report(b.ctx, "k1", first.AttemptID, first.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
					DestinationRef: "R1", Response: json.RawMessage(`{"id":"R1"}`)})
				require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
				// A second late success elsewhere is a second effect.
				_, err = b.ledger.Report(b.ctx, "k1", first.AttemptID, first.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
					DestinationRef: "R9"})
				require.ErrorIs(t, err, opledger.ErrStaleFencingToken)

				require.NoError(t, tc.settle(b, retry))
				op := b.requireState(t, "k1", opledger.StateSucceeded)
				require.Equal(t, "R1", op.DestinationRef)
				require.JSONEq(t, `{"id":"R1"}`, string(op.Response))
				require.Equal(t, 1, op.DuplicateEffects, "R9")
				require.Contains(t, b.events(t, "k1"), "late success resolved")
				attempts, err := b.ledger.Attempts(b.ctx, "k1")
				require.NoError(t, err)
				require.Len(t, attempts, 2)
				require.Equal(t, tc.outcome, attempts[1].Outcome)
				require.Nil(t, attempts[1].DispatchedAt, "the retry was never sent")
				_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
				require.ErrorIs(t, err, opledger.ErrAlreadySucceeded, "nothing left to send")
			})
		}
	})

	// A worker whose report committed but whose answer was lost reports
	// again: nothing more is recorded, and it gets the operation.
	t.Run("RepeatedReport", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		r := opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"}
		b.report(t, "k1", c, r)
		before := b.events(t, "k1")
		op, err := b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, r)
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, before, b.events(t, "k1"), "nothing recorded twice")
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.False(t, attempts[0].Stale)
		require.Empty(t, attempts[0].LateOutcome)
		// Another report of the same attempt is a late report, as before.
		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R2"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
	})

	// A late success sent again (its answer was lost) counts its
	// duplicate effect once: the second copy records nothing and gets the
	// same answer as the first.
	t.Run("RepeatedLateSuccess", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.uncertain(t, "k1")
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "R1", Reason: "found it"})
		require.NoError(t, err)
		late := opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R2"}
		var first, again *opledger.StaleError
		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, late)
		require.ErrorAs(t, err, &first)
		require.True(t, first.Recorded)
		before := b.events(t, "k1")
		for range 2 {
			_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, late)
			require.ErrorAs(t, err, &again)
			require.True(t, again.Recorded)
			require.Equal(t, 1, again.Operation.DuplicateEffects)
		}
		require.Equal(t, before, b.events(t, "k1"), "nothing recorded twice")
		st, err := b.ledger.Stats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, 1, st.DuplicateEffects)
		// A late report that says something else is still kept.
		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R3"})
		require.ErrorAs(t, err, &again)
		require.Len(t, b.events(t, "k1"), len(before)+1)
	})

	t.Run("LateSuccessResolvesUncertain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.uncertain(t, "k1")
		_, err := b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op := b.requireState(t, "k1", opledger.StateSucceeded)
		require.Equal(t, "H42", op.DestinationRef)
		require.Contains(t, b.events(t, "k1"), "late success resolved")

		// The attempt keeps the outcome it ended with, so that no count of
		// attempts by outcome goes down; the late report stands beside it.
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Equal(t, opledger.AttemptLeaseExpired, attempts[0].Outcome)
		require.Equal(t, "succeeded", attempts[0].LateOutcome)
		require.True(t, attempts[0].Stale)
		require.Equal(t, "H42", attempts[0].DestinationRef)
		st, err := b.ledger.Stats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, []opledger.AttemptCount{{Destination: intent("k1").Destination, Outcome: opledger.AttemptLeaseExpired, Count: 1}}, st.Attempts)
	})

	t.Run("LateReportKeepsWhatTheAttemptEndedWith", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		// The worker learns later that the call went through.
		_, err := b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken,
			opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42", Response: json.RawMessage(`{"id":"H42"}`)})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op := b.requireState(t, "k1", opledger.StateSucceeded)
		require.Equal(t, "H42", op.DestinationRef)
		// And then, wrongly, that it failed.
		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken,
			opledger.Report{Outcome: opledger.OutcomeRejected, Error: "400 after all"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		b.requireState(t, "k1", opledger.StateSucceeded)

		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		a := attempts[0]
		require.Equal(t, string(opledger.OutcomeUncertain), a.Outcome, "what the attempt ended with")
		require.Equal(t, "timeout", a.Error, "the attempt's own error still explains its ending")
		require.Equal(t, "H42", a.DestinationRef, "filled by the late report: the attempt had none")
		require.Equal(t, string(opledger.OutcomeRejected), a.LateOutcome, "the latest late report")
		require.Contains(t, b.events(t, "k1"), "late success resolved")
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		last := tl[len(tl)-1]
		require.Equal(t, "stale report kept as evidence", last.Event)
		require.Contains(t, last.Evidence, "error 400 after all", "the timeline keeps what the attempt row does not")
	})

	t.Run("LateSuccessResolvesHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		_, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{})
		require.NoError(t, err)
		b.requireState(t, "k1", opledger.StateHeld)
		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op := b.requireState(t, "k1", opledger.StateSucceeded)
		require.Nil(t, op.ReviewBy)
	})

	// An operator cancelled the uncertain operation, and then the attempt
	// reports that the destination acted: the effect exists, so the
	// operation is succeeded, not failed (a failed one invites doing it
	// again by hand), and the confirmed effect is counted.
	t.Run("LateSuccessResolvesCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "customer withdrew", Operator: "ana"})
		require.NoError(t, err)
		op := b.requireState(t, "k1", opledger.StateFailed)
		require.Equal(t, opledger.FailureCancelled, op.FailureKind)

		_, err = b.ledger.Report(b.ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op = b.requireState(t, "k1", opledger.StateSucceeded)
		require.Equal(t, "H42", op.DestinationRef)
		require.Empty(t, op.FailureKind)
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		last := tl[len(tl)-1]
		require.Equal(t, "late success resolved", last.Event)
		require.Equal(t, opledger.StateFailed, last.From)
		require.Contains(t, last.Evidence, "had failed (cancelled), but the destination acted")
		st, err := b.ledger.Stats(b.ctx, false)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.ConfirmedEffects)
	})

	// One effect at the destination is counted once, however often its
	// report comes: an attempt whose lease expired sends two late
	// successes with refs other than the one an operator confirmed, and
	// sends each again (its answers lost). Two duplicate effects, not
	// five; each resend is noted, not counted.
	// The same, with references that hold the value of a sensitive field
	// (a Message-ID holds its recipient): the evidence is stored masked,
	// and the second report of a counted effect is still recognised.
	t.Run("DuplicateEffectWithSensitiveRefCountedOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := opledger.Intent{Key: "k3", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"ana@example.invalid"}`),
			SensitiveFields: []string{"to"}}
		var stale []*opledger.Claim
		for range 2 {
			c, err := b.ledger.Claim(b.ctx, "k3", opledger.ClaimOptions{Intent: &in, Dispatch: true})
			require.NoError(t, err)
			b.clock.Advance(11 * time.Second)
			_, err = b.ledger.ExpireLeases(b.ctx)
			require.NoError(t, err)
			_, _, err = b.ledger.Resolve(b.ctx, "k3", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "checked"})
			require.NoError(t, err)
			stale = append(stale, c)
		}
		c := b.claimDispatched(t, "k3")
		b.report(t, "k3", c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "<m1.ana@example.invalid>"})
		for _, c := range stale { // both name the same second message
			_, err := b.ledger.Report(b.ctx, "k3", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "<m2.ana@example.invalid>"})
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		}
		op := b.requireState(t, "k3", opledger.StateSucceeded)
		require.Equal(t, 1, op.DuplicateEffects, "one second message")
		require.Contains(t, b.events(t, "k3"), "duplicate effect reported again")
	})

	t.Run("DuplicateEffectCountedOncePerRef", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		old := b.uncertain(t, "k1")
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "A-1", Reason: "found it in the CRM"})
		require.NoError(t, err)
		for _, ref := range []string{"B-2", "B-2", "C-1", "C-1", "C-1"} {
			_, err = b.ledger.Report(b.ctx, "k1", old.AttemptID, old.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: ref})
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken, ref)
		}
		op := b.requireState(t, "k1", opledger.StateSucceeded)
		require.Equal(t, "A-1", op.DestinationRef, "the confirmed ref stays")
		require.Equal(t, 2, op.DuplicateEffects, "B-2 and C-1, once each")
		st, err := b.ledger.Stats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, 2, st.DuplicateEffects)
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		var counted, again []string
		for _, e := range tl {
			switch e.Event {
			case "duplicate effect":
				counted = append(counted, e.Evidence)
			case "duplicate effect reported again":
				again = append(again, e.Evidence)
			}
		}
		require.Len(t, counted, 2)
		require.True(t, strings.HasSuffix(counted[0], "destination ref B-2 differs from confirmed ref A-1"), counted[0])
		require.True(t, strings.HasSuffix(counted[1], "destination ref C-1 differs from confirmed ref A-1"), counted[1])
		require.Len(t, again, 2, "the B-2 report repeated is the attempt's kept report: answered, not noted; the C-1 ones are noted")
	})

	t.Run("DifferentRefIsDuplicateEffect", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		old := b.uncertain(t, "k1")
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "checked CRM, nothing there"})
		require.NoError(t, err)
		fresh, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		b.report(t, "k1", fresh, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H43"})

		// The first attempt's effect shows up after all.
		_, err = b.ledger.Report(b.ctx, "k1", old.AttemptID, old.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op := b.requireState(t, "k1", opledger.StateSucceeded)
		require.Equal(t, "H43", op.DestinationRef, "the confirmed ref stays")
		require.Equal(t, 1, op.DuplicateEffects)
		require.Contains(t, b.events(t, "k1"), "duplicate effect")

		// The same ref again is no incident: the report that ended the
		// attempt, repeated, records nothing.
		_, err = b.ledger.Report(b.ctx, "k1", fresh.AttemptID, fresh.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H43"})
		require.NoError(t, err)
		op = b.requireState(t, "k1", opledger.StateSucceeded)
		require.Equal(t, 1, op.DuplicateEffects)

		// Stats counts it, for the tenant and across tenants; another
		// tenant's ledger sees none.
		for _, all := range []bool{false, true} {
			st, err := b.ledger.Stats(b.ctx, all)
			require.NoError(t, err)
			require.Equal(t, 1, st.DuplicateEffects, "all tenants: %v", all)
		}
		other, err := b.ledger.WithTenant("other")
		require.NoError(t, err)
		st, err := other.Stats(b.ctx, false)
		require.NoError(t, err)
		require.Zero(t, st.DuplicateEffects)

		// The list of operations with duplicate effects has k1 alone.
		b.inState(t, "k2", opledger.StateSucceeded)
		for _, o := range []opledger.ListOptions{{DuplicateEffects: true}, {DuplicateEffects: true, Limit: 1},
			{DuplicateEffects: true, States: []opledger.State{opledger.StateSucceeded}}} {
			page, err := b.ledger.List(b.ctx, o)
			require.NoError(t, err)
			require.Len(t, page.Items, 1, "%+v", o)
			require.Equal(t, "k1", page.Items[0].Key)
			require.Empty(t, page.NextCursor)
		}
		for _, o := range []opledger.ListOptions{{DuplicateEffects: true, States: []opledger.State{opledger.StateFailed}},
			{DuplicateEffects: true, Order: opledger.OrderReview}} {
			page, err := b.ledger.List(b.ctx, o)
			require.NoError(t, err)
			require.Empty(t, page.Items, "%+v", o)
		}
		page, err := other.List(b.ctx, opledger.ListOptions{DuplicateEffects: true})
		require.NoError(t, err)
		require.Empty(t, page.Items, "another tenant's")
		all, err := b.ledger.List(b.ctx, opledger.ListOptions{})
		require.NoError(t, err)
		require.Len(t, all.Items, 2, "without the filter")

		// Compaction keeps the count, and so does forgetting the
		// tombstone.
		for _, wait := range []time.Duration{opledger.DefaultRetention, opledger.DefaultTombstoneRetention} {
			b.clock.Advance(wait + time.Hour)
			res, err := b.ledger.Compact(b.ctx)
			require.NoError(t, err)
			require.Equal(t, 2, res.Tombstoned+res.Forgotten, "after %v: k1 and k2", wait)
			for _, all := range []bool{false, true} {
				st, err := b.ledger.Stats(b.ctx, all)
				require.NoError(t, err)
				require.Equal(t, 1, st.DuplicateEffects, "after %v, all tenants: %v", wait, all)
				require.Equal(t, 2, st.ConfirmedEffects, "after %v, all tenants: %v", wait, all)
			}
		}
	})
}

// retryAuthorized records key, dispatches its first attempt, reports it
// uncertain and has an operator authorize a retry: the operation is
// pending again, and the first attempt's claim is returned (its late
// report is what the tests send).
func (b *bundle) retryAuthorized(t *testing.T, key string) *opledger.Claim {
	t.Helper()
	first := b.dispatched(t, key)
	b.report(t, key, first, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	_, _, err := b.ledger.Resolve(b.ctx, key, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "CRM has no lookup"})
	require.NoError(t, err)
	return first
}

package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/marker"
)

func testReconcile(t *testing.T, h Harness) {
	cases := []struct {
		name    string
		finding opledger.Finding
		advance time.Duration
		want    opledger.State
		event   string
	}{
		{"FoundMatching", opledger.Finding{Found: true, Matches: true, DestinationRef: "H42"}, 0, opledger.StateSucceeded, "lookup found the effect"},
		{"FoundOther", opledger.Finding{Found: true, DestinationRef: "H99"}, 0, opledger.StateHeld, "lookup found other content"},
		{"AbsentWithinDelay", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute}, 0, opledger.StateUncertain, "lookup empty within visibility delay"},
		{"AbsentAfterDelay", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute}, 2 * time.Minute, opledger.StatePending, "lookup proved absence"},
		{"ProtectedInsideRetention", opledger.Finding{ProtectionRetention: 24 * time.Hour}, time.Hour, opledger.StatePending, "protected retry"},
		{"ProtectionExpired", opledger.Finding{ProtectionRetention: 24 * time.Hour}, 25 * time.Hour, opledger.StateHeld, "protection expired"},
		{"NonAuthoritativeAbsent", opledger.Finding{}, 0, opledger.StateHeld, "cannot be decided automatically"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			b.inState(t, "k1", opledger.StateUncertain)
			b.clock.Advance(tc.advance)
			op, _, err := b.ledger.Reconcile(b.ctx, "k1", tc.finding)
			require.NoError(t, err)
			require.Equal(t, tc.want, op.State)
			require.Contains(t, b.events(t, "k1"), tc.event)
			switch tc.want {
			case opledger.StateSucceeded:
				require.Equal(t, "H42", op.DestinationRef)
				require.Nil(t, op.UnresolvedSince)
			case opledger.StateHeld:
				require.NotNil(t, op.ReviewBy)
				require.Equal(t, "ops", op.Owner)
				require.NotNil(t, op.UnresolvedSince)
			case opledger.StatePending:
				c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
				require.NoError(t, err)
				require.Equal(t, tc.name == "ProtectedInsideRetention", c.Protected)
				attempts, err := b.ledger.Attempts(b.ctx, "k1")
				require.NoError(t, err)
				require.Equal(t, c.Protected, attempts[1].Protected, "recorded as protected")
			}
		})
	}

	t.Run("StaleFindingRefused", func(t *testing.T) {
		// A lookup made for attempt 1 says nothing about attempt 2, sent
		// while it ran: its "absent" must not release a third send.
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateUncertain)
		before, err := b.ledger.Get(b.ctx, "k1")
		require.NoError(t, err)
		b.clock.Advance(2 * time.Minute)
		_, _, err = b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{ProtectionRetention: time.Hour, AttemptCount: before.AttemptCount})
		require.NoError(t, err) // protected retry: pending
		c := b.claimDispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		b.clock.Advance(2 * time.Minute)

		_, _, err = b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute,
			AttemptCount: before.AttemptCount})
		require.ErrorIs(t, err, opledger.ErrStaleFinding)
		require.ErrorContains(t, err, "lookup made after attempt 1, the operation is at attempt 2")
		op, err := b.ledger.Get(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "nothing recorded")
		require.Equal(t, 2, op.AttemptCount)
		op, _, err = b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute, AttemptCount: 2})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State, "a lookup made for attempt 2 decides")
	})
	t.Run("LongEvidenceIsCut", func(t *testing.T) {
		// A lookup's evidence over the limit is cut, as a report's error
		// is, not refused (the reconciler would count it a failed lookup).
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateUncertain)
		op, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Found: true, Matches: true, DestinationRef: "H1",
			Evidence: strings.Repeat("é", 300_000)})
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		last := tl[len(tl)-1].Evidence
		require.Less(t, len(last), 300_000)
		require.True(t, utf8.ValidString(last), "cut between characters")
	})
	t.Run("AbsenceJudgedWhenLookupBegan", func(t *testing.T) {
		// A slow lookup begun within the visibility delay proves nothing,
		// even if it ends after the delay.
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateUncertain)
		began, err := b.ledger.Now(b.ctx)
		require.NoError(t, err)
		b.clock.Advance(2 * time.Minute) // the lookup took that long
		op, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute, LookedAt: began})
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "looked within the delay: no resend")
		require.Contains(t, b.events(t, "k1"), "lookup empty within visibility delay")
		op, _, err = b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute, LookedAt: began.Add(2 * time.Minute)})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State, "looked after the delay")
	})
	t.Run("VisibilityFromLatestDispatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
		b.clock.Advance(time.Hour) // the first call was long ago
		c = b.claimDispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		op, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute})
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "the latest call may still be invisible: no resend")
		require.NotNil(t, op.NotBefore)
		queue, err := b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10})
		require.NoError(t, err)
		require.Empty(t, queue, "next check when the delay ends")
		b.clock.Advance(2 * time.Minute)
		queue, err = b.ledger.ReconcileQueue(b.ctx, opledger.ReconcileQueueOptions{Limit: 10})
		require.NoError(t, err)
		require.Len(t, queue, 1)
		op, _, err = b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State)
	})

	// A call that ran long before its caller gave up: the destination may
	// still be working on it, so absence counts from the call's end, not
	// from its dispatch (counted from the dispatch, a lookup right after
	// the timeout found nothing and released a second send while the
	// first was still being made). The same for a lease that ran out.
	t.Run("VisibilityFromCallEnd", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		b.clock.Advance(9 * time.Second) // the call timed out after 9 s
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		b.clock.Advance(2 * time.Second) // 11 s after the dispatch, 2 s after the end
		f := opledger.Finding{Authoritative: true, VisibilityDelay: 5 * time.Second}
		op, _, err := b.ledger.Reconcile(b.ctx, "k1", f)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "5 s after the dispatch but 2 s after the call ended: no resend")
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		end := opledger.LastCallEnd(op, attempts)
		require.Equal(t, *attempts[0].FinishedAt, end)
		require.WithinDuration(t, end.Add(5*time.Second), *op.NotBefore, time.Millisecond, "next check when the delay after the end has passed")
		b.clock.Advance(4 * time.Second)
		op, _, err = b.ledger.Reconcile(b.ctx, "k1", f)
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State, "5 s after the call ended")

		b.uncertain(t, "k2") // the lease (10 s) ran out; the sweep found it 1 s later
		b.clock.Advance(4 * time.Second)
		op, _, err = b.ledger.Reconcile(b.ctx, "k2", f)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State, "15 s after the dispatch, 4 s after the lease was found expired")
	})

	// An attempt reported uncertain without a dispatch mark (its worker
	// skipped it) may have called from its claim on: the key's window and
	// the visibility delay count from there, never from a time that moves
	// with every note the reconciler adds (they slid along, and a
	// protected retry went out hours after the key was forgotten).
	t.Run("UncertainWithoutDispatchMark", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		b.clock.Advance(3 * time.Second)
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		for range 9 { // lookups fail for 3 h, deferred every 20 min
			b.clock.Advance(20 * time.Minute)
			_, err = b.ledger.DeferReconcile(b.ctx, "k1", 20*time.Minute, "lookup failed: 503")
			require.NoError(t, err)
		}
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		op, err := b.ledger.Get(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, *attempts[0].FinishedAt, opledger.LastCallEnd(op, attempts), "the call ended when it was reported")
		b.clock.Advance(20 * time.Minute)
		op, _, err = b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{ProtectionRetention: time.Hour})
		require.NoError(t, err)
		require.Equal(t, opledger.StateHeld, op.State, "3 h 20 min after the claim, a 1 h key is forgotten")
		require.Contains(t, b.events(t, "k1"), "protection expired")

	})

	// The same key used again: a protected retry dispatched an hour after
	// the unmarked call does not move the window's start, which is the
	// first use of the key.
	t.Run("WindowFromUnmarkedCallAfterRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		f := opledger.Finding{ProtectionRetention: 2 * time.Hour}
		b.clock.Advance(10 * time.Minute)
		op, _, err := b.ledger.Reconcile(b.ctx, "k1", f)
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State, "a protected retry")
		b.clock.Advance(50 * time.Minute)
		c = b.claimDispatched(t, "k1")
		require.True(t, c.Protected)
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout again"})
		b.clock.Advance(90 * time.Minute) // 2 h 30 after the first use
		op, _, err = b.ledger.Reconcile(b.ctx, "k1", f)
		require.NoError(t, err)
		require.Equal(t, opledger.StateHeld, op.State, "the 2 h key, first used 2 h 30 ago, may be forgotten")
	})

	// A protected retry whose outcome was lost again, then proven absent
	// after its protection ended: the retry is a plain one, claimed, not
	// held for the protection that no longer matters.
	t.Run("AbsenceEndsProtection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateUncertain)
		_, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{ProtectionRetention: 10 * time.Minute})
		require.NoError(t, err)
		c := b.claimDispatched(t, "k1")
		require.True(t, c.Protected)
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout again"})
		b.clock.Advance(20 * time.Minute)
		op, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: time.Minute})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State)
		require.False(t, op.Protected)
		require.Nil(t, op.ProtectedUntil)
		c, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err, "not held: the protection ended with the proof of absence")
		require.False(t, c.Protected)
	})

	// Retries the reconciler releases are the destination's attempts too:
	// past its policy's attempt limit a protected retry is held (an earlier
	// attempt may have taken effect) and a proven absence fails the
	// operation as exhausted, instead of trying for as long as lookups or
	// the key's retention allow.
	t.Run("RetryPolicyBoundsReconciledRetries", func(t *testing.T) {
		t.Parallel()
		policy := func(o *opledger.Options) {
			o.RetryPolicy = &opledger.RetryPolicy{MaxAttempts: 2, InitialDelay: time.Second, MaxDelay: time.Minute}
		}
		for _, tc := range []struct {
			finding opledger.Finding
			want    opledger.State
			event   string
		}{
			{opledger.Finding{ProtectionRetention: time.Hour}, opledger.StateHeld, "exhausted while uncertain"},
			{opledger.Finding{Authoritative: true}, opledger.StateFailed, "exhausted"},
		} {
			b := setup(t, h, policy)
			b.inState(t, "k1", opledger.StateUncertain)
			op, _, err := b.ledger.Reconcile(b.ctx, "k1", tc.finding)
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State, "the first retry is within the policy")
			c := b.claimDispatched(t, "k1")
			b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout again"})
			op, _, err = b.ledger.Reconcile(b.ctx, "k1", tc.finding)
			require.NoError(t, err)
			require.Equal(t, tc.want, op.State, "two attempts made: no third")
			require.Contains(t, b.events(t, "k1"), tc.event)
		}
	})

	// A protected retry dispatched in time is its attempt's: when its
	// protection ends during the call, another caller's claim is refused
	// and moves nothing.
	t.Run("ProtectionEndsDuringCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateUncertain)
		_, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{ProtectionRetention: 10 * time.Minute})
		require.NoError(t, err)
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{Lease: time.Hour, Dispatch: true})
		require.NoError(t, err)
		require.True(t, c.Protected)
		b.clock.Advance(11 * time.Minute)
		in := intent("k1")
		for _, opts := range []opledger.ClaimOptions{{}, {Intent: &in}} {
			_, err = b.ledger.Claim(b.ctx, "k1", opts)
			require.ErrorIs(t, err, opledger.ErrInProgress)
		}
		op := b.requireState(t, "k1", opledger.StateInProgress)
		require.Equal(t, c.AttemptID, op.CurrentAttemptID)
		require.NotContains(t, b.events(t, "k1"), "protection expired")
		op = b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "H7"})
		require.Equal(t, opledger.StateSucceeded, op.State)
	})

	// A failed lookup is a deferral whose reason starts with the
	// reconciler's marker; a deferral whose free text merely mentions the
	// phrase (a lookup's own evidence, an operator tool's note) is no
	// failed lookup, and must not bring the hold closer.
	t.Run("LookupFailuresCountTheMarkerOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.uncertain(t, "k1")
		failures := func() int {
			t.Helper()
			n, err := b.ledger.LookupFailures(b.ctx, "k1")
			require.NoError(t, err)
			return n
		}
		for _, why := range []string{
			"CRM search: 0 records (its log says: lookup failed: index rebuilding)",
			"nothing found; " + marker.LookupFailed + "said the lookup's evidence",
			" " + marker.LookupFailed + "503",
		} {
			_, err := b.ledger.DeferReconcile(b.ctx, "k1", time.Minute, why)
			require.NoError(t, err)
		}
		require.Zero(t, failures(), "no deferral starts with the marker")
		_, err := b.ledger.DeferReconcile(b.ctx, "k1", time.Minute, marker.LookupFailed+"503 (failure 1 of 8)")
		require.NoError(t, err)
		require.Equal(t, 1, failures())
		_, err = b.ledger.DeferReconcile(b.ctx, "k1", time.Minute, "x; "+marker.LookupFailed+"503")
		require.NoError(t, err)
		require.Equal(t, 1, failures(), "the marker after another reason's text")
	})

	t.Run("OnlyUncertain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StatePending)
		_, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Found: true, Matches: true, DestinationRef: "x"})
		require.ErrorIs(t, err, opledger.ErrInvalidState)
		_, _, err = b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{Found: true, Matches: true})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "a match needs its ref")
	})
}

func testResolve(t *testing.T, h Harness) {
	t.Run("ReasonRequired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateHeld)
		for _, kind := range []opledger.DecisionKind{opledger.DecisionMarkSucceeded, opledger.DecisionAuthorizeRetry, opledger.DecisionCancel} {
			_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: kind, DestinationRef: "H1", Reason: "  "})
			require.ErrorIs(t, err, opledger.ErrReasonRequired, kind)
		}
		_, err := b.ledger.Hold(b.ctx, "k1", " \t ")
		require.ErrorIs(t, err, opledger.ErrReasonRequired, "a hold's reason is not blank either")
		_, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, Reason: "found it"})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "mark succeeded needs the ref")
		_, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: " \t ", Reason: "found it"})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "a blank ref names nothing")
		_, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: "shrug", Reason: "x"})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		b.requireState(t, "k1", opledger.StateHeld)
	})

	t.Run("MarkSucceeded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateHeld)
		b.clock.Advance(90 * time.Second)
		op, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "H42", Reason: "found H42 in the CRM", Operator: "maria"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "H42", op.DestinationRef)
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		last := tl[len(tl)-1]
		require.Equal(t, "maria", last.Actor)
		require.Contains(t, last.Evidence, "found H42 in the CRM")
		require.Contains(t, last.Evidence, "recovery time 1m30s")
	})

	t.Run("AuthorizeRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateFailed)
		op, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "field fixed at the CRM"})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State)
		require.Empty(t, op.FailureKind)
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateAwaitingApproval)
		// A reference only mark_succeeded keeps is refused, not dropped.
		for _, kind := range []opledger.DecisionKind{opledger.DecisionCancel, opledger.DecisionAuthorizeRetry} {
			_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: kind, Reason: "r", DestinationRef: "CRM-1"})
			require.ErrorIs(t, err, opledger.ErrInvalidInput, kind)
			require.ErrorContains(t, err, "takes no destination_ref", kind)
		}
		op, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "customer withdrew"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateFailed, op.State)
		require.Equal(t, opledger.FailureCancelled, op.FailureKind)
	})

	// A retry authorized after cancelling content nobody approved does
	// not approve it: the operation waits for approval of that version
	// again, and no worker can claim it before.
	t.Run("RetryOfUnapprovedWaitsForApproval", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		recorded := b.inState(t, "k1", opledger.StateAwaitingApproval)
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not now"})
		require.NoError(t, err)
		op, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "now after all"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateAwaitingApproval, op.State)
		require.Empty(t, op.FailureKind)
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidState)
		op, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: recorded.Version, Fingerprint: recorded.Fingerprint, Approver: "lead"})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State)
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)

		// Content approved before it was cancelled stays approved.
		b.inState(t, "k2", opledger.StateAwaitingApproval)
		_, _, err = b.ledger.Approve(b.ctx, "k2", opledger.Approval{Version: recorded.Version, Fingerprint: recorded.Fingerprint, Approver: "lead"})
		require.NoError(t, err)
		_, _, err = b.ledger.Resolve(b.ctx, "k2", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not now"})
		require.NoError(t, err)
		op, _, err = b.ledger.Resolve(b.ctx, "k2", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "now after all"})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State)
	})

	// A cancelled operation has no protected next attempt: only an
	// authorized retry leads to another one, and it starts unprotected.
	t.Run("CancelEndsProtection", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateUncertain)
		op, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{ProtectionRetention: time.Hour})
		require.NoError(t, err)
		require.True(t, op.Protected)
		op, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "customer withdrew"})
		require.NoError(t, err)
		require.False(t, op.Protected)
		require.Nil(t, op.ProtectedUntil)
	})

	// A decision made on the operation as it was seen is refused once it
	// has changed since: another operator's decision is not overturned by
	// a page left open.
	t.Run("SeenUpdatedAt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		seen := b.inState(t, "k1", opledger.StateHeld)
		b.clock.Advance(time.Second)
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "customer withdrew",
			Operator: "ana", SeenUpdatedAt: seen.UpdatedAt})
		require.NoError(t, err)
		before := b.events(t, "k1")
		_, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "try again",
			Operator: "ben", SeenUpdatedAt: seen.UpdatedAt})
		require.ErrorIs(t, err, opledger.ErrStaleDecision)
		require.ErrorContains(t, err, "it is failed")
		require.Equal(t, before, b.events(t, "k1"), "nothing recorded")
		now := b.requireState(t, "k1", opledger.StateFailed)
		// Seen as it is now, the decision is taken.
		op, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "try again",
			Operator: "ben", SeenUpdatedAt: now.UpdatedAt})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State)
	})

	// An approval made on the operation as it was seen is refused once it
	// has changed since, though it awaits approval of the same content
	// again (cancelled before anyone approved it, then given a retry); the
	// same approval sent again after it was recorded is still a replay.
	t.Run("ApprovalSeenUpdatedAt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		seen := b.inState(t, "k1", opledger.StateAwaitingApproval)
		b.clock.Advance(time.Second)
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not now", Operator: "ana"})
		require.NoError(t, err)
		b.clock.Advance(time.Second)
		again, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "now", Operator: "ana"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateAwaitingApproval, again.State)
		require.Equal(t, seen.Fingerprint, again.Fingerprint)
		before := b.events(t, "k1")
		approval := opledger.Approval{Version: seen.Version, Fingerprint: seen.Fingerprint, Approver: "ben", SeenUpdatedAt: seen.UpdatedAt}
		_, _, err = b.ledger.Approve(b.ctx, "k1", approval)
		require.ErrorIs(t, err, opledger.ErrStaleDecision)
		require.Equal(t, opledger.StateAwaitingApproval, opledger.OperationOf(err).State, "the refusal carries the operation as it is")
		require.Equal(t, before, b.events(t, "k1"), "nothing recorded")
		b.requireState(t, "k1", opledger.StateAwaitingApproval)

		approval.SeenUpdatedAt = again.UpdatedAt
		op, replayed, err := b.ledger.Approve(b.ctx, "k1", approval)
		require.NoError(t, err)
		require.False(t, replayed)
		require.Equal(t, opledger.StatePending, op.State)
		_, replayed, err = b.ledger.Approve(b.ctx, "k1", approval)
		require.NoError(t, err, "the same approval again (its answer lost) is a replay")
		require.True(t, replayed)
	})

	// A decision sent again after its answer was lost is answered as a
	// replay while nothing has moved the operation since: nothing is
	// recorded, and the caller can tell it from a refusal.
	t.Run("RepeatIsReplayed", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name  string
			from  opledger.State
			d     opledger.Decision
			want  opledger.State
			intro func(b *bundle, key string) // before the decision, if any
		}{
			{"MarkSucceeded", opledger.StateHeld, opledger.Decision{Kind: opledger.DecisionMarkSucceeded,
				DestinationRef: "H42", Reason: "found H42 in the CRM", Operator: "maria"}, opledger.StateSucceeded, nil},
			{"AuthorizeRetry", opledger.StateFailed, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry,
				Reason: "field fixed at the CRM", Operator: "maria"}, opledger.StatePending, nil},
			{"Cancel", opledger.StatePending, opledger.Decision{Kind: opledger.DecisionCancel,
				Reason: "customer withdrew", Operator: "maria"}, opledger.StateFailed, nil},
			{"RetryAwaitingApproval", opledger.StateAwaitingApproval, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry,
				Reason: "now after all"}, opledger.StateAwaitingApproval, func(b *bundle, key string) {
				_, _, err := b.ledger.Resolve(b.ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not now"})
				require.NoError(t, err)
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, h)
				seen := b.inState(t, "k1", tc.from)
				if tc.intro != nil {
					tc.intro(b, "k1")
					seen = b.requireState(t, "k1", opledger.StateFailed)
				}
				b.clock.Advance(30 * time.Second)
				d := tc.d
				d.SeenUpdatedAt = seen.UpdatedAt
				first, replayed, err := b.ledger.Resolve(b.ctx, "k1", d)
				require.NoError(t, err)
				require.False(t, replayed, "the first decision is recorded")
				require.Equal(t, tc.want, first.State)
				events := b.events(t, "k1")

				b.clock.Advance(time.Minute)
				// The same form again, and the same decision without SeenUpdatedAt.
				for _, again := range []opledger.Decision{d, tc.d} {
					op, replayed, err := b.ledger.Resolve(b.ctx, "k1", again)
					require.NoError(t, err)
					require.True(t, replayed)
					require.Equal(t, tc.want, op.State)
					require.Equal(t, first.UpdatedAt, op.UpdatedAt, "nothing written")
					require.Equal(t, first.DestinationRef, op.DestinationRef)
					require.Equal(t, events, b.events(t, "k1"), "nothing recorded")
				}

				// Not the same decision: judged as a new one, and refused.
				other := []opledger.Decision{tc.d, tc.d}
				other[0].Reason += " (again)"
				other[1].Operator = "ben"
				if tc.d.Kind == opledger.DecisionMarkSucceeded {
					o := tc.d
					o.DestinationRef = "H43"
					other = append(other, o)
				}
				for _, o := range other {
					_, replayed, err := b.ledger.Resolve(b.ctx, "k1", o)
					require.ErrorIs(t, err, opledger.ErrInvalidState, "%+v", o)
					require.False(t, replayed)
				}
				require.Equal(t, events, b.events(t, "k1"), "nothing recorded")
			})
		}
	})

	// A reason that is only the start of the recorded one is another
	// decision, even where the rest reads like what the ledger appends.
	t.Run("RepeatNeedsTheWholeReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StatePending)
		b.inState(t, "k2", opledger.StateHeld)
		for key, reason := range map[string]string{
			"k1": "customer withdrew (recovery time 3s)", // no recovery time appended: it was pending
			"k2": "customer withdrew (recovery time 3s)", // one appended after it: it was held
		} {
			_, _, err := b.ledger.Resolve(b.ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: reason})
			require.NoError(t, err)
			_, replayed, err := b.ledger.Resolve(b.ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: "customer withdrew"})
			require.ErrorIs(t, err, opledger.ErrInvalidState, key)
			require.False(t, replayed)
			_, replayed, err = b.ledger.Resolve(b.ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: reason})
			require.NoError(t, err, key)
			require.True(t, replayed, key)
		}
	})

	// Once something else has moved the operation, a repeat is a new
	// decision: a retry allowed and already claimed is not allowed again
	// by a late copy of the first request.
	t.Run("RepeatAfterAMoveIsJudgedAnew", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateFailed)
		d := opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "field fixed", Operator: "maria"}
		_, _, err := b.ledger.Resolve(b.ctx, "k1", d)
		require.NoError(t, err)
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, replayed, err := b.ledger.Resolve(b.ctx, "k1", d)
		require.ErrorIs(t, err, opledger.ErrInProgress)
		require.False(t, replayed)
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422 invalid field"})
		// Failed again: the same words are a second decision, recorded.
		op, replayed, err := b.ledger.Resolve(b.ctx, "k1", d)
		require.NoError(t, err)
		require.False(t, replayed)
		require.Equal(t, opledger.StatePending, op.State)
	})

	// The reason is stored with the operation's sensitive values masked;
	// the same reason sent again is still recognised.
	t.Run("RepeatWithSensitiveReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		in := intent("k1")
		in.SensitiveFields = []string{"submission"}
		_, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		d := opledger.Decision{Kind: opledger.DecisionCancel, Reason: "S-847 was withdrawn by the customer"}
		_, _, err = b.ledger.Resolve(b.ctx, "k1", d)
		require.NoError(t, err)
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		require.NotContains(t, tl[len(tl)-1].Evidence, "S-847", "stored masked")
		_, replayed, err := b.ledger.Resolve(b.ctx, "k1", d)
		require.NoError(t, err)
		require.True(t, replayed)
	})

	// Names of who decided are not blank; left out, they default.
	t.Run("BlankNamesRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op := b.inState(t, "k1", opledger.StateAwaitingApproval)
		_, _, err := b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "x", Operator: " \t "})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		_, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "  "})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		_, _, err = b.ledger.Revise(b.ctx, "k1", opledger.Revision{Payload: []byte(`{}`), Version: 2, Actor: " "})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		b.requireState(t, "k1", opledger.StateAwaitingApproval)
		op, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "x"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateFailed, op.State)
		tl, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		require.Equal(t, "operator", tl[len(tl)-1].Actor)
	})
}

func testApproveRevise(t *testing.T, h Harness) {
	// An operation whose attempt, given up before its dispatch mark,
	// reported late that its call may have acted keeps its content, even
	// once it awaits approval again (a retry of content never approved):
	// a revision would send other content under a new idempotency key
	// after a call that may have made the effect.
	t.Run("NoRevisionAfterALateReport", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		lost := b.abandoned(t, "k1") // pending, nothing sent
		in := intent("k1")
		in.RequiresApproval = true
		op, _, err := b.ledger.Record(b.ctx, in) // a repeat asks for approval
		require.NoError(t, err)
		require.Equal(t, opledger.StateAwaitingApproval, op.State)
		_, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted"})
		require.NoError(t, err)
		_, err = b.ledger.Report(b.ctx, "k1", lost.AttemptID, lost.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op, _, err = b.ledger.Resolve(b.ctx, "k1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "wanted after all"})
		require.NoError(t, err)
		require.Equal(t, opledger.StateAwaitingApproval, op.State)
		require.NotNil(t, op.FirstDispatchedAt, "the late report dated a call that may have acted")

		_, _, err = b.ledger.Revise(b.ctx, "k1", opledger.Revision{Payload: []byte(`{"submission":"S-847","units":3}`), Version: 2})
		require.ErrorIs(t, err, opledger.ErrInvalidState)
		require.ErrorContains(t, err, "may have reached the destination")
		op = b.requireState(t, "k1", opledger.StateAwaitingApproval)
		require.Equal(t, int64(1), op.Version, "the content stays")
	})

	t.Run("ApproveExactContent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op := b.inState(t, "k1", opledger.StateAwaitingApproval)
		_, _, err := b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: op.Version, Fingerprint: "sha256:00", Approver: "lead"})
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		require.ErrorContains(t, err, "the approval names sha256:00, other content")
		_, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lead"})
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		require.ErrorContains(t, err, "version 1 awaits approval", "the version is what differs, not the fingerprint")
		require.ErrorContains(t, err, "the approval names version 2")
		_, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "approver required")
		_, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Fingerprint: op.Fingerprint, Approver: "lead"})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "a version left out is refused, not taken for version 0")
		require.ErrorContains(t, err, "version is required")
		_, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: op.Version, Approver: "lead"})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "fingerprint is required")
		approved, _, err := b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lead"})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, approved.State)
		require.Equal(t, "lead", approved.ApprovedBy)
	})

	// An approval sent again while nothing has moved the operation is a
	// replay: nothing recorded, the operation as it is. Another approver,
	// or the same approval once a worker claimed the operation, is judged
	// as a new approval and refused.
	t.Run("ApprovalRepeatIsReplayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		op := b.inState(t, "k1", opledger.StateAwaitingApproval)
		a := opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lead"}
		first, replayed, err := b.ledger.Approve(b.ctx, "k1", a)
		require.NoError(t, err)
		require.False(t, replayed)
		before, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		again, replayed, err := b.ledger.Approve(b.ctx, "k1", a)
		require.NoError(t, err)
		require.True(t, replayed)
		require.Equal(t, opledger.StatePending, again.State)
		require.True(t, first.UpdatedAt.Equal(again.UpdatedAt), "nothing written")
		after, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		require.Len(t, after, len(before), "a replay adds no timeline entry")

		other := a
		other.Approver = "someone else"
		_, _, err = b.ledger.Approve(b.ctx, "k1", other)
		var se *opledger.StateError
		require.ErrorAs(t, err, &se, "another approver's approval is a new one, and the operation no longer awaits one")
		require.Equal(t, opledger.StatePending, se.State)
		require.ErrorContains(t, err, "only an operation awaiting approval can be approved; version 1 was approved by lead")

		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, _, err = b.ledger.Approve(b.ctx, "k1", a)
		require.ErrorAs(t, err, &se, "after a claim the repeat is judged anew")
		require.Equal(t, opledger.StateInProgress, se.State)
	})

	t.Run("ReviseBeforeDispatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		old := b.inState(t, "k1", opledger.StatePending)
		_, _, err := b.ledger.Revise(b.ctx, "k1", opledger.Revision{Payload: json.RawMessage(`{"units":3}`), Version: 1})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "version must grow")
		op, _, err := b.ledger.Revise(b.ctx, "k1", opledger.Revision{Payload: json.RawMessage(`{"units":3}`), Version: 2})
		require.NoError(t, err)
		require.Equal(t, opledger.StateAwaitingApproval, op.State)
		require.NotEqual(t, old.Fingerprint, op.Fingerprint)
		require.NotEqual(t, old.IdempotencyKey(), op.IdempotencyKey(), "new version, new destination key")
		// The old approval no longer fits.
		_, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: 1, Fingerprint: old.Fingerprint, Approver: "lead"})
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		// Recording the old content again is now a mismatch, never a silent revert.
		_, _, err = b.ledger.Record(b.ctx, intent("k1"))
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		op, _, err = b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lead"})
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State)
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		require.JSONEq(t, `{"units":3}`, string(c.Operation.Payload), "executes the approved content")
	})

	// A revision sent again while the operation still has its content,
	// not dispatched, is a replay, also once someone approved it (the
	// revision is in force); another actor's, other content, or the same
	// once a worker holds the operation is judged anew and refused.
	t.Run("RevisionRepeatIsReplayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StatePending)
		rev := opledger.Revision{Payload: json.RawMessage(`{"units":3}`), Version: 2, Actor: "maria"}
		first, replayed, err := b.ledger.Revise(b.ctx, "k1", rev)
		require.NoError(t, err)
		require.False(t, replayed)
		before, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		spaced := rev
		spaced.Payload = json.RawMessage(`{ "units": 3 }`) // the same content, spelled otherwise
		again, replayed, err := b.ledger.Revise(b.ctx, "k1", spaced)
		require.NoError(t, err)
		require.True(t, replayed)
		require.True(t, first.UpdatedAt.Equal(again.UpdatedAt), "nothing written")
		after, err := b.ledger.Timeline(b.ctx, "k1")
		require.NoError(t, err)
		require.Len(t, after, len(before), "a replay adds no timeline entry")

		other := rev
		other.Actor = "sam"
		_, _, err = b.ledger.Revise(b.ctx, "k1", other)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "another actor's revision is a new one, and needs a new version")
		changed := rev
		changed.Payload = json.RawMessage(`{"units":4}`)
		_, _, err = b.ledger.Revise(b.ctx, "k1", changed)
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		approved, _, err := b.ledger.Approve(b.ctx, "k1", opledger.Approval{Version: first.Version, Fingerprint: first.Fingerprint, Approver: "lead"})
		require.NoError(t, err)
		again, replayed, err = b.ledger.Revise(b.ctx, "k1", rev)
		require.NoError(t, err, "once approved, the reviser's retry is a replay")
		require.True(t, replayed)
		require.Equal(t, opledger.StatePending, again.State, "the approval stands")
		require.True(t, approved.UpdatedAt.Equal(again.UpdatedAt), "nothing written")
		_, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, _, err = b.ledger.Revise(b.ctx, "k1", rev)
		require.ErrorIs(t, err, opledger.ErrInvalidState, "once a worker holds it, the same revision is refused")
	})

	t.Run("ReviseAfterDispatchRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
		b.requireState(t, "k1", opledger.StatePending)
		_, _, err := b.ledger.Revise(b.ctx, "k1", opledger.Revision{Payload: json.RawMessage(`{"units":3}`), Version: 2})
		require.ErrorIs(t, err, opledger.ErrInvalidState, "pending but dispatched before")
		require.ErrorContains(t, err, "operation is pending: only an operation awaiting approval, or pending and never dispatched, can be revised")
	})
}

// testTransitionTable tries every event in every state and checks that
// exactly the transitions of DESIGN.md section 3 are allowed.
func testTransitionTable(t *testing.T, h Harness) {
	type event struct {
		name    string
		allowed []opledger.State
		do      func(b *bundle, key string, op *opledger.Operation) error
	}
	decide := func(kind opledger.DecisionKind) func(*bundle, string, *opledger.Operation) error {
		return func(b *bundle, key string, _ *opledger.Operation) error {
			d := opledger.Decision{Kind: kind, Reason: "table test"}
			if kind == opledger.DecisionMarkSucceeded {
				d.DestinationRef = "H1"
			}
			_, _, err := b.ledger.Resolve(b.ctx, key, d)
			return err
		}
	}
	S := opledger.States
	events := []event{
		{"claim", []opledger.State{opledger.StatePending}, func(b *bundle, key string, _ *opledger.Operation) error {
			_, err := b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{})
			return err
		}},
		{"approve", []opledger.State{opledger.StateAwaitingApproval}, func(b *bundle, key string, op *opledger.Operation) error {
			_, _, err := b.ledger.Approve(b.ctx, key, opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "a"})
			return err
		}},
		{"revise", []opledger.State{opledger.StateAwaitingApproval, opledger.StatePending}, func(b *bundle, key string, _ *opledger.Operation) error {
			_, _, err := b.ledger.Revise(b.ctx, key, opledger.Revision{Payload: json.RawMessage(`{"v":9}`), Version: 9})
			return err
		}},
		{"reconcile", []opledger.State{opledger.StateUncertain}, func(b *bundle, key string, _ *opledger.Operation) error {
			_, _, err := b.ledger.Reconcile(b.ctx, key, opledger.Finding{Found: true, Matches: true, DestinationRef: "H1"})
			return err
		}},
		{"hold", []opledger.State{opledger.StateUncertain}, func(b *bundle, key string, _ *opledger.Operation) error {
			_, err := b.ledger.Hold(b.ctx, key, "lookups keep failing")
			return err
		}},
		{"mark_succeeded", []opledger.State{opledger.StateHeld, opledger.StateUncertain, opledger.StateFailed}, decide(opledger.DecisionMarkSucceeded)},
		{"authorize_retry", []opledger.State{opledger.StateHeld, opledger.StateUncertain, opledger.StateFailed}, decide(opledger.DecisionAuthorizeRetry)},
		{"cancel", []opledger.State{opledger.StateHeld, opledger.StateUncertain, opledger.StatePending, opledger.StateAwaitingApproval}, decide(opledger.DecisionCancel)},
	}
	b := setup(t, h)
	for _, ev := range events {
		for _, s := range S {
			key := "table:" + ev.name + ":" + string(s)
			op := b.inState(t, key, s)
			err := ev.do(b, key, op)
			allowed := false
			for _, a := range ev.allowed {
				allowed = allowed || a == s
			}
			if allowed {
				require.NoError(t, err, "%s from %s", ev.name, s)
				continue
			}
			require.ErrorIs(t, err, opledger.ErrInvalidState, "%s from %s must be refused", ev.name, s)
			require.Contains(t, err.Error(), string(s), "the error names the current state")
			after := b.requireState(t, key, s)
			require.Equal(t, op.UpdatedAt, after.UpdatedAt, "%s from %s changed nothing", ev.name, s)
		}
	}
}

package storetest

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testRelease checks that a claim given back before dispatch returns the
// operation to pending at once, and that nothing else can be released.
func testRelease(t *testing.T, h Harness) {
	t.Run("BeforeDispatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.claimed(t, "k1")
		op, err := b.ledger.Release(b.ctx, "k1", c.AttemptID, c.FencingToken, "worker stopping")
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State)
		require.Nil(t, op.LeaseExpiresAt)
		require.NotNil(t, op.NotBefore)
		require.Contains(t, b.events(t, "k1"), "released before dispatch")
		attempts, err := b.ledger.Attempts(b.ctx, "k1")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Equal(t, opledger.AttemptAbandoned, attempts[0].Outcome)
		require.NotNil(t, attempts[0].FinishedAt)
		require.Nil(t, attempts[0].DispatchedAt)

		// Due at once, with no lease to wait for; the next claim fences
		// the released one out.
		next, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.NoError(t, err)
		require.Equal(t, "k1", next.Operation.Key)
		require.Greater(t, next.FencingToken, c.FencingToken)
		_, err = b.ledger.Release(b.ctx, "k1", c.AttemptID, c.FencingToken, "again")
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		_, err = b.ledger.Dispatch(b.ctx, "k1", c.AttemptID, c.FencingToken)
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "a released claim cannot dispatch")
	})

	// A reason is kept as text: cut to its limit between characters, a
	// NUL byte replaced, and the claim given back whatever it holds.
	t.Run("ReasonKeptAsText", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for key, reason := range map[string]string{
			"long": strings.Repeat("a", 1999) + "é and more",
			"nul":  "stopping\x00now",
		} {
			c := b.claimed(t, key)
			op, err := b.ledger.Release(b.ctx, key, c.AttemptID, c.FencingToken, reason)
			require.NoError(t, err, key)
			require.Equal(t, opledger.StatePending, op.State, key)
			tl, err := b.ledger.Timeline(b.ctx, key)
			require.NoError(t, err)
			evidence := tl[len(tl)-1].Evidence
			require.True(t, utf8.ValidString(evidence), "%s: %q", key, evidence)
			require.NotContains(t, evidence, "\x00", key)
			if key == "long" {
				require.Contains(t, evidence, strings.Repeat("a", 1999))
				require.NotContains(t, evidence, "é", "cut at 2,000 bytes, before the character that would cross it")
			}
		}
	})

	t.Run("ProtectedStaysProtected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		b.inState(t, "k1", opledger.StateUncertain)
		_, _, err := b.ledger.Reconcile(b.ctx, "k1", opledger.Finding{ProtectionRetention: time.Hour})
		require.NoError(t, err)
		c, err := b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		require.True(t, c.Protected)
		op, err := b.ledger.Release(b.ctx, "k1", c.AttemptID, c.FencingToken, "")
		require.NoError(t, err)
		require.True(t, op.Protected, "the next attempt is still a protected retry")
		c, err = b.ledger.Claim(b.ctx, "k1", opledger.ClaimOptions{})
		require.NoError(t, err)
		require.True(t, c.Protected)
	})

	t.Run("AfterDispatchRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		_, err := b.ledger.Release(b.ctx, "k1", c.AttemptID, c.FencingToken, "worker stopping")
		require.ErrorIs(t, err, opledger.ErrAlreadyDispatched)
		b.requireState(t, "k1", opledger.StateInProgress)
		// Lease expiry still makes it uncertain, never pending.
		b.clock.Advance(11 * time.Second)
		n, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		b.requireState(t, "k1", opledger.StateUncertain)
	})

	t.Run("NotInProgress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		c := b.dispatched(t, "k1")
		b.report(t, "k1", c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
		_, err := b.ledger.Release(b.ctx, "k1", c.AttemptID, c.FencingToken, "late")
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		b.requireState(t, "k1", opledger.StateSucceeded)
		_, err = b.ledger.Release(b.ctx, "nope", c.AttemptID, 1, "")
		require.ErrorIs(t, err, opledger.ErrNotFound)
	})
}

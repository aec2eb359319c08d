package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testSpeculation checks the transitions a ledger decides on its own
// snapshot of a claim (a claim with the intent of a new key, and the
// dispatch, report and release that follow it) against everything that can
// make the snapshot wrong: a racing claim of the same new key, a tombstone,
// another process moving the operation on.
func testSpeculation(t *testing.T, h Harness) {
	t.Run("ConcurrentNewKey", func(t *testing.T) {
		b := setup(t, h)
		const callers = 32
		var wins atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := intent("spec:new")
				_, err := b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in, Worker: fmt.Sprintf("w%d", i)})
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, opledger.ErrInProgress):
				default:
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int32(1), wins.Load(), "exactly one claim of a new key wins")
		require.Equal(t, []string{"recorded", "claimed"}, b.events(t, "spec:new"))
		attempts, err := b.ledger.Attempts(b.ctx, "spec:new")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
	})

	t.Run("ManyNewKeys", func(t *testing.T) {
		b := setup(t, h)
		const callers, each = 16, 25
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					in := intent(fmt.Sprintf("spec:many:%02d:%02d", w, i))
					c, err := b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
					if err == nil {
						_, err = b.ledger.Report(b.ctx, in.Key, c.AttemptID, c.FencingToken,
							opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "ref-" + in.Key})
					}
					if err != nil {
						errs <- fmt.Errorf("%s: %w", in.Key, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		counts, err := b.ledger.CountByState(b.ctx)
		require.NoError(t, err)
		require.Equal(t, callers*each, counts[opledger.StateSucceeded])
		op, err := b.ledger.Get(b.ctx, "spec:many:07:11")
		require.NoError(t, err)
		require.Equal(t, "ref-spec:many:07:11", op.DestinationRef)
		require.Equal(t, 1, op.AttemptCount)
		require.Equal(t, []string{"recorded", "claimed", "succeeded"}, b.events(t, "spec:many:07:11"))
	})

	t.Run("RepeatedIntent", func(t *testing.T) {
		b := setup(t, h)
		in := intent("spec:repeat")
		c, err := b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		b.report(t, in.Key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-1"})
		_, err = b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.ErrorIs(t, err, opledger.ErrAlreadySucceeded, "a repeat gets the saved result")
		changed := in
		changed.Payload = []byte(`{"submission":"S-847","units":3}`)
		_, err = b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &changed})
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
	})

	t.Run("Tombstone", func(t *testing.T) {
		b := setup(t, h, func(o *opledger.Options) { o.Retention = time.Hour })
		in := intent("spec:compacted")
		c, err := b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		b.report(t, in.Key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-9"})
		b.clock.Advance(2 * time.Hour)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Tombstoned)
		_, err = b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.ErrorIs(t, err, opledger.ErrAlreadySucceeded, "a compacted key is not recorded again")
		require.Empty(t, b.events(t, in.Key), "nothing was written for the compacted key")
	})

	t.Run("CallerReusesBuffers", func(t *testing.T) {
		b := setup(t, h)
		in := intent("spec:buffers")
		payload := []byte(`{"submission":"S-847","units":2}`)
		in.Payload = payload
		c, err := b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		copy(payload, `{"submission":"XXXXX","units":9}`) // the caller's buffer is reused
		c.Operation.Payload[2] = 'Z'                      // and so is what it was given
		b.report(t, in.Key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-4"})
		op, err := b.ledger.Get(b.ctx, in.Key)
		require.NoError(t, err)
		require.JSONEq(t, `{"submission":"S-847","units":2}`, string(op.Payload), "the report wrote the recorded payload back")
	})

	t.Run("StaleSnapshot", func(t *testing.T) {
		b := setup(t, h)
		// Another process on the same store.
		other, err := opledger.Open(b.ctx, b.dsn, opledger.Options{Worker: "other", Clock: b.clock.Func, Lease: time.Minute})
		require.NoError(t, err)
		defer other.Close()

		// The other process dispatches this one's claim: this ledger's
		// snapshot no longer holds, and its report must keep the mark.
		in := intent("spec:moved")
		c, err := b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		_, err = other.Dispatch(b.ctx, in.Key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		op := b.report(t, in.Key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-2"})
		require.Equal(t, opledger.StateSucceeded, op.State)
		attempts, err := b.ledger.Attempts(b.ctx, in.Key)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.NotNil(t, attempts[0].DispatchedAt, "the other process's dispatch mark survives")
		require.Equal(t, string(opledger.OutcomeSucceeded), attempts[0].Outcome)
		require.Equal(t, []string{"recorded", "claimed", "dispatched", "succeeded"}, b.events(t, in.Key))

		// The lease runs out and the other process claims again: this
		// ledger's report is stale, however current its snapshot looked.
		in = intent("spec:reclaimed")
		c, err = b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		b.clock.Advance(time.Minute)
		c2, err := other.Claim(b.ctx, in.Key, opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = b.ledger.Report(b.ctx, in.Key, c.AttemptID, c.FencingToken,
			opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-3"})
		var stale *opledger.StaleError
		require.ErrorAs(t, err, &stale)
		require.Equal(t, c2.FencingToken, stale.Current)
		got, err := b.ledger.Get(b.ctx, in.Key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateInProgress, got.State, "the new claim still holds")
		require.Equal(t, c2.AttemptID, got.CurrentAttemptID)

		// A dispatch of an expired lease is refused and settles it, as the
		// ordinary decision does.
		in = intent("spec:late-dispatch")
		c, err = b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		b.clock.Advance(time.Minute)
		_, err = b.ledger.Dispatch(b.ctx, in.Key, c.AttemptID, c.FencingToken)
		require.ErrorAs(t, err, &stale)
		b.requireState(t, in.Key, opledger.StatePending)
	})

	// A key's operation is compacted, its tombstone forgotten, and the key
	// recorded again: a snapshot of a claim from its earlier life must not
	// pass for the new row, whatever revision that row has reached. The
	// worker holding that old claim wakes up and reports or dispatches.
	t.Run("SnapshotOfAnEarlierLife", func(t *testing.T) {
		for _, step := range []string{"report", "dispatch"} {
			b := setupRetention(t, h)
			other, err := opledger.Open(b.ctx, b.dsn, opledger.Options{Worker: "other", Clock: b.clock.Func,
				Lease: time.Minute, Retention: retention, TombstoneRetention: tombstoneRetention})
			require.NoError(t, err)
			defer other.Close()
			in := intent("spec:reborn")
			old, err := b.ledger.Claim(b.ctx, in.Key, opledger.ClaimOptions{Intent: &in, Worker: "stuck"})
			require.NoError(t, err)
			b.clock.Advance(time.Minute)
			c, err := other.Claim(b.ctx, in.Key, opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = other.Dispatch(b.ctx, in.Key, c.AttemptID, c.FencingToken)
			require.NoError(t, err)
			_, err = other.Report(b.ctx, in.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-1"})
			require.NoError(t, err)
			b.clock.Advance(retention + day)
			res, err := other.Compact(b.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Tombstoned)
			b.clock.Advance(tombstoneRetention)
			res, err = other.Compact(b.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Forgotten)

			// The key again, other content, claimed with its intent: the
			// new row is at the revision the old claim's snapshot had.
			in2 := intent(in.Key)
			in2.Payload = []byte(`{"submission":"S-848","units":3}`)
			fresh, err := other.Claim(b.ctx, in2.Key, opledger.ClaimOptions{Intent: &in2})
			require.NoError(t, err)
			if step == "report" {
				_, err = b.ledger.Report(b.ctx, in.Key, old.AttemptID, old.FencingToken,
					opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-stale"})
			} else {
				_, err = b.ledger.Dispatch(b.ctx, in.Key, old.AttemptID, old.FencingToken)
			}
			require.Error(t, err, step)
			got, err := other.Get(b.ctx, in.Key)
			require.NoError(t, err)
			require.Equal(t, opledger.StateInProgress, got.State, "%s: the new claim still holds", step)
			require.Equal(t, fresh.AttemptID, got.CurrentAttemptID, step)
			require.JSONEq(t, string(in2.Payload), string(got.Payload), "%s: the new content stays", step)
			require.Empty(t, got.DestinationRef, step)
		}
	})
}

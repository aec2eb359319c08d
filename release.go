package opledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrAlreadyDispatched: Release was asked to give back a claim whose
// external call may already have started. Report its outcome instead.
var ErrAlreadyDispatched = errors.New("attempt already dispatched")

// Release gives back a claim that was never dispatched, for example when a
// worker shuts down between Claim and Dispatch: the attempt is recorded as
// abandoned and the operation returns to pending, due at once, exactly as
// if its lease had expired before dispatch, without waiting for the lease.
// reason says why, for the timeline; it may be empty.
//
// A dispatched attempt is refused with ErrAlreadyDispatched: its call may
// have reached the destination, so only Report (or lease expiry, which
// makes it uncertain) may settle it. An attempt that no longer holds the
// operation is refused with a *StaleError.
func (l *Ledger) Release(ctx context.Context, key, attemptID string, token int64, reason string) (*Operation, error) {
	reason = strings.TrimSpace(reason)
	return l.transition(ctx, key, attemptID, func(t *txn) error {
		if err := t.need("release"); err != nil {
			return err
		}
		a, current, err := t.checkAttempt(attemptID, token)
		if err != nil {
			return err
		}
		if !current {
			return t.stale(a, token)
		}
		if t.op.Dispatched {
			return t.refused(fmt.Errorf("release %s: attempt %d: %w", t.key, a.Number, ErrAlreadyDispatched))
		}
		a.Outcome = AttemptAbandoned
		a.FinishedAt = t.now
		if t.confirmedWhileHeld() {
			if err := t.settleConfirmed(a, a.Worker, fmt.Sprintf("attempt %d gave the claim back before dispatch", a.Number)); err != nil {
				return err
			}
			return t.updateAttempt(a)
		}
		if err := t.updateAttempt(a); err != nil {
			return err
		}
		t.move(StatePending, a.Worker, a.ID, "released before dispatch",
			join("nothing was sent; worker "+a.Worker+" gave the claim back", t.keep(reason, maxReasonLength)))
		t.op.NotBefore = t.now
		return nil
	})
}

package opledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/marker"
	"github.com/opledger/opledger/internal/store"
)

// Finding is what the reconciler learned about an uncertain operation at
// its destination. A Finding with neither Found nor Authoritative means no
// lookup was possible.
type Finding struct {
	// Found: a lookup at the destination found the effect.
	Found bool
	// Matches: the found record has the intended content.
	Matches bool
	// DestinationRef of the found record.
	DestinationRef string
	// Authoritative: the lookup's "not found" proves absence (after
	// VisibilityDelay).
	Authoritative bool
	// VisibilityDelay is how long a new record may still be invisible to
	// lookups after the call that made it ended (LastCallEnd): it covers
	// the destination finishing a request its caller stopped waiting for,
	// and its index catching up. 0 or more: a negative one is refused
	// (ErrInvalidInput).
	VisibilityDelay time.Duration
	// ProtectionRetention, when positive, says the destination honours its
	// idempotency key for this long after the first dispatch; 0: it does
	// not. A negative one is refused (ErrInvalidInput).
	ProtectionRetention time.Duration
	// Evidence is a safe summary of what was seen, for the timeline.
	Evidence string
	// AttemptCount, when positive, is the operation's AttemptCount the
	// lookup was made for. Reconcile refuses the Finding with
	// ErrStaleFinding if the operation has had another attempt since: a
	// lookup that ran while a newer attempt was sent cannot speak for it.
	// A count above the operation's is refused as ErrInvalidInput.
	AttemptCount int
	// LookedAt, when set, is when the lookup began, by the ledger's clock
	// (Ledger.Now). Absence counts only for a lookup begun after the
	// visibility delay since the latest dispatch; without LookedAt,
	// Reconcile's own time stands in for it. A finding that nothing was
	// found with LookedAt set is a lookup's answer: if the destination had
	// said it made the record (a create refused as a duplicate, a
	// reference reported without a success), the held operation's reason
	// says that it contradicts itself.
	LookedAt time.Time
}

// Reconcile applies what a lookup or a destination's declared protection
// says about an uncertain operation (DESIGN.md section 3):
//
//   - found with matching content → succeeded, with the found reference;
//   - found with other content → held for its owner;
//   - authoritatively absent once the visibility delay since the latest
//     dispatch has passed → pending; before that it stays uncertain, its
//     next check due when the delay ends;
//   - otherwise, while the destination idempotency key's retention window
//     (from the first dispatch) is open → pending, the next attempt marked
//     protected;
//   - otherwise (no lookup, no protection, retention passed) → held.
//
// A record found is evidence of an effect whatever happened while the
// lookup ran, so it is never dropped: given with its AttemptCount, on an
// operation a call may have reached and that was decided meanwhile
// (an operator's retry or cancel, a hold), one with matching content
// succeeds it, as a late success would, keeps an attempt that holds it
// from sending again, and on an operation that succeeded meanwhile with
// another record counts a duplicate effect; one with other content holds
// an operation about to be sent again and is noted on the others (a
// succeeded one too, which stays succeeded). Any other state, and any
// other finding on a state but uncertain, is refused with a *StateError,
// and a Finding about fewer attempts than the operation has
// (Finding.AttemptCount) with ErrStaleFinding, unless it found a record.
//
// decided reports whether the finding moved the operation on: out of
// uncertain, or, for a record found after a decision meanwhile, out of
// the state that decision left (to succeeded, or held), or, for a
// matching record found while a retry holds the operation, to the effect
// kept for that retry's attempt, which is then not sent and ends the
// operation succeeded with the record. It is false when the finding was
// only recorded and the operation stays as it was: uncertain within the
// visibility delay, or as someone else decided it while the lookup ran
// (a record with other content noted on a held, failed or succeeded
// operation, a second record counted as a duplicate effect). A
// reconciler counts only a finding that decided as its decision.
func (l *Ledger) Reconcile(ctx context.Context, key string, f Finding) (op *Operation, decided bool, err error) {
	if f.Found && f.Matches && strings.TrimSpace(f.DestinationRef) == "" {
		return nil, false, invalidInput("a matching record needs its destination_ref (not only spaces)")
	}
	// A negative delay would let a lookup made while the call still ran
	// count as proof of absence, and the operation be sent again.
	if f.VisibilityDelay < 0 {
		return nil, false, invalidInput("the visibility delay is %s: it must be 0 or more", f.VisibilityDelay)
	}
	if f.ProtectionRetention < 0 {
		return nil, false, invalidInput("the protection retention is %s: it must be 0 or more", f.ProtectionRetention)
	}
	if err := CheckDestinationRef(f.DestinationRef); err != nil {
		return nil, false, err
	}
	// Through the API the finding is the caller's: the timeline names
	// its token after "reconciler".
	actor := l.attributed(ActorReconciler)
	op, err = l.mutate(ctx, key, func(t *txn) error {
		decided = false // decided again on a conflict
		if err := t.need("reconcile"); err != nil {
			return err
		}
		from, confirmed := t.op.State, t.confirmedWhileHeld()
		if err := t.reconcile(l, actor, f); err != nil {
			return err
		}
		// A record kept while a retry holds the operation (confirmWhileHeld)
		// decided its outcome too: that retry is not sent, and ends it
		// succeeded with the record.
		decided = t.op.State != from || !confirmed && t.confirmedWhileHeld()
		return nil
	})
	return op, decided && err == nil, err
}

// reconcile applies f to the operation in the transaction, as
// Ledger.Reconcile says, actor naming who found it. f is a copy: decided
// again on a conflict, from the finding as given.
func (t *txn) reconcile(l *Ledger, actor string, f Finding) error {
	f.Evidence = t.keep(f.Evidence, maxReasonLength)
	// A finding tied to the attempts the lookup saw (AttemptCount,
	// as the reconciler sends it), of an operation a call may have
	// reached: it was uncertain when the lookup began.
	if f.Found && f.AttemptCount > 0 && f.AttemptCount <= t.op.AttemptCount && !t.op.FirstDispatchedAt.IsZero() &&
		State(t.op.State) != StateUncertain {
		if handled, err := t.foundAfterDecision(actor, f); handled || err != nil {
			return err
		}
	}
	if State(t.op.State) != StateUncertain {
		return t.refuse("reconcile")
	}
	if f.AttemptCount > t.op.AttemptCount {
		// Not a lookup from before a newer attempt: a count the
		// operation never had.
		return invalidInput("reconcile %s: attempt_count %d is more attempts than the operation has had (%d): send the attempt_count the operation showed when the lookup began",
			t.key, f.AttemptCount, t.op.AttemptCount)
	}
	if f.AttemptCount > 0 && t.op.AttemptCount != f.AttemptCount {
		if !f.Found {
			return t.refused(fmt.Errorf("reconcile %s: %w (lookup made after attempt %d, the operation is at attempt %d)",
				t.key, ErrStaleFinding, f.AttemptCount, t.op.AttemptCount))
		}
		// A record found is an effect, whichever attempt made it: it
		// settles (or, other content, holds) the operation as a late
		// success would. Only absence needs the newer attempt seen.
		f.Evidence = join(f.Evidence, fmt.Sprintf("found by a lookup made after attempt %d, before attempt %d", f.AttemptCount, t.op.AttemptCount))
	}
	looked := t.now
	if !f.LookedAt.IsZero() && f.LookedAt.Before(looked) {
		looked = f.LookedAt
	}
	ev := f.Evidence
	// The key's retention runs from its first use; a new record's
	// invisibility from the end of the latest call that could have
	// made it.
	attempts, err := t.attemptsWritten()
	if err != nil {
		return err
	}
	firstCall, lastCall := t.callWindow(attempts)
	// The key was first used by the first call that may have reached
	// the destination: the first dispatch, or the claim of an earlier
	// attempt reported uncertain without a dispatch mark. Never a
	// time that moves (the window would slide along).
	since := firstCall
	if since.IsZero() {
		since = t.op.FirstDispatchedAt
	}
	if since.IsZero() {
		since = t.op.CreatedAt
	}
	switch {
	case f.Found && f.Matches:
		t.succeed(f.DestinationRef, nil)
		t.move(StateSucceeded, actor, "", "lookup found the effect",
			join("destination ref "+f.DestinationRef, ev))
		return t.countEarlierVersions()
	case f.Found:
		found := "the record found" // a lookup need not name it
		if f.DestinationRef != "" {
			found = "destination ref " + f.DestinationRef
		}
		t.hold(actor, "lookup found other content", join(found+" does not match the intent", ev))
	case f.Authoritative && looked.Before(lastCall.Add(f.VisibilityDelay)):
		visible := storeTime(lastCall.Add(f.VisibilityDelay))
		t.op.NotBefore = visible // the next check is worth making then
		t.dirty = true
		t.note(actor, "", "lookup empty within visibility delay",
			join("absence counts only after "+textTime(visible), ev))
	case f.Authoritative:
		// Absence is proven: a plain retry is safe, and the protection
		// of an earlier protected attempt no longer applies (its end
		// would otherwise hold the retry). The retry is one of the
		// destination's attempts like any other: its policy's attempt
		// limit and deadline apply.
		t.unprotect()
		exhausted, tried, err := t.retryLimit(l.retryPolicy(t.op.Destination))
		if err != nil {
			return err
		}
		if exhausted != "" {
			t.move(StateFailed, actor, "", "exhausted",
				join(fmt.Sprintf("authoritative lookup found nothing after the visibility delay; %s after %d attempts", exhausted, tried), ev))
			t.op.FailureKind = string(FailureExhausted)
			return nil
		}
		t.move(StatePending, actor, "", "lookup proved absence",
			join("authoritative lookup found nothing after the visibility delay", ev))
		t.op.NotBefore = t.now
	case f.ProtectionRetention > 0 && t.now.Before(since.Add(f.ProtectionRetention)):
		// A protected retry is an attempt too: past the policy's
		// attempt limit or deadline the operation is held (an earlier
		// attempt may have taken effect).
		exhausted, tried, err := t.retryLimit(l.retryPolicy(t.op.Destination))
		if err != nil {
			return err
		}
		if exhausted != "" {
			t.hold(actor, "exhausted while uncertain",
				join(fmt.Sprintf("%s after %d attempts; an earlier attempt may have taken effect", exhausted, tried), ev))
			return nil
		}
		t.op.Protected = true
		t.op.ProtectedUntil = storeTime(since.Add(f.ProtectionRetention))
		t.move(StatePending, actor, "", "protected retry",
			join("destination idempotency key honoured until "+textTime(t.op.ProtectedUntil), ev))
		t.op.NotBefore = t.now
	case f.ProtectionRetention > 0:
		t.hold(actor, "protection expired",
			join("the destination idempotency key's retention window has passed; a retry could duplicate the effect", ev))
	default:
		t.hold(actor, "cannot be decided automatically", join(t.undecidable(f, attempts), ev))
	}
	return nil
}

// foundAfterDecision applies f, a finding that a record exists, to an
// operation that left uncertain while the lookup ran: an operator
// authorized a retry or cancelled it, or it was held, or a retry was
// claimed already. handled is false for a finding that says nothing new
// (the record that confirmed the operation's effect). A record with other
// content on an operation whose effect is confirmed (succeeded meanwhile)
// changes nothing but is noted on the timeline ("lookup found other
// content"): the destination holds a second, different record.
func (t *txn) foundAfterDecision(actor string, f Finding) (handled bool, err error) {
	state := State(t.op.State)
	found := "the record found" // a lookup need not name it
	if f.DestinationRef != "" {
		found = "destination ref " + f.DestinationRef
	}
	meanwhile := fmt.Sprintf("found while the lookup ran, after the operation had become %s", state)
	other := found + " does not match the intent; " + meanwhile
	// An effect confirmed meanwhile: succeeded, or kept while a retry
	// holds the operation (confirmedWhileHeld).
	confirmed := state == StateSucceeded || state == StateInProgress && t.op.DestinationRef != ""
	switch {
	case confirmed && f.Matches && f.DestinationRef != t.op.DestinationRef:
		// Another record (a retry's): the destination holds two, each
		// with the intended content.
		return true, t.duplicateEffectBy(actor, "", f.DestinationRef, join("a lookup found a second record; "+meanwhile, f.Evidence))
	case confirmed && f.Matches:
		return false, nil // its own record: nothing new
	case f.Matches && state == StateInProgress:
		// As a late success while another attempt holds the operation.
		return true, t.confirmWhileHeld(actor, "", "lookup found the effect while another attempt holds the operation",
			f.DestinationRef, nil, join(found+"; "+meanwhile, f.Evidence))
	case f.Matches:
		// Pending (a retry authorized), held, failed (cancelled), or
		// awaiting approval (a retry of a version never approved): the
		// effect exists, and sending again would repeat it.
		t.succeed(f.DestinationRef, nil)
		t.move(StateSucceeded, actor, "", "lookup found the effect", join(found+"; "+meanwhile, f.Evidence))
		return true, t.countEarlierVersions()
	case state == StateInProgress && !t.op.Dispatched && !confirmed:
		// A retry claimed, not sent yet: as for a pending one, it is not
		// sent on top of that record. (With an effect confirmed, it is
		// not sent anyway, and settles the operation: noted below.)
		holder, err := t.getAttempt(t.op.CurrentAttemptID)
		if err != nil {
			return false, err
		}
		if err := t.endUnsent(holder, notSentOtherContent); err != nil {
			return false, err
		}
		t.hold(actor, "lookup found other content", join(other+
			fmt.Sprintf(": attempt %d, which held it, is not sent, nor is anything before a person looks", holder.Number), f.Evidence))
		return true, nil
	case state == StatePending || state == StateAwaitingApproval:
		t.hold(actor, "lookup found other content", join(other+": it is not sent again before a person looks", f.Evidence))
		return true, nil
	default:
		t.note(actor, "", "lookup found other content", join(other, f.Evidence))
		return true, nil
	}
}

// undecidable says why the uncertain operation in the transaction cannot
// be decided by f, a finding that neither confirms the effect nor proves
// it absent, at a destination whose protection is not open. A destination
// that said it made the record (it refused a create as a duplicate, or an
// attempt reported a reference without a success) and whose lookup then
// does not find it contradicts itself, whatever it declares: that comes
// first. Otherwise the destination offers nothing that decides.
func (t *txn) undecidable(f Finding, attempts []*store.Attempt) string {
	const nothing = "no lookup that proves absence and no duplicate protection at the destination"
	if f.LookedAt.IsZero() {
		// No lookup of the destination's (Finding.LookedAt): nothing it
		// answered contradicts anything.
		return nothing
	}
	exists := strings.Contains(t.op.LastError, marker.Exists)
	reported := false
	for _, a := range attempts {
		exists = exists || strings.Contains(a.Error, marker.Exists)
		reported = reported || a.DestinationRef != "" && a.Outcome != string(OutcomeRejected)
	}
	const after = ", yet its lookup does not find it: a retry could make the effect twice"
	switch {
	case exists:
		return "the destination contradicts itself: it refused a create as a duplicate, so it holds the record" + after
	case reported:
		return "the destination contradicts itself: an attempt reported the record's reference without a success" + after
	}
	return nothing
}

// attemptsWritten reads every attempt of the operation in the
// transaction, once the writes it has queued are made.
func (t *txn) attemptsWritten() ([]*store.Attempt, error) {
	if err := t.writeQueued(); err != nil {
		return nil, err
	}
	return t.listAttempts()
}

// callWindow is, for the operation in the transaction with attempts,
// when the first call that may have reached its destination began (zero
// when none may have) and LastCallEnd.
func (t *txn) callWindow(attempts []*store.Attempt) (first, last time.Time) {
	for _, a := range attempts {
		start := callStart(a.DispatchedAt, a.ClaimedAt, a.Outcome, a.LateOutcome)
		if !start.IsZero() && (first.IsZero() || start.Before(first)) {
			first = start
		}
		last = later(last, callEnd(start, a.FinishedAt, a.LeaseExpiresAt))
	}
	if last.IsZero() {
		last = t.op.UpdatedAt
	}
	return first, last
}

// LastCallEnd is when the latest call of an operation that may have
// reached its destination ended, as far as the ledger knows: for each
// attempt that may have called (dispatched, or reported uncertain without
// a dispatch mark), when it ended (its outcome reported, or its lease
// found expired) or, while it is open, when its lease runs out. The
// visibility delay of an authoritative lookup counts from it: a
// destination may go on with a request after its caller stopped waiting
// for the answer, so absence proves nothing until the delay has passed
// since the caller gave up, not since the request went out. Without any
// such attempt it is the operation's UpdatedAt.
func LastCallEnd(op *Operation, attempts []*Attempt) time.Time {
	var last time.Time
	for _, a := range attempts {
		var dispatched, finished time.Time
		if a.DispatchedAt != nil {
			dispatched = *a.DispatchedAt
		}
		if a.FinishedAt != nil {
			finished = *a.FinishedAt
		}
		last = later(last, callEnd(callStart(dispatched, a.ClaimedAt, a.Outcome, a.LateOutcome), finished, a.LeaseExpiresAt))
	}
	if last.IsZero() {
		last = op.UpdatedAt
	}
	return last
}

// callStart is when the call of an attempt may have begun: its dispatch
// mark or, for an attempt reported uncertain without one (its worker
// skipped the mark, or reported after its lease had run out and it was
// abandoned), its claim; zero for an attempt that cannot have called.
func callStart(dispatched, claimed time.Time, outcome, lateOutcome string) time.Time {
	switch {
	case !dispatched.IsZero():
		return dispatched
	case outcome == string(OutcomeUncertain), lateOutcome == string(OutcomeUncertain):
		return claimed
	}
	return time.Time{}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// callEnd is the latest time the call of an attempt that began at start
// (callStart) may have run: until the attempt finished or, while it is
// open, until its lease expires; zero for an attempt that cannot have
// called.
func callEnd(start, finished, leaseExpires time.Time) time.Time {
	if start.IsZero() {
		return time.Time{}
	}
	end := finished
	if end.IsZero() {
		end = leaseExpires
	}
	return later(start, end)
}

// Hold moves an uncertain operation to held for its owner, with the reason
// automation gave up (for example: lookups keep failing). The reason is
// required: an empty one, or spaces only, is refused with
// ErrReasonRequired; an operation in another state, with a *StateError.
func (l *Ledger) Hold(ctx context.Context, key, reason string) (*Operation, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return nil, ErrReasonRequired
	}
	return l.mutate(ctx, key, func(t *txn) error {
		if err := t.need("hold"); err != nil {
			return err
		}
		if State(t.op.State) != StateUncertain {
			return t.refuse("hold")
		}
		t.hold(l.attributed(ActorReconciler), "held", t.keep(reason, maxReasonLength))
		return nil
	})
}

// hold moves the operation to held with its review deadline.
func (t *txn) hold(actor, event, evidence string) {
	t.holdFor(actor, "", event, evidence)
}

// holdFor is hold, the timeline entry naming the attempt attemptID.
func (t *txn) holdFor(actor, attemptID, event, evidence string) {
	t.move(StateHeld, actor, attemptID, event, evidence)
	t.op.ReviewBy = t.nowPlus(t.holdReview)
}

func join(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// ReconcileQueueOptions select what ReconcileQueue returns.
type ReconcileQueueOptions struct {
	// Limit is how many operations at most: 0 for 100, at most
	// MaxListLimit, as a list's page is; a negative one or one above
	// MaxListLimit is refused (ErrInvalidInput). A reconciler that has
	// more to do calls again once it has worked through a batch.
	Limit int
	// Destinations limits the queue to these destinations; empty means
	// any. Reconcilers that know different destinations (an opledger
	// serve and an opledger proxy) can so share a store.
	Destinations []string
	// AllTenants returns every tenant's operations instead of the
	// Ledger's own. Use WithTenant(op.Tenant) to act on each.
	AllTenants bool
}

// ReconcileQueue returns the uncertain operations whose next
// reconciliation is due (see DeferReconcile), longest waiting first: the
// Ledger's own tenant's, or every tenant's with AllTenants.
func (l *Ledger) ReconcileQueue(ctx context.Context, opts ReconcileQueueOptions) ([]*Operation, error) {
	// Bounded as a list's page: the whole batch is read, and each
	// operation of it decoded, in one read transaction.
	limit, err := pageLimit(opts.Limit, 100, MaxListLimit)
	if err != nil {
		return nil, err
	}
	tenant := l.tenant
	if opts.AllTenants {
		tenant = ""
	}
	var out []*Operation
	err = l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		now, err := l.now(ctx, r)
		if err != nil {
			return err
		}
		ids, err := r.UncertainDue(ctx, store.DueParams{Tenant: tenant, Now: now, Limit: limit, Destinations: opts.Destinations})
		if err != nil {
			return err
		}
		for _, id := range ids {
			row, err := r.GetOperation(ctx, id.Tenant, id.Key)
			if errors.Is(err, store.ErrNotFound) {
				continue // compacted or gone meanwhile
			}
			if err != nil {
				return err
			}
			if State(row.State) == StateUncertain {
				out = append(out, toOperation(row))
			}
		}
		return nil
	})
	return out, err
}

// ClaimLookup takes an uncertain operation for one lookup, so that
// reconcilers of several processes sharing the store do not each look it
// up (and each count a failed lookup against its limit): it moves the
// operation's next check lease ahead, if the operation is as seen (still
// uncertain, with the attempts and the next check seen), and reports
// whether it did. false: another process took it, or it changed; leave
// it. The lookup's Reconcile or DeferReconcile sets the next check; if
// neither comes (the process stopped), the operation is due again once
// lease has passed. Nothing is written to the timeline.
func (l *Ledger) ClaimLookup(ctx context.Context, seen *Operation, lease time.Duration) (bool, error) {
	if seen == nil {
		return false, invalidInput("ClaimLookup needs the operation as seen")
	}
	if lease <= 0 {
		return false, invalidInput("the lookup's lease is %s: it must be more than 0", lease)
	}
	taken := false
	_, err := l.mutate(ctx, seen.Key, func(t *txn) error {
		taken = false // decided again on a conflict
		if err := t.need("claim the lookup"); err != nil {
			return err
		}
		next := time.Time{}
		if seen.NotBefore != nil {
			next = storeTime(*seen.NotBefore)
		}
		if State(t.op.State) != StateUncertain || t.op.AttemptCount != seen.AttemptCount || !storeTime(t.op.NotBefore).Equal(next) {
			return nil
		}
		t.op.NotBefore = t.nowPlus(lease)
		t.dirty = true
		taken = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return taken, nil
}

// DeferReconcile keeps an uncertain operation uncertain and schedules its
// next reconciliation after delay, recording why (for example: the lookup
// failed). The reconciler uses it to back off; it never resends anything.
// The timeline gets a "reconcile deferred" entry by the reconciler, named
// as Reconcile and Hold name it (with the Ledger's credential, if any),
// unless its last entry is already such a deferral with the same
// evidence: an operation put off again
// and again for one reason (its destination is not served here, checked
// every 10 minutes) keeps that first entry, and its next check
// (Operation.NotBefore) moves on all the same.
func (l *Ledger) DeferReconcile(ctx context.Context, key string, delay time.Duration, evidence string) (*Operation, error) {
	if delay < 0 {
		return nil, invalidInput("delay must not be negative")
	}
	// The reconciler's entry, as its findings and holds are.
	actor := l.attributed(ActorReconciler)
	return l.mutate(ctx, key, func(t *txn) error {
		if err := t.need("defer reconcile"); err != nil {
			return err
		}
		if State(t.op.State) != StateUncertain {
			return t.refuse("defer reconcile")
		}
		t.op.NotBefore = t.nowPlus(delay)
		t.dirty = true
		why := t.keep(evidence, maxReasonLength)
		last, err := t.lastTimelineEntry()
		if err != nil {
			return err
		}
		if last != nil && sameDeferral(last, actor, why) {
			return nil
		}
		t.note(actor, "", eventDeferred, join(deferredUntil+textTime(t.op.NotBefore), why))
		return nil
	})
}

// LookupFailures counts the failed lookups recorded for the operation at
// key since it last became uncertain: its "reconcile deferred" entries
// (DeferReconcile) whose reason starts with the mark of a failed lookup,
// as a reconciler words it ("lookup failed: …"), after its newest entry
// into uncertain. A deferral whose reason only mentions the phrase further
// on (a lookup's own evidence, say) is no failed lookup. A reconciler
// holds the operation once they reach its limit
// (reconciler.Config.MaxLookupFailures). It reads those entries alone, not
// the whole timeline of an operation uncertain and retried many times.
// Unknown keys return ErrNotFound; a compacted operation has none.
func (l *Ledger) LookupFailures(ctx context.Context, key string) (int, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	var n int
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		n, err = r.CountTimeline(ctx, store.TimelineCount{Tenant: l.tenant, Key: key, SinceState: string(StateUncertain),
			Event: eventDeferred, ReasonPrefix: marker.LookupFailed})
		if err == nil && n == 0 {
			_, err = l.get(ctx, r, key)
		}
		return err
	})
	return n, err
}

// eventDeferred is the timeline event of DeferReconcile; its evidence is
// deferredUntil, the next check's time, then why.
const (
	eventDeferred = "reconcile deferred"
	deferredUntil = "next check at "
)

// sameDeferral reports whether e is a deferral (DeferReconcile's) by
// actor whose evidence is why, whatever its next check.
func sameDeferral(e *store.TimelineEntry, actor, why string) bool {
	if e.Event != eventDeferred || e.Actor != actor || e.ToState != "" {
		return false
	}
	rest, ok := strings.CutPrefix(e.Evidence, deferredUntil)
	if !ok {
		return false
	}
	_, got, _ := strings.Cut(rest, "; ") // a time (textTime, RFC 3339) has none
	return got == why
}

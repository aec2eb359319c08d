package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/opledger/opledger"
)

// Invariant names a property every run must keep. Each is an error, so
// that errors.Is(report.Err(), sim.DuplicateEffect) finds its violations.
type Invariant string

// The invariants checked after every run. "Effects" are what the
// destinations really did (lab's EffectsFor and RefsFor), not what the
// ledger believes.
const (
	// DuplicateEffect: a protected destination made more than one effect
	// for one operation. The CRM (unique reference, authoritative lookup)
	// must never; the payment never inside its key's retention, and the
	// ledger must not resend after it (a second charge can only come from
	// a resend outside the retention, which is the ledger's fault).
	DuplicateEffect Invariant = "duplicate_effect"
	// UnprotectedResend: the email, which guarantees nothing, made more
	// than one effect for one operation, or an email operation went from
	// uncertain or held back to pending without a human decision (the
	// simulation makes none).
	UnprotectedResend Invariant = "unprotected_resend"
	// ResendWithoutReconciliation: an operation that became uncertain was
	// claimed again before the reconciler moved it to pending (after a
	// matching lookup's absence, or under protection).
	ResendWithoutReconciliation Invariant = "resend_without_reconciliation"
	// ProtectionExpired: the call of an attempt marked protected reached
	// the payment after its idempotency key retention (from the first
	// dispatch) had ended: the attempt was claimed or dispatched too late,
	// or its worker called after its lease. Its protection was gone.
	ProtectionExpired Invariant = "protection_expired"
	// SucceededWithoutRef: an operation succeeded without a destination
	// reference.
	SucceededWithoutRef Invariant = "succeeded_without_ref"
	// SucceededWithoutEffect: an operation succeeded with a reference the
	// destination never produced for it.
	SucceededWithoutEffect Invariant = "succeeded_without_effect"
	// FailedWithEffect: an operation is failed (which says: no effect)
	// while the destination made its effect.
	FailedWithEffect Invariant = "failed_with_effect"
	// Unsettled: after the drain an operation is not succeeded, failed,
	// or held/uncertain with evidence (an attempt whose outcome was
	// uncertain, whose lease expired after dispatch, or whose report came
	// after its lease expired).
	Unsettled Invariant = "unsettled"
	// EventMismatch: an event did not produce exactly its one operation,
	// or the ledger's event and delivery counts differ from what the
	// webhook source sent.
	EventMismatch Invariant = "event_mismatch"
	// CounterMismatch: the counters do not add up. Defined as: (1) calls
	// the workers made = attempts the destinations received; (2) ledger
	// attempts with a dispatch mark = calls + attempts whose worker
	// crashed between dispatch mark and call or skipped a call whose
	// protection window had closed; (3) effects the
	// destinations made = the sum of per-operation effects; (4) confirmed
	// effects (succeeded operations) ≤ effects made.
	CounterMismatch Invariant = "counter_mismatch"
	// DecidedOnFailedLookup: a reconciler pass in which an operation's
	// lookup failed (lab.FaultLookupError) left it other than uncertain
	// or held: the failure, which proves neither that the record exists
	// nor that it does not, was taken for an answer (resent, confirmed or
	// failed).
	DecidedOnFailedLookup Invariant = "decided_on_failed_lookup"
	// FiguresWentDown: a total of Stats or EventStats (attempts that
	// ended, by destination and outcome; confirmed and duplicate effects;
	// operator recoveries; events by status, deliveries, duplicate
	// deliveries) was lower than at an earlier read of the same run. Read
	// after every step: the totals are Prometheus counters in /metrics,
	// which must never go down.
	FiguresWentDown Invariant = "figures_went_down"
)

// KnownBugs are the invariants the ledger is known to break and that are
// not fixed yet, with the reason. TestSim reports their violations, and
// those they cause, without failing (unless -strict). Empty: the last one
// (a protected retry claimed after the key's retention) is fixed by
// Operation.ProtectedUntil.
var KnownBugs = map[Invariant]string{}

// Invariants lists every invariant.
var Invariants = []Invariant{DuplicateEffect, UnprotectedResend, ResendWithoutReconciliation, ProtectionExpired,
	SucceededWithoutRef, SucceededWithoutEffect, FailedWithEffect, Unsettled, EventMismatch, CounterMismatch,
	DecidedOnFailedLookup, FiguresWentDown}

// Error names the invariant.
func (i Invariant) Error() string { return "invariant " + string(i) + " violated" }

// Violation is one breach of an invariant.
type Violation struct {
	Invariant Invariant `json:"invariant"`
	// Key is the operation concerned, if one is.
	Key    string `json:"key,omitempty"`
	Detail string `json:"detail"`
	// Cause is another violation of the same operation that explains
	// this one, if any: a duplicate payment caused by ProtectionExpired.
	Cause Invariant `json:"cause,omitempty"`
}

// Known reports whether the violation is, or is caused by, a known bug.
func (v *Violation) Known() bool {
	_, known := KnownBugs[v.Invariant]
	_, cause := KnownBugs[v.Cause]
	return known || cause
}

// Error describes the violation.
func (v *Violation) Error() string {
	if v.Key == "" {
		return string(v.Invariant) + ": " + v.Detail
	}
	return string(v.Invariant) + ": " + v.Key + ": " + v.Detail
}

// Is matches the violated Invariant.
func (v *Violation) Is(target error) bool { return target == v.Invariant }

func (w *world) violate(inv Invariant, key, format string, args ...any) {
	v := &Violation{Invariant: inv, Key: key, Detail: fmt.Sprintf(format, args...)}
	w.report.Violations = append(w.report.Violations, v)
	w.log("VIOLATION %s", v.Error())
}

// check verifies every invariant and fills the report's figures.
func (w *world) check(ctx context.Context) error {
	r := w.report
	effects := 0
	for _, key := range w.order {
		dest := w.keys[key]
		d := w.dests[dest]
		eff, refs := d.EffectsFor(key), d.RefsFor(key)
		effects += eff
		op, err := w.ledger.Get(ctx, key)
		if err != nil {
			w.violate(EventMismatch, key, "the event's operation is missing: %v", err)
			continue
		}
		attempts, err := w.ledger.Attempts(ctx, key)
		if err != nil {
			return err
		}
		timeline, err := w.ledger.Timeline(ctx, key)
		if err != nil {
			return err
		}
		r.States[string(op.State)]++
		r.DuplicatesDetected += op.DuplicateEffects
		for _, a := range attempts {
			if a.DispatchedAt != nil {
				r.DispatchedAttempts++
			}
		}
		w.log("final %s: %s failure=%s ref=%s attempts=%d effects=%d", key, op.State, op.FailureKind, op.DestinationRef, len(attempts), eff)

		expired := w.checkProtection(key, dest, op, attempts)
		switch dest {
		case "crm", "payment":
			if eff > 1 {
				w.violate(DuplicateEffect, key, "%s made %d effects (%v); the operation is %s", dest, eff, refs, op.State)
				if expired {
					w.report.Violations[len(w.report.Violations)-1].Cause = ProtectionExpired
				}
			}
		case "email":
			if eff > 1 {
				w.violate(UnprotectedResend, key, "email sent %d times (%v); the operation is %s", eff, refs, op.State)
			}
		}
		w.checkTimeline(key, dest, timeline)
		switch op.State {
		case opledger.StateSucceeded:
			r.ConfirmedEffects++
			if op.DestinationRef == "" {
				w.violate(SucceededWithoutRef, key, "succeeded without a destination reference")
			} else if !slices.Contains(refs, op.DestinationRef) {
				w.violate(SucceededWithoutEffect, key, "succeeded with ref %s, but %s made %v for it", op.DestinationRef, dest, refs)
			}
		case opledger.StateFailed:
			if eff > 0 {
				w.violate(FailedWithEffect, key, "failed (%s) but %s made %d effects (%v); last error: %s", op.FailureKind, dest, eff, refs, op.LastError)
			}
		case opledger.StateHeld, opledger.StateUncertain:
			// An attempt that reported after it lost the operation without
			// having ended (stale, its outcome the report's) counts as
			// evidence too.
			if !slices.ContainsFunc(attempts, func(a *opledger.Attempt) bool {
				return a.Outcome == string(opledger.OutcomeUncertain) || a.Outcome == opledger.AttemptLeaseExpired || a.Stale
			}) {
				w.violate(Unsettled, key, "%s without an uncertain attempt as evidence", op.State)
			}
		default:
			w.violate(Unsettled, key, "ended %s after the drain", op.State)
		}
	}

	// Counters.
	received, made := 0, 0
	for _, name := range w.names {
		c := w.dests[name].Counters()
		r.Destinations[name] = c
		received += c.Attempts
		made += c.Effects
	}
	r.Effects = made
	if received != r.Calls {
		w.violate(CounterMismatch, "", "workers made %d calls, destinations received %d", r.Calls, received)
	}
	if r.DispatchedAttempts != r.Calls+r.DispatchedNotCalled {
		w.violate(CounterMismatch, "", "ledger has %d dispatched attempts, workers made %d calls and crashed %d times between dispatch and call",
			r.DispatchedAttempts, r.Calls, r.DispatchedNotCalled)
	}
	if made != effects {
		w.violate(CounterMismatch, "", "destinations made %d effects, the operations account for %d", made, effects)
	}
	if r.ConfirmedEffects > made {
		w.violate(CounterMismatch, "", "%d operations succeeded but only %d effects were made", r.ConfirmedEffects, made)
	}

	// Events.
	es, err := w.ledger.EventStats(ctx, false)
	if err != nil {
		return err
	}
	sc := w.source.Counters()
	r.Events, r.Deliveries, r.DuplicateDeliveries = int(es.Events), int(es.Deliveries), int(es.DuplicateDeliveries)
	if r.Events != sc.Events || r.Deliveries != sc.Deliveries || r.DuplicateDeliveries != sc.Deliveries-sc.Events {
		w.violate(EventMismatch, "", "ledger counts %d events, %d deliveries, %d duplicates; the source sent %d events in %d deliveries",
			r.Events, r.Deliveries, r.DuplicateDeliveries, sc.Events, sc.Deliveries)
	}
	total := 0
	for _, n := range r.States {
		total += n
	}
	if total != w.cfg.Operations {
		w.violate(EventMismatch, "", "%d events produced %d operations", w.cfg.Operations, total)
	}
	return nil
}

// checkProtection reports a protected attempt whose call reached the
// payment after the key's retention (from the first dispatch) had ended,
// whether it was dispatched late or its worker called late. It returns
// whether there was one.
func (w *world) checkProtection(key, dest string, op *opledger.Operation, attempts []*opledger.Attempt) bool {
	if dest != "payment" || op.FirstDispatchedAt == nil {
		return false
	}
	end := op.FirstDispatchedAt.Add(PaymentRetention)
	found := false
	for _, a := range attempts {
		at, called := w.callAt[a.ID]
		if !a.Protected || !called || at.Before(end) {
			continue
		}
		how := "claimed and dispatched after the retention ended"
		if a.DispatchedAt != nil && a.DispatchedAt.Before(end) {
			how = "dispatched inside the retention, called after it"
		}
		w.violate(ProtectionExpired, key, "protected attempt %d %s (dispatched %s, called +%s, %s late)",
			a.Number, how, since(a.DispatchedAt), at.Sub(epoch), at.Sub(end))
		found = true
	}
	return found
}

func since(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return "+" + t.Sub(epoch).String()
}

// checkTimeline verifies that an uncertain operation was only sent again
// after the reconciler released it, and never for the email.
func (w *world) checkTimeline(key, dest string, timeline []*opledger.TimelineEntry) {
	unresolved := false
	for _, e := range timeline {
		switch {
		case e.To == opledger.StateUncertain || e.To == opledger.StateHeld:
			unresolved = true
		case e.To == opledger.StatePending && unresolved:
			if dest == "email" {
				w.violate(UnprotectedResend, key, "email moved from %s to pending by %s (%s) without a human decision", e.From, e.Actor, e.Event)
			} else if e.Actor != opledger.ActorReconciler {
				w.violate(ResendWithoutReconciliation, key, "moved from %s to pending by %s (%s)", e.From, e.Actor, e.Event)
			}
			unresolved = false
		case e.To == opledger.StateInProgress && unresolved:
			w.violate(ResendWithoutReconciliation, key, "claimed by %s while %s", e.Actor, e.From)
			unresolved = false
		case e.To == opledger.StateSucceeded || e.To == opledger.StateFailed:
			unresolved = false
		}
	}
}

// checkFailedLookups reports an operation whose lookup failed in the
// reconciler's last pass and that the pass did not leave uncertain or
// held (DecidedOnFailedLookup). Nothing else runs during a pass, so the
// operation's state is the pass's decision.
func (w *world) checkFailedLookups(ctx context.Context) error {
	for _, key := range w.failedLookups {
		op, err := w.ledger.Get(ctx, key)
		if err != nil {
			return err
		}
		if op.State != opledger.StateUncertain && op.State != opledger.StateHeld {
			w.violate(DecidedOnFailedLookup, key, "its lookup failed, yet the reconciler's pass left it %s", op.State)
		}
	}
	return nil
}

// checkTotals reads the totals that must never go down and reports any
// lower than at the last read (FiguresWentDown).
func (w *world) checkTotals(ctx context.Context) error {
	st, err := w.ledger.Stats(ctx, false)
	if err != nil {
		return err
	}
	es, err := w.ledger.EventStats(ctx, false)
	if err != nil {
		return err
	}
	totals := map[string]int{"confirmed effects": st.ConfirmedEffects, "duplicate effects": st.DuplicateEffects,
		"recoveries": st.Recoveries, "deliveries": es.Deliveries, "duplicate deliveries": es.DuplicateDeliveries}
	for _, a := range st.Attempts {
		if a.Outcome != opledger.AttemptOpen {
			totals["attempts to "+a.Destination+" that ended "+a.Outcome] = a.Count
		}
	}
	for i, n := range st.RecoveryBuckets {
		totals[fmt.Sprintf("recoveries within %s", opledger.RecoveryBuckets[i])] = n
	}
	for status, n := range es.EventsByStatus {
		totals["events "+string(status)] = n
	}
	// In order of name: the violations go into the trace the digest
	// covers, and a map's order changes from run to run.
	for _, name := range slices.Sorted(maps.Keys(w.totals)) {
		if was := w.totals[name]; totals[name] < was {
			w.violate(FiguresWentDown, "", "%s went down from %d to %d", name, was, totals[name])
		}
	}
	w.totals = totals
	return nil
}

package soaktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opledger/opledger"
)

// checkInvariants runs once the workload has stopped. A third Ledger, whose
// clock runs an hour ahead, first settles every lease left by a worker that
// died (ExpireLeases), as a process started later would; then the whole
// ledger is read through the public API and held to what DESIGN.md
// promises; then that Ledger applies retention to everything final and
// the running totals are checked not to have gone down.
func (s *soak) checkInvariants(ctx context.Context) {
	t := s.t
	opts := soakOptions("soak-checker")
	opts.Clock = func(now time.Time) time.Time { return now.Add(time.Hour) }
	l, err := opledger.Open(ctx, s.dsn, opts)
	if err != nil {
		t.Fatalf("open the checker: %v", err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Errorf("close the checker: %v", err)
		}
	}()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("invariant: "+format, args...)
	}
	if _, err := l.ExpireLeases(ctx); err != nil {
		t.Fatalf("expire the leases left: %v", err)
	}

	// Every operation still recorded, by state, and every key of the
	// soak's key space as Get finds it.
	var live []*opledger.Operation
	for cursor := ""; ; {
		page, err := l.List(ctx, opledger.ListOptions{Limit: opledger.MaxListLimit, Cursor: cursor})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		live = append(live, page.Items...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	keys := allKeys()
	byState := map[opledger.State]int{}
	liveAttempts := map[[2]string]int{}
	succeededKept := 0 // live or tombstoned
	listed := map[string]bool{}
	for _, op := range live {
		if listed[op.Key] {
			fail("List returned %s twice", op.Key)
		}
		listed[op.Key] = true
		if !slices.Contains(keys, op.Key) {
			fail("operation %s is outside the soak's key space", op.Key)
		}
		byState[op.State]++
		attempts, err := l.Attempts(ctx, op.Key)
		if err != nil {
			t.Fatalf("attempts of %s: %v", op.Key, err)
		}
		for _, a := range attempts {
			liveAttempts[[2]string{op.Destination, a.Outcome}]++
		}
		s.checkOperation(op, attempts, fail)
		if op.State == opledger.StateSucceeded {
			succeededKept++
		}
	}
	tombstones := 0
	for _, key := range keys {
		op, err := l.Get(ctx, key)
		switch {
		case errors.Is(err, opledger.ErrNotFound):
			if listed[key] {
				fail("%s is listed but Get does not find it", key)
			}
		case err != nil:
			t.Fatalf("get %s: %v", key, err)
		case op.Tombstoned:
			tombstones++
			if listed[key] {
				fail("%s is listed, yet Get finds only its tombstone", key)
			}
			if !op.State.Final() {
				fail("tombstone of %s is %s, not a final state", key, op.State)
			}
			if op.State == opledger.StateSucceeded {
				succeededKept++
				if op.DestinationRef != refFor(key) {
					fail("tombstone of %s keeps reference %q, not %q", key, op.DestinationRef, refFor(key))
				}
			}
		default:
			if !listed[key] {
				fail("Get finds %s (%s) but List does not list it", key, op.State)
			}
		}
	}

	stats, err := l.Stats(ctx, false)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	for _, st := range opledger.States {
		if stats.OperationsByState[st] != byState[st] {
			fail("Stats counts %d operations %s, List lists %d", stats.OperationsByState[st], st, byState[st])
		}
	}
	if n := byState[opledger.StateInProgress]; n != 0 {
		fail("%d operations are in_progress after every worker stopped and every lease was settled", n)
	}
	if stats.Unresolved != byState[opledger.StateUncertain]+byState[opledger.StateHeld] {
		fail("Stats.Unresolved is %d, uncertain + held are %d", stats.Unresolved, byState[opledger.StateUncertain]+byState[opledger.StateHeld])
	}
	sum := 0
	for _, a := range stats.Attempts {
		sum += a.Count
		if a.Outcome == opledger.AttemptOpen && a.Count != 0 {
			fail("%d attempts of %s are still open", a.Count, a.Destination)
		}
		if a.Count < liveAttempts[[2]string{a.Destination, a.Outcome}] {
			fail("Stats counts %d attempts %s at %s, fewer than the %d still recorded", a.Count, a.Outcome, a.Destination, liveAttempts[[2]string{a.Destination, a.Outcome}])
		}
		delete(liveAttempts, [2]string{a.Destination, a.Outcome})
	}
	for k, n := range liveAttempts {
		fail("%d attempts %s at %s are recorded but Stats does not count them", n, k[1], k[0])
	}
	if sum != stats.AttemptsTotal {
		fail("Stats.AttemptsTotal is %d, its rows add up to %d", stats.AttemptsTotal, sum)
	}
	s.mu.Lock()
	claims := s.observed["claims"] + s.observed["do actions"]
	successCalls := s.observed["success calls"]
	s.mu.Unlock()
	if stats.AttemptsTotal < claims {
		fail("Stats counts %d attempts, fewer than the %d claims the soak made", stats.AttemptsTotal, claims)
	}
	// Each confirmed effect was confirmed by one call that could confirm
	// one (a success report, a Do whose action succeeded, a lookup that
	// found it, an operator marking it succeeded); and every succeeded
	// operation or tombstone still kept is one of them. Tombstones
	// forgotten keep counting, so only a lower bound can be read back.
	if stats.ConfirmedEffects > successCalls {
		fail("Stats counts %d confirmed effects, more than the %d calls that could confirm one", stats.ConfirmedEffects, successCalls)
	}
	if stats.ConfirmedEffects < succeededKept {
		fail("Stats counts %d confirmed effects, fewer than the %d succeeded operations and tombstones", stats.ConfirmedEffects, succeededKept)
	}
	// Every effect of a key has the key's reference: no late success can
	// be a second effect.
	if stats.DuplicateEffects != 0 {
		fail("Stats counts %d duplicate effects; every effect of a key had the same reference", stats.DuplicateEffects)
	}

	events := s.checkEvents(ctx, l, fail)
	s.checkWorkflows(ctx, l, fail)

	// Retention of everything final, an hour on: the totals never go
	// down.
	res, err := l.Compact(ctx)
	if err != nil {
		fail("final compaction: %v", err)
	}
	after, err := l.Stats(ctx, false)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if after.ConfirmedEffects != stats.ConfirmedEffects || after.DuplicateEffects != stats.DuplicateEffects ||
		after.AttemptsTotal != stats.AttemptsTotal || !slices.Equal(after.Attempts, stats.Attempts) {
		fail("compaction changed the totals: confirmed %d → %d, duplicates %d → %d, attempts %d → %d (%v → %v)",
			stats.ConfirmedEffects, after.ConfirmedEffects, stats.DuplicateEffects, after.DuplicateEffects,
			stats.AttemptsTotal, after.AttemptsTotal, stats.Attempts, after.Attempts)
	}
	evAfter, err := l.EventStats(ctx, false)
	if err != nil {
		t.Fatalf("event stats: %v", err)
	}
	if evAfter.Events != events.Events || evAfter.Deliveries != events.Deliveries || evAfter.DuplicateDeliveries != events.DuplicateDeliveries {
		fail("event retention changed the event totals: %+v → %+v", events, evAfter)
	}
	s.summary = fmt.Sprintf("attempts %d, confirmed effects %d (of %d calls that could confirm one), duplicate effects %d, operations left %d (%d tombstones), by state %v; events %d, deliveries %d (%d duplicate), by status %v; final compaction: %d tombstoned, %d events forgotten",
		stats.AttemptsTotal, stats.ConfirmedEffects, successCalls, stats.DuplicateEffects, len(live), tombstones, byState,
		events.Events, events.Deliveries, events.DuplicateDeliveries, events.EventsByStatus, res.Tombstoned, res.EventsForgotten)
}

// checkOperation holds one recorded operation, with its attempts, to the
// state table of DESIGN.md section 3.
func (s *soak) checkOperation(op *opledger.Operation, attempts []*opledger.Attempt, fail func(string, ...any)) {
	key := op.Key
	if op.AttemptCount != len(attempts) {
		fail("%s counts %d attempts but has %d", key, op.AttemptCount, len(attempts))
	}
	succeeded, lateSuccess := 0, false
	for i, a := range attempts {
		if a.Number != i+1 {
			fail("%s: attempt %d is numbered %d", key, i+1, a.Number)
		}
		if i > 0 && a.FencingToken <= attempts[i-1].FencingToken {
			fail("%s: attempt %d has fencing token %d, not above %d", key, a.Number, a.FencingToken, attempts[i-1].FencingToken)
		}
		if a.Outcome == "" || a.FinishedAt == nil {
			fail("%s: attempt %d is still open (outcome %q) after every lease was settled", key, a.Number, a.Outcome)
		}
		if a.Outcome == string(opledger.OutcomeSucceeded) {
			succeeded++
		}
		if a.LateOutcome == string(opledger.OutcomeSucceeded) {
			lateSuccess = true
		}
		if (a.Outcome == string(opledger.OutcomeSucceeded) || a.LateOutcome == string(opledger.OutcomeSucceeded)) && a.DestinationRef != refFor(key) {
			fail("%s: attempt %d succeeded with reference %q, not %q", key, a.Number, a.DestinationRef, refFor(key))
		}
	}
	// Nothing leaves succeeded, and a success (on time or late) confirms
	// the effect: an operation with one is succeeded, and has at most one
	// attempt that succeeded while it held the operation.
	if succeeded > 1 {
		fail("%s has %d attempts that succeeded", key, succeeded)
	}
	if (succeeded > 0 || lateSuccess) && op.State != opledger.StateSucceeded {
		fail("%s is %s although an attempt reported its success (late: %v)", key, op.State, lateSuccess)
	}
	switch op.State {
	case opledger.StateSucceeded:
		if op.DestinationRef != refFor(key) {
			fail("%s succeeded with reference %q, not %q", key, op.DestinationRef, refFor(key))
		}
	default:
		if op.DestinationRef != "" {
			fail("%s is %s but has the reference %q", key, op.State, op.DestinationRef)
		}
	}
	if (op.State == opledger.StateFailed) != (op.FailureKind != "") {
		fail("%s is %s with failure kind %q", key, op.State, op.FailureKind)
	}
	if op.DuplicateEffects != 0 {
		fail("%s has %d duplicate effects", key, op.DuplicateEffects)
	}
}

// checkEvents reads every event still recorded and checks them and the
// event totals against the deliveries the soak made; it returns the
// totals.
func (s *soak) checkEvents(ctx context.Context, l *opledger.Ledger, fail func(string, ...any)) *opledger.EventStats {
	t := s.t
	stats, err := l.EventStats(ctx, false)
	if err != nil {
		t.Fatalf("event stats: %v", err)
	}
	s.mu.Lock()
	first, dup := s.observed["event deliveries first"], s.observed["event deliveries duplicate"]
	statuses := map[opledger.EventStatus]int{}
	for _, st := range []opledger.EventStatus{opledger.EventApplied, opledger.EventOutOfOrder, opledger.EventConflict, opledger.EventUnmapped} {
		statuses[st] = s.observed["events "+string(st)]
	}
	s.mu.Unlock()
	// Each delivery the ledger acknowledged is counted once, forever
	// (EventStats keeps what retention deleted), as the first of its
	// event or a duplicate, and the first with the status it answered.
	if stats.Events != first || stats.DuplicateDeliveries != dup || stats.Deliveries != first+dup {
		fail("EventStats counts %d events, %d deliveries, %d duplicates; the soak had %d first and %d duplicate deliveries acknowledged",
			stats.Events, stats.Deliveries, stats.DuplicateDeliveries, first, dup)
	}
	total := 0
	for st, n := range stats.EventsByStatus {
		total += n
		if n != statuses[st] {
			fail("EventStats counts %d events %s; the first deliveries answered %d", n, st, statuses[st])
		}
	}
	if total != stats.Events {
		fail("EventStats' statuses add up to %d events, not %d", total, stats.Events)
	}

	var recs []*opledger.EventRecord
	for cursor := ""; ; {
		page, err := l.ListEvents(ctx, opledger.EventListOptions{Limit: opledger.MaxListLimit, Cursor: cursor})
		if err != nil {
			t.Fatalf("list events: %v", err)
		}
		recs = append(recs, page.Items...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	missing := 0
	for _, rec := range recs {
		d, err := l.GetEvent(ctx, rec.Source, rec.EventID)
		if err != nil {
			fail("event %s is listed but GetEvent fails: %v", rec.EventID, err)
			continue
		}
		firsts := 0
		for _, dl := range d.Deliveries {
			if !dl.Duplicate {
				firsts++
			}
			if dl.PayloadDiffers {
				fail("event %s: delivery %s is said to differ, but every delivery carried the same payload", rec.EventID, dl.DeliveryID)
			}
		}
		if firsts > 1 {
			fail("event %s has %d first deliveries", rec.EventID, firsts)
		}
		prefix, n, ok := parseEventID(rec.EventID)
		if !ok {
			fail("event %s is not one of the soak's", rec.EventID)
			continue
		}
		m, err := s.rules.Map(eventFor(prefix, n))
		if err != nil {
			t.Fatalf("map event %s: %v", rec.EventID, err)
		}
		if rec.Rule != m.Rule {
			fail("event %s was mapped by rule %q, not %q", rec.EventID, rec.Rule, m.Rule)
		}
		if m.Rule == "" && rec.Status != opledger.EventUnmapped {
			fail("event %s matches no rule but is %s", rec.EventID, rec.Status)
		}
		if rec.Status != opledger.EventApplied {
			if len(rec.OperationKeys) != 0 {
				fail("event %s is %s yet names operations %v", rec.EventID, rec.Status, rec.OperationKeys)
			}
			continue
		}
		// An applied event names, for each of its rule's intents, the
		// intent's key or its update key, in the rule's order.
		if len(rec.OperationKeys) != len(m.Intents) {
			fail("event %s names operations %v for %d intents", rec.EventID, rec.OperationKeys, len(m.Intents))
			continue
		}
		for i, key := range rec.OperationKeys {
			if key != m.Intents[i].Key && (m.Updates[i] == nil || key != m.Updates[i].Key) {
				fail("event %s names %s for its intent %s", rec.EventID, key, m.Intents[i].Key)
			}
			if _, err := l.Get(ctx, key); errors.Is(err, opledger.ErrNotFound) {
				missing++
			} else if err != nil {
				t.Fatalf("get %s: %v", key, err)
			}
		}
		if len(d.Operations) > len(rec.OperationKeys) {
			fail("GetEvent of %s returns %d operations for %d keys", rec.EventID, len(d.Operations), len(rec.OperationKeys))
		}
	}
	// An applied event's operation is recorded, or compacted to a
	// tombstone, or its tombstone was forgotten (before the event, when
	// the event matched an operation finished earlier).
	if missing > 0 && s.forgotten.Load() == 0 {
		fail("%d operations of applied events are not found, and no tombstone was forgotten", missing)
	}
	s.add(s.observed, "event operations forgotten", missing)
	return stats
}

// checkWorkflows holds every workflow to DESIGN.md section 5: a step is
// recorded only once the step before it has succeeded.
func (s *soak) checkWorkflows(ctx context.Context, l *opledger.Ledger, fail func(string, ...any)) {
	for n := range numWorkflows {
		key := workflowKey(n)
		w, err := l.GetWorkflow(ctx, key)
		if errors.Is(err, opledger.ErrNotFound) {
			continue // never put, or finished and forgotten
		}
		if err != nil {
			s.t.Fatalf("get workflow %s: %v", key, err)
		}
		s.observe("workflows " + string(w.Status))
		if len(w.Steps) != len(stepNames) {
			fail("workflow %s has %d steps", key, len(w.Steps))
			continue
		}
		current := ""
		for i, st := range w.Steps {
			if st.Name != stepNames[i] || st.Key != opledger.WorkflowStepKey(key, st.Name) {
				fail("workflow %s: step %d is %s (%s)", key, i, st.Name, st.Key)
			}
			if i > 0 && st.State != opledger.StepWaiting && w.Steps[i-1].State != opledger.StepState(opledger.StateSucceeded) {
				fail("workflow %s: step %s is %s while step %s is %s", key, st.Name, st.State, w.Steps[i-1].Name, w.Steps[i-1].State)
			}
			if st.Operation != nil && st.State != opledger.StepState(st.Operation.State) {
				fail("workflow %s: step %s is %s but its operation is %s", key, st.Name, st.State, st.Operation.State)
			}
			if current == "" && st.State != opledger.StepState(opledger.StateSucceeded) {
				current = st.Name
			}
		}
		if w.CurrentStep != current {
			fail("workflow %s: current step %q, the first not succeeded is %q", key, w.CurrentStep, current)
		}
		if (current == "") != (w.Status == opledger.WorkflowSucceeded) {
			fail("workflow %s is %s with current step %q", key, w.Status, current)
		}
	}
}

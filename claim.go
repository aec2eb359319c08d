package opledger

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/opledger/opledger/internal/store"
)

// ClaimOptions tune a claim.
type ClaimOptions struct {
	// Worker names the claimer in the attempt and timeline. Default: the
	// Ledger's worker name.
	Worker string
	// Lease overrides the Ledger's lease duration for this claim. Zero
	// means the Ledger's (Options.Lease); a negative lease, or one above
	// MaxLease, is refused with ErrInvalidInput.
	Lease time.Duration
	// Intent, if set, records the operation first when its key is new, with
	// the same rules as Record, in the same transaction as the claim: one
	// round trip to the store instead of two. Its Key must equal the key
	// being claimed.
	Intent *Intent
	// Dispatch marks the attempt dispatched in the claim's own write, as a
	// Dispatch call right after it would: for a caller that starts the
	// external call as soon as the claim returns (the proxy does). It
	// saves one durable write. From the claim on, an interrupted attempt
	// becomes uncertain when its lease expires, never pending, exactly as
	// after Dispatch; a caller that then does not make the call reports
	// OutcomeRetryable with nothing sent.
	Dispatch bool
	// CallTimeout, when positive, is how long the caller's external call
	// may take from the claim. A protected retry whose destination
	// idempotency key is forgotten (Claim.ProtectedUntil) before the
	// claim's time plus CallTimeout is held ("protection expired") and
	// the claim refused, as one claimed after the key's retention is: its
	// call could reach the destination unprotected. 0 checks the claim's
	// time only; a negative one, or one above MaxLease, is refused with
	// ErrInvalidInput.
	CallTimeout time.Duration
}

// Claim is a held claim on an operation: the right to make one attempt.
type Claim struct {
	// AttemptID identifies the attempt (a ULID).
	AttemptID string `json:"attempt_id"`
	// FencingToken must accompany Dispatch and Report; a newer claim makes
	// it stale.
	FencingToken int64 `json:"fencing_token"`
	// LeaseExpiresAt is when the claim lapses, by the store's clock.
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// IdempotencyKey is the destination idempotency key: the same on every
	// attempt of this version.
	IdempotencyKey string `json:"destination_idempotency_key"`
	// Protected is true when this attempt retries an uncertain one under the
	// destination's idempotency key.
	Protected bool `json:"protected"`
	// ProtectedUntil, on a protected claim, is when the destination may
	// forget its idempotency key: do not start the call at or after it
	// (report OutcomeRetryable, nothing sent, instead).
	ProtectedUntil time.Time `json:"protected_until,omitzero"`
	// Operation is the operation as claimed.
	Operation *Operation `json:"operation"`
}

// need returns nil when the key has a row, and otherwise the error a
// request for it gets: a StateError from its tombstone, or ErrNotFound.
func (t *txn) need(op string) error {
	if t.op != nil {
		return nil
	}
	ts, err := t.getTombstone()
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s %s: operation %w", op, t.key, ErrNotFound)
	}
	if err != nil {
		return err
	}
	t.tombstone = ts
	return &StateError{Op: op, Key: t.key, State: State(ts.State), Operation: tombstoneOperation(ts)}
}

// Claim atomically claims a pending, due operation for one attempt. Exactly
// one of several concurrent claims wins; the others get a *StateError
// (ErrInProgress). Claiming a succeeded operation returns a *StateError
// matching ErrAlreadySucceeded whose Operation carries the saved result:
// nothing must be sent again. A pending operation whose NotBefore is still
// ahead is refused with ErrNotDue. An expired lease found on the way is
// settled first, as ExpireLeases would.
func (l *Ledger) Claim(ctx context.Context, key string, opts ClaimOptions) (*Claim, error) {
	var fp string
	if opts.Intent != nil {
		in := *opts.Intent
		if in.Key != key {
			return nil, invalidInput("intent key differs from the claimed key")
		}
		var err error
		if fp, err = in.normalizeKnown(ctx); err != nil {
			return nil, err
		}
		opts.Intent = &in
	}
	worker := opts.Worker
	if worker == "" {
		worker = l.worker
	}
	if err := checkWorker(worker); err != nil {
		return nil, err
	}
	lease, err := claimLease("ClaimOptions", opts.Lease, l.opts.Lease)
	if err != nil {
		return nil, err
	}
	if err := checkCallTimeout("ClaimOptions", opts.CallTimeout); err != nil {
		return nil, err
	}
	if opts.Intent == nil {
		// Refuse without taking the write lock when a plain read already
		// shows the operation cannot be claimed. The claim itself is
		// still decided by the conditional write below.
		if err := l.precheckClaim(ctx, key); err != nil {
			return nil, err
		}
	}
	var claim *Claim
	var last *txn
	decide := claimDecision(worker, l.attributed(worker), lease, opts.CallTimeout, opts.Intent, fp, opts.Dispatch, &claim)
	capture := func(t *txn) error {
		last = t
		return decide(t)
	}
	if opts.Intent != nil {
		// Most claims with an intent are of a new key: record and claim
		// it without reading, on the condition that the key is new.
		op, after, done, err := l.speculate(ctx, key, snapshot{}, decide)
		if err != nil {
			return nil, err
		}
		if done {
			if after != nil {
				return nil, after
			}
			claim.Operation = op
			return claim, nil
		}
		claim = nil
	}
	op, err := l.mutate(ctx, key, capture)
	if err != nil {
		return nil, err
	}
	l.snapshots.keep(last, nil)
	claim.Operation = op
	return claim, nil
}

// MaxLease bounds every lease (Options.Lease, ClaimOptions.Lease,
// ExtendLease): a week. A longer one is refused as a mistake, a unit
// mixed up say, since it would keep a dead worker's operation
// in_progress, out of reach of ExpireLeases, for as long.
const MaxLease = 7 * 24 * time.Hour

// claimLease is the lease of a claim whose options (named by opts) give
// lease: the Ledger's, def, when lease is 0. A negative lease is refused
// as Open refuses a negative Options.Lease: a mistake, never silently
// replaced by the default.
func claimLease(opts string, lease, def time.Duration) (time.Duration, error) {
	switch {
	case lease < 0:
		return 0, invalidInput("%s.Lease is %s: it must be positive (0 means the Ledger's lease)", opts, lease)
	case lease > MaxLease:
		return 0, invalidInput("%s.Lease is %s: it must be at most %s (MaxLease)", opts, lease, MaxLease)
	case lease == 0:
		return def, nil
	}
	return lease, nil
}

// checkCallTimeout refuses the CallTimeout of a claim's options (named by
// opts) that is negative or above MaxLease.
func checkCallTimeout(opts string, d time.Duration) error {
	if d < 0 || d > MaxLease {
		return invalidInput("%s.CallTimeout is %s: it must be 0 (the claim's time only) up to %s (MaxLease)", opts, d, MaxLease)
	}
	return nil
}

// claimDecision is the claim transition: it records intent first when set
// and the key is new (naming recorder as who recorded it), settles an
// expired lease, and claims a pending, due operation, marking the attempt
// dispatched when dispatch is set, leaving the claim in *out. A protected
// retry whose window closes within callTimeout is held instead.
func claimDecision(worker, recorder string, lease, callTimeout time.Duration, intent *Intent, fp string, dispatch bool, out **Claim) func(t *txn) error {
	return func(t *txn) error {
		if intent != nil {
			if err := t.record(intent, fp, recorder); err != nil {
				return err
			}
		}
		if err := t.need("claim"); err != nil {
			return err
		}
		if err := t.settleExpiredLease(); err != nil {
			return err
		}
		if State(t.op.State) == StatePending {
			// Only a retry not yet claimed: one in progress belongs to its
			// attempt, whose dispatch or lease decides (another caller's
			// refused claim must not move it).
			t.expireProtection("claimed", callTimeout)
			// Recorded before its destination required approval: it
			// waits for one now, and the claim is refused.
			t.requireApproval(t.policy.approvalWhy(t.op.Destination), ActorSystem)
		}
		if State(t.op.State) != StatePending || t.op.NotBefore.After(t.now) {
			if t.dirty {
				// Keep what was decided on the way (a recorded intent, a
				// settled lease) and refuse after the commit.
				t.after = t.refuse("claim")
				return nil
			}
			return t.refuse("claim")
		}
		a := &store.Attempt{
			ID: ulid.Make().String(), Tenant: t.tenant, Key: t.key, Destination: t.op.Destination, Number: t.op.AttemptCount + 1,
			FencingToken: t.op.FencingToken + 1, Worker: worker, Protected: t.op.Protected,
			ClaimedAt: t.now, LeaseExpiresAt: t.nowPlus(lease), Version: t.op.Version,
		}
		t.queue(store.Write{InsertAttempt: a})
		t.op.AttemptCount = a.Number
		t.op.FencingToken = a.FencingToken
		t.op.CurrentAttemptID = a.ID
		t.op.Dispatched = false
		evidence := fmt.Sprintf("attempt %d, fencing token %d, lease until %s", a.Number, a.FencingToken, textTime(a.LeaseExpiresAt))
		if a.Protected {
			evidence += ", protected retry under the destination idempotency key"
		}
		t.move(StateInProgress, worker, a.ID, "claimed", evidence)
		t.op.LeaseExpiresAt = a.LeaseExpiresAt
		if dispatch {
			// The attempt's insert is queued, not yet written: it carries
			// the mark.
			t.markDispatched(a)
		}
		*out = &Claim{AttemptID: a.ID, FencingToken: a.FencingToken, LeaseExpiresAt: a.LeaseExpiresAt,
			IdempotencyKey: DestinationIdempotencyKey(t.tenant, t.key, t.op.Version), Protected: a.Protected,
			ProtectedUntil: t.op.ProtectedUntil}
		return nil
	}
}

// protectionExpired tells whether a protected retry's window has closed,
// or closes within d: the destination may have forgotten its idempotency
// key by then, so a retry could repeat the effect.
func (t *txn) protectionExpired(d time.Duration) bool {
	return t.op.Protected && !t.op.ProtectedUntil.IsZero() && !t.now.Add(d).Before(t.op.ProtectedUntil)
}

// expireProtection holds a pending or in-progress protected retry whose
// window closed before the retry could be step ("claimed", "dispatched"),
// or closes within callTimeout, before a call starting now could end.
func (t *txn) expireProtection(step string, callTimeout time.Duration) {
	if !t.protectionExpired(callTimeout) || (State(t.op.State) != StatePending && State(t.op.State) != StateInProgress) {
		return
	}
	until := t.op.ProtectedUntil
	t.unprotect()
	if t.now.Before(until) {
		t.hold(ActorSystem, "protection expired",
			fmt.Sprintf("the destination idempotency key's retention ends at %s, before a call %s now could end (it may take %s); nothing was sent, and a retry could duplicate the effect",
				textTime(until), step, callTimeout))
		return
	}
	t.hold(ActorSystem, "protection expired",
		fmt.Sprintf("the destination idempotency key's retention ended at %s before the protected retry was %s; nothing was sent, and a retry could duplicate the effect",
			textTime(until), step))
}

// unprotect ends the protection of the next attempt.
func (t *txn) unprotect() {
	t.op.Protected = false
	t.op.ProtectedUntil = time.Time{}
}

// ErrNothingDue: ClaimNext found no pending operation that is due.
var ErrNothingDue = errors.New("no operation is due")

// ClaimNextOptions select what ClaimNext may claim.
type ClaimNextOptions struct {
	// Worker as in ClaimOptions: who claims; default Options.Worker.
	Worker string
	// Lease as in ClaimOptions: how long the claim holds; default
	// Options.Lease.
	Lease time.Duration
	// Destinations limits the claim to these destinations; empty means any.
	Destinations []string
	// AllTenants claims across every tenant instead of the Ledger's own.
	AllTenants bool
	// Dispatch marks the attempt dispatched in the claim's own write, as in
	// ClaimOptions: for a worker that makes the external call as soon as
	// ClaimNext returns, one durable write fewer than ClaimNext then
	// Dispatch. A worker that then does not make the call reports
	// OutcomeRetryable with nothing sent.
	Dispatch bool
	// CallTimeout as in ClaimOptions: a protected retry whose window
	// closes before a call claimed now could end is held, and the next
	// due operation taken.
	CallTimeout time.Duration
	// Skip names operations not to claim, due or not: those the caller
	// is still calling in a call it stopped waiting for (the executor's
	// abandoned calls, whose claim may have been lost), so that they are
	// not claimed only to be given back. A Tenant of "" is the Ledger's
	// own.
	Skip []OperationRef
}

// OperationRef names an operation of any tenant.
type OperationRef struct {
	// Tenant is the operation's tenant.
	Tenant string
	// Key is its key.
	Key string
}

// ClaimNext claims the pending operation that has been due longest: the
// work-queue form of Claim. Concurrent callers take different operations
// (on PostgreSQL the candidate row is locked with FOR UPDATE SKIP LOCKED;
// SQLite has a single writer). It returns ErrNothingDue when nothing is due.
// Claim.Operation.Tenant tells the tenant when AllTenants is set.
//
// A due operation found unclaimable on the way is moved and committed, and
// the next one taken: a protected retry whose window closed is held, and
// one recorded before its destination required approval
// (Options.DestinationsRequiringApproval) waits for it. Such moves are
// committed in transactions of a bounded size; after a few hundred of
// them in one call, ClaimNext returns ErrNothingDue and the next call
// goes on.
func (l *Ledger) ClaimNext(ctx context.Context, opts ClaimNextOptions) (*Claim, error) {
	worker := opts.Worker
	if worker == "" {
		worker = l.worker
	}
	if err := checkWorker(worker); err != nil {
		return nil, err
	}
	lease, err := claimLease("ClaimNextOptions", opts.Lease, l.opts.Lease)
	if err != nil {
		return nil, err
	}
	if err := checkCallTimeout("ClaimNextOptions", opts.CallTimeout); err != nil {
		return nil, err
	}
	tenant := l.tenant
	if opts.AllTenants {
		tenant = ""
	}
	var skip []store.OperationID
	for _, ref := range opts.Skip {
		skip = append(skip, store.OperationID{Tenant: cmp.Or(ref.Tenant, l.tenant), Key: ref.Key})
	}
	// movedOnly is set when a transaction moved as many due operations
	// as it may and claimed none: another looks on, so that a backlog of
	// operations that turn out unclaimable (recorded before their
	// destination required approval) does not hide the due ones behind
	// it from this call.
	movedOnly := false
	for range maxConflictRetries {
		var claim *Claim
		var last *txn
		movedOnly = false
		err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			now, err := l.now(ctx, tx)
			if err != nil {
				return err
			}
			// A due operation can turn out unclaimable and be moved on
			// the way (a protected retry whose window closed is held; one
			// whose destination now requires approval waits for it):
			// keep that and take the next one.
			moved := false
			for range maxConflictRetries {
				ids, err := tx.LockDue(ctx, store.DueParams{Tenant: tenant, Destinations: opts.Destinations, Skip: skip, Now: now, Limit: 1})
				if err != nil {
					return err
				}
				if len(ids) == 0 {
					if moved {
						return nil // commit what was moved; nothing to claim
					}
					return ErrNothingDue
				}
				decide := claimDecision(worker, "", lease, opts.CallTimeout, nil, "", opts.Dispatch, &claim)
				op, refusal, err := l.decideIn(ctx, tx, ids[0].Tenant, ids[0].Key, func(t *txn) error {
					last = t
					return decide(t)
				})
				if err != nil {
					return err
				}
				if refusal == nil {
					claim.Operation = op
					return nil
				}
				if op == nil || op.State == StatePending {
					return store.ErrConflict // changed since selected: look again
				}
				moved = true
			}
			movedOnly = true
			return nil // commit what was moved; look on in another transaction
		})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if claim == nil {
			if movedOnly {
				continue
			}
			return nil, ErrNothingDue
		}
		l.snapshots.keep(last, nil)
		return claim, nil
	}
	if movedOnly {
		return nil, ErrNothingDue // what was moved is committed; the caller asks again
	}
	return nil, fmt.Errorf("claim next: gave up after %d write conflicts: %w", maxConflictRetries, store.ErrConflict)
}

// precheckClaim returns the refusal a claim of key would get, judging from
// a read outside any write transaction; nil when the claim may succeed.
func (l *Ledger) precheckClaim(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		row, err := r.GetOperation(ctx, l.tenant, key)
		if err != nil {
			return nil // unknown here: let the transaction decide
		}
		now, err := l.now(ctx, r)
		if err != nil {
			return err
		}
		switch State(row.State) {
		case StatePending:
			if !row.NotBefore.After(now) {
				return nil
			}
		case StateInProgress:
			if row.LeaseExpiresAt.Before(now) {
				return nil
			}
		}
		return &StateError{Op: "claim", Key: key, State: State(row.State), Operation: toOperation(row)}
	})
}

// settleExpiredLease applies lease expiry to an in_progress operation whose
// lease has ended: not dispatched → pending (the attempt is abandoned);
// dispatched → uncertain, never pending.
func (t *txn) settleExpiredLease() error {
	if State(t.op.State) != StateInProgress || !t.op.LeaseExpiresAt.Before(t.now) {
		return nil
	}
	if err := t.writeQueued(); err != nil {
		return err
	}
	t.prefetched, t.prefetchedID = nil, "" // the attempt is written below
	a, err := t.getAttempt(t.op.CurrentAttemptID)
	if err != nil {
		return fmt.Errorf("settle lease of %s: %w", t.key, err)
	}
	a.FinishedAt = t.now
	if t.confirmedWhileHeld() {
		a.Outcome = AttemptAbandoned
		how := fmt.Sprintf("the lease of attempt %d expired before dispatch", a.Number)
		if t.op.Dispatched {
			a.Outcome = AttemptLeaseExpired
			how = fmt.Sprintf("the lease of attempt %d expired after dispatch", a.Number)
		}
		if err := t.settleConfirmed(a, ActorSystem, how); err != nil {
			return err
		}
		return t.updateAttempt(a)
	}
	earlier, err := t.earlierVersionReported(a)
	if err != nil {
		return err
	}
	if earlier != nil {
		a.Outcome = AttemptLeaseExpired
		t.hold(ActorSystem, eventAfterEarlierVersion, fmt.Sprintf("the lease of attempt %d expired after dispatch, with no report; %s",
			a.Number, earlierVersionEvidence(earlier, t.op.Version)))
	} else if t.op.Dispatched {
		a.Outcome = AttemptLeaseExpired
		t.move(StateUncertain, ActorSystem, a.ID, "lease expired after dispatch",
			"the call may have reached the destination; worker "+a.Worker+" never reported")
	} else {
		a.Outcome = AttemptAbandoned
		t.move(StatePending, ActorSystem, a.ID, "lease expired before dispatch",
			"no dispatch mark was written, so the call is taken as never made; worker "+a.Worker+" abandoned the attempt")
		t.op.NotBefore = t.now
	}
	return t.updateAttempt(a)
}

// ExpireLeases settles every expired lease in the store, across tenants:
// operations not yet dispatched return to pending, dispatched ones become
// uncertain. It returns how many it settled. Maintain runs it every
// MaintainOptions.LeaseSweep: a program that embeds the library starts
// Maintain (opledger serve and opledger proxy do) rather than calling
// ExpireLeases itself. A lease that cannot be settled does not stop the
// others: the error counts those that failed and gives the first one's
// cause, with its key left out (the error is meant for a log); they are
// tried again on the next run.
func (l *Ledger) ExpireLeases(ctx context.Context) (int, error) {
	total := 0
	var failed sweepFailures
	err := sweepPages(ctx, l, func(ctx context.Context, r store.Reader, now time.Time, after store.OperationID) ([]store.OperationID, error) {
		return r.ExpiredLeases(ctx, now, after, sweepPage)
	}, func(id store.OperationID) error {
		settled, err := l.expireLease(ctx, id)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			failed.add("a lease", id, err)
		case settled:
			total++
		}
		return nil
	})
	if err != nil {
		return total, fmt.Errorf("expire leases: %w", err)
	}
	return total, failed.err("expire leases", "settled")
}

// expireLease settles the lease of operation id if it has run out, and
// reports whether it did.
func (l *Ledger) expireLease(ctx context.Context, id store.OperationID) (settled bool, err error) {
	tl := &Ledger{shared: l.shared, tenant: id.Tenant}
	_, err = tl.mutate(ctx, id.Key, func(t *txn) error {
		settled = false // the function runs again after a conflict
		if t.op == nil {
			return nil
		}
		before := t.op.State
		if err := t.settleExpiredLease(); err != nil {
			return err
		}
		settled = t.op.State != before
		return nil
	})
	return settled, err
}

// checkAttempt verifies that attemptID with token holds the operation. It
// returns the attempt row (nil if unknown) and whether it is current.
func (t *txn) checkAttempt(attemptID string, token int64) (*store.Attempt, bool, error) {
	if err := t.writeQueued(); err != nil {
		return nil, false, err
	}
	var a *store.Attempt
	var err error
	if t.prefetchedID != "" && t.prefetchedID == attemptID {
		a, err = t.prefetched, nil
		if a == nil {
			err = store.ErrNotFound
		}
	} else {
		a, err = t.getAttempt(attemptID)
	}
	t.prefetched, t.prefetchedID = nil, "" // used once: later reads see later writes
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, fmt.Errorf("attempt %s of %s: %w", attemptID, t.key, ErrNotFound)
	}
	if err != nil {
		return nil, false, err
	}
	current := State(t.op.State) == StateInProgress && t.op.CurrentAttemptID == attemptID &&
		t.op.FencingToken == token && a.FencingToken == token
	return a, current, nil
}

func (t *txn) stale(a *store.Attempt, token int64) *StaleError {
	return &StaleError{Key: t.key, AttemptID: a.ID, FencingToken: token, AttemptToken: a.FencingToken,
		Current: t.op.FencingToken, Operation: toOperation(t.op), ended: endedWith(a)}
}

// endedWith is what attempt a ended with, for a StaleError: its outcome,
// or notSentConfirmed for one abandoned because an earlier attempt had
// confirmed the effect.
func endedWith(a *store.Attempt) string {
	// The ledger's own endings only: a worker's report may carry an
	// error of its own that reads alike ("not sent: invalid address").
	if a.Outcome == AttemptAbandoned && (a.Error == notSentConfirmed || a.Error == notSentOtherContent ||
		a.Error == notSentMayHaveCalled || strings.HasPrefix(a.Error, notSentEarlierVersion)) {
		return a.Error
	}
	return a.Outcome
}

// notSent starts the error of an attempt the ledger ended unsent
// (abandoned) while it held the operation, for a reason its worker could
// not know: the rest says which (notSentConfirmed, notSentEarlierVersion,
// notSentOtherContent, notSentMayHaveCalled).
const notSent = "not sent: "

// notSentConfirmed is the error of an attempt ended unsent (abandoned)
// because an earlier attempt's late report had confirmed the effect while
// it held the operation (settleConfirmed).
const notSentConfirmed = "not sent: an earlier attempt's late report had confirmed the effect"

// notSentEarlierVersion starts the error of an attempt ended unsent
// (abandoned) because an attempt of an earlier version reported that its
// call acted, or may have, while it held the operation
// (earlierVersionActed).
const notSentEarlierVersion = notSent + "an attempt on an earlier version reported that its call "

// notSentOtherContent is the error of an attempt ended unsent because a
// lookup found a record with other content while it held the operation
// (foundAfterDecision): the operation is held.
const notSentOtherContent = notSent + "a lookup found a record with other content, and the operation is held for a person"

// notSentMayHaveCalled is the error of an attempt ended unsent because an
// earlier attempt, given up before its dispatch mark, reported late that
// its call may have acted all the same while this one held the operation
// (staleReport): the operation waits for reconciliation.
const notSentMayHaveCalled = notSent + "an earlier attempt reported that its call may have acted, and the operation waits for reconciliation"

// heldClaim checks, for the step what ("dispatch"), that attemptID with
// token still holds the operation, and returns its attempt if so. If not,
// it returns nil: with an error for a stale token or an unknown attempt;
// without one when the lease has run out, which it settles now (not
// dispatched: back to pending; dispatched: uncertain), leaving the
// refusal for after the commit (t.after), since another worker may claim
// the operation any moment.
func (t *txn) heldClaim(what, attemptID string, token int64) (*store.Attempt, error) {
	if err := t.need(what); err != nil {
		return nil, err
	}
	a, current, err := t.checkAttempt(attemptID, token)
	if err != nil {
		return nil, err
	}
	if current && t.op.LeaseExpiresAt.Before(t.now) {
		if err := t.settleExpiredLease(); err != nil {
			return nil, err
		}
		t.after = t.stale(a, token)
		return nil, nil
	}
	if !current {
		return nil, t.stale(a, token)
	}
	return a, nil
}

// Dispatch marks the recovery point: from now on the external call may have
// started, so a lost lease makes the operation uncertain instead of pending.
// Call it immediately before the external call. A stale token, or a lease
// that has already run out, is refused with a *StaleError: do not call the
// destination then.
func (l *Ledger) Dispatch(ctx context.Context, key, attemptID string, token int64) (*Operation, error) {
	return l.transition(ctx, key, attemptID, func(t *txn) error {
		a, err := t.heldClaim("dispatch", attemptID, token)
		if a == nil {
			return err
		}
		if t.op.Dispatched {
			return nil // repeated dispatch mark of the same attempt
		}
		if t.confirmedWhileHeld() {
			// The effect exists already: the call must not start.
			a.Outcome = AttemptAbandoned
			a.FinishedAt = t.now
			if err := t.settleConfirmed(a, a.Worker, fmt.Sprintf("attempt %d was not dispatched", a.Number)); err != nil {
				return err
			}
			if err := t.updateAttempt(a); err != nil {
				return err
			}
			t.after = t.refuse("dispatch")
			return nil
		}
		if a.Protected && t.protectionExpired(0) {
			// The claim came in time but the call would not: give the
			// attempt up unsent and hold the operation.
			a.Outcome = AttemptAbandoned
			a.FinishedAt = t.now
			if err := t.updateAttempt(a); err != nil {
				return err
			}
			t.expireProtection("dispatched", 0)
			t.after = t.refuse("dispatch")
			return nil
		}
		t.markDispatched(a)
		return t.updateAttempt(a)
	})
}

// ExtendLease lengthens the lease of a claim still held, so that a call
// that runs longer than the lease (a large answer relayed to a slow
// caller) does not lose it: the lease then ends d after now, by the
// store's clock; a lease already ending later is left as it is. Call it
// well before the lease runs out, every third of d or so. A stale token,
// or a lease that has already run out (the lease is then settled: an
// operation dispatched becomes uncertain), is refused with a *StaleError:
// another worker may hold the operation, or be about to. It adds no
// timeline entry: the state does not change.
func (l *Ledger) ExtendLease(ctx context.Context, key, attemptID string, token int64, d time.Duration) (*Operation, error) {
	if d <= 0 || d > MaxLease {
		return nil, invalidInput("the lease must be extended by more than 0 and at most %s (MaxLease), got %s", MaxLease, d)
	}
	return l.transition(ctx, key, attemptID, func(t *txn) error {
		a, err := t.heldClaim("extend the lease of", attemptID, token)
		if a == nil {
			return err
		}
		end := t.nowPlus(d)
		if !end.After(t.op.LeaseExpiresAt) {
			return nil
		}
		t.op.LeaseExpiresAt, a.LeaseExpiresAt = end, end
		t.dirty = true
		return t.updateAttempt(a)
	})
}

// NoteCallAbandoned records on the operation's timeline that the call of
// the attempt that holds it (attemptID, with its token) was abandoned by
// its worker and still runs: it ignored its context past its limit, and
// the worker stopped waiting for it, keeping its claim (ExtendLease)
// until it returns. An operation that stays in progress for as long as
// such a call runs then says why to whoever looks at it (the console,
// the API), not only in its worker's log. evidence says what happened;
// it is masked and cut as a reason is. The note is made once per
// attempt: a second one (its answer lost, sent again) records nothing.
// The state does not change. A stale token, or a lease that has already
// run out, is refused with a *StaleError, as by ExtendLease.
func (l *Ledger) NoteCallAbandoned(ctx context.Context, key, attemptID string, token int64, evidence string) (*Operation, error) {
	if strings.TrimSpace(evidence) == "" {
		return nil, invalidInput("the note of an abandoned call needs evidence: what happened to the call")
	}
	return l.transition(ctx, key, attemptID, func(t *txn) error {
		a, err := t.heldClaim("note the abandoned call of", attemptID, token)
		if a == nil {
			return err
		}
		entries, err := t.listTimeline()
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Event == eventCallAbandoned && e.AttemptID == a.ID {
				return nil
			}
		}
		t.note(a.Worker, a.ID, eventCallAbandoned, t.keep(evidence, maxReasonLength))
		return nil
	})
}

// eventCallAbandoned is the timeline event of NoteCallAbandoned.
const eventCallAbandoned = "call abandoned, still running"

// markDispatched records that the external call of a, the current
// attempt, may start.
func (t *txn) markDispatched(a *store.Attempt) {
	a.DispatchedAt = t.now
	t.op.Dispatched = true
	if t.op.FirstDispatchedAt.IsZero() {
		t.op.FirstDispatchedAt = t.now
	}
	t.dirty = true
	t.note(a.Worker, a.ID, "dispatched", "external call may start")
}

// mayHaveCalled dates the operation's first call, if it has none yet,
// from attempt a's claim when a reports outcome (succeeded or uncertain)
// without a dispatch mark: its call may have acted all the same. The
// operation is then no longer "never sent" (pendingNeverSent), so its
// content cannot be revised under a new idempotency key after a call
// that may have made the effect.
func (t *txn) mayHaveCalled(a *store.Attempt, outcome Outcome) {
	if (outcome != OutcomeSucceeded && outcome != OutcomeUncertain) || !t.op.FirstDispatchedAt.IsZero() {
		return
	}
	t.op.FirstDispatchedAt = a.ClaimedAt
	t.dirty = true
}

// Report is what an attempt learned from its external call.
type Report struct {
	// Outcome is what the call did: OutcomeSucceeded, OutcomeRejected,
	// OutcomeRetryable or OutcomeUncertain.
	Outcome Outcome
	// DestinationRef identifies the effect at the destination; required
	// with OutcomeSucceeded.
	DestinationRef string
	// Response is the destination's answer to save and replay (JSON).
	Response json.RawMessage
	// Error is a safe description of the failure: no secrets, no personal
	// data. It is shown to operators.
	Error string
	// RetryAfter is the destination's Retry-After for retryable outcomes.
	RetryAfter time.Duration

	// uncut and note are set by WithNote (noted): the error text as it
	// was before WithNote cut it, and the note it added. The ledger masks
	// the values of sensitive fields in uncut before it cuts it
	// (keptError), so that a value across the cut is not stored in part.
	uncut, note string
	noted       bool

	// ref and refQuote are set by ReportOf for a success whose destination
	// reference the ledger cannot store: the reference, and its quote in
	// the error text (quoteRef, cut). The ledger quotes it again from the
	// whole reference with the values of sensitive fields masked
	// (requoted), so that a value across the quote's cut is not stored in
	// part.
	ref, refQuote string
}

const maxErrorLength = 1000

// WithNote returns r with note added to the end of its error text. When
// the two are longer than the ledger keeps of an error (1,000 bytes), the
// text before the note is cut, not the note, which is cut only when it
// alone is longer. The ledger still masks the values of sensitive fields
// in the text as it was before the cut, so that none is stored in part.
func (r Report) WithNote(note string) Report {
	note = keepableText(note, maxErrorLength)
	text := r.Error
	if r.withNote() {
		text = r.uncut + r.note // the earlier note's text, uncut
	}
	r.uncut, r.note, r.noted = text, note, true
	r.Error = keepableText(text, maxErrorLength-len(note)) + note
	return r
}

// withNote reports whether r.Error is as WithNote left it.
func (r *Report) withNote() bool {
	return r.noted && r.Error == keepableText(r.uncut, maxErrorLength-len(r.note))+r.note
}

// keptError is the error text of r that the ledger stores about t's
// operation: its sensitive values masked before it is cut (txn.keep); of
// a text WithNote cut, the text before the cut, then its note.
func (r *Report) keptError(t *txn) string { return r.maskedError(t.scrub) }

// maskedError is the error text of r masked by mask before it is cut to
// the length the ledger keeps: of a text WithNote cut, the text before
// the cut, then its note; the quote of a reference ReportOf could not
// store made again from the whole reference masked (requoted).
func (r *Report) maskedError(mask func(string) string) string {
	keep := func(s string, n int) string { return keepableText(mask(s), n) }
	if !r.withNote() {
		return keep(r.requoted(mask, r.Error), maxErrorLength)
	}
	note := keep(r.note, maxErrorLength)
	return keep(r.requoted(mask, r.uncut), maxErrorLength-len(note)) + note
}

// MaskedFor returns r with its error text as the ledger keeps it about
// op: the values of op's sensitive fields (Operation.MaskText) masked in
// the text before it is cut to the 1,000 bytes the ledger keeps (the
// text before a note WithNote added, and the quote of a destination
// reference ReportOf could not store, made again from the whole
// reference), so that no value is kept in part. A worker that reports
// through the HTTP API (client.ReportFrom) sends this text: the API
// carries the cut text only, and a value across the cut would reach the
// ledger in part, where it can no longer be recognised. The other fields
// are r's. A nil op, or one without sensitive fields, masks nothing.
func (r Report) MaskedFor(op *Operation) Report {
	var st *secretText
	if op != nil {
		st = newSecretText(op.Payload, op.earlierPayloads, op.SensitiveFields)
	}
	r.Error = r.maskedError(func(s string) string { return scrubText(st, s) })
	r.uncut, r.note, r.noted, r.ref, r.refQuote = "", "", false, "", ""
	return r
}

// requoted is text with the quote of the destination reference ReportOf
// could not store, if it holds it, made again from the whole reference
// masked by mask: masked before it is cut, no sensitive value is quoted
// in part.
func (r *Report) requoted(mask func(string) string, text string) string {
	if r.refQuote == "" {
		return text
	}
	return strings.Replace(text, r.refQuote, quoteRef(mask(r.ref)), 1)
}

// MaxDestinationRefBytes is the length of the longest destination
// reference the ledger stores.
const MaxDestinationRefBytes = maxNameLength

// CheckDestinationRef refuses (ErrInvalidInput) a destination reference
// the ledger cannot store: longer than MaxDestinationRefBytes, or not
// UTF-8 text without NUL bytes. Code that receives a reference from a
// destination checks it before reporting, so that a success is not lost
// to a report the ledger refuses.
func CheckDestinationRef(ref string) error {
	if err := checkLength("destination_ref", ref, MaxDestinationRefBytes); err != nil {
		return err
	}
	return checkText("destination_ref", ref)
}

func (r *Report) validate() error {
	if !r.Outcome.Valid() {
		return invalidInput("outcome must be succeeded, rejected, retryable or uncertain")
	}
	if r.Outcome == OutcomeSucceeded && strings.TrimSpace(r.DestinationRef) == "" {
		return invalidInput("a succeeded outcome needs a destination_ref (not only spaces)")
	}
	if err := CheckDestinationRef(r.DestinationRef); err != nil {
		return err
	}
	if len(r.Response) > 0 && !SavableResponse(r.Response) {
		return invalidInput("response is not valid JSON in UTF-8")
	}
	if r.RetryAfter < 0 {
		return invalidInput("retry_after must not be negative")
	}
	return nil
}

// SavableResponse reports whether b can be kept as an operation's
// response: valid JSON, in UTF-8. (encoding/json takes JSON whose strings
// hold other bytes; every answer that shows the response would then be
// JSON no strict reader accepts.)
func SavableResponse(b []byte) bool { return json.Valid(b) && utf8.Valid(b) }

// retryableRefNote ends the error of a retryable answer that came with a
// destination reference, recorded uncertain (ReportOf, Report).
const retryableRefNote = "; not retried on its own: the destination reported a reference with a retryable error, so it may have acted"

// Report records an attempt's outcome. From the current attempt it moves
// the operation: succeeded → succeeded; rejected → failed (rejected), or
// held for a protected retry (a retry of an uncertain attempt: its
// refusal says nothing of what that attempt did);
// retryable → pending after backoff, or failed (exhausted) past the retry
// policy; uncertain → uncertain. A retryable outcome with a DestinationRef
// (the destination named a record, yet said to try later) is recorded
// uncertain, as ReportOf records it: a retry could repeat the effect. A
// retryable outcome of a protected attempt (a retry of an uncertain one)
// leaves the earlier attempt unexplained: the
// operation returns to uncertain, due for reconciliation after the
// backoff, or is held past the retry policy.
//
// The same report sent again by the attempt it ended (its answer was
// lost) records nothing and returns the operation as it is now.
//
// A late uncertain report of an earlier attempt given up before its
// dispatch mark (its call may have acted all the same) that arrived
// while this attempt held the operation, dispatched, leaves it uncertain
// after a retryable or rejected answer of this one: that earlier call is
// reconciled before anything is sent again. (Arriving before this
// attempt's dispatch mark, it ends this attempt unsent.)
//
// A late success of an earlier attempt that arrived while this attempt
// held the operation settles it: the operation succeeds with that
// reference whatever this attempt answers, and a success of this
// attempt's with another reference is a duplicate effect.
//
// A report from an attempt that no longer holds the operation moves nothing
// but is kept as evidence, and the call returns a *StaleError
// (ErrStaleFencingToken) carrying the operation, with Recorded set. A token
// that is not the attempt's own is refused with a *StaleError and nothing
// recorded. Two stale reports still count: a late success resolves an
// uncertain, held, pending or failed operation, and a late success whose
// reference differs from the confirmed one is recorded as a
// duplicate-effect incident. A late report sent again records nothing
// the second time and returns the same *StaleError.
func (l *Ledger) Report(ctx context.Context, key, attemptID string, token int64, r Report) (*Operation, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	if r.Outcome == OutcomeRetryable && strings.TrimSpace(r.DestinationRef) != "" {
		// The destination named a record it made, yet said to try later:
		// a retry could make the effect twice. Uncertain, as ReportOf
		// records such an answer (the same report sent again is
		// recognised: it becomes the same).
		r.Outcome, r.RetryAfter = OutcomeUncertain, 0
		if r.Error == "" {
			r.Error = string(OutcomeRetryable) // what the note follows
		}
		r = r.WithNote(retryableRefNote)
	}
	// A copy: the operation returned must not change when the caller
	// reuses the response's buffer. An empty one (the body of a 204 read
	// whole) is none: kept empty, PostgreSQL would read it back as an
	// answer no operation could be encoded with, SQLite as none.
	r.Response = bytes.Clone(r.Response)
	if len(r.Response) == 0 {
		r.Response = nil
	}
	return l.transition(ctx, key, attemptID, func(t *txn) error {
		if err := t.need("report"); err != nil {
			return err
		}
		r := r // decided again on a conflict: from the report as given
		r.Error = r.keptError(t)
		a, current, err := t.checkAttempt(attemptID, token)
		if err != nil {
			return err
		}
		if !current {
			if token != a.FencingToken {
				// Not this attempt's token: not its report.
				return t.stale(a, token)
			}
			if t.repeatedReport(a, &r) {
				return nil // recorded already: the operation as it is now
			}
			if repeatedLateReport(a, &r) {
				// Kept already: answered as the first time, counted once.
				se := t.stale(a, token)
				se.Recorded = true
				t.after = se
				return nil
			}
			return t.staleReport(a, token, &r)
		}
		a.Outcome = string(r.Outcome)
		a.FinishedAt = t.now
		a.DestinationRef = r.DestinationRef
		a.Response = r.Response
		a.Error = r.Error
		t.queue(store.Write{UpdateAttempt: a})
		t.mayHaveCalled(a, r.Outcome)
		if t.confirmedWhileHeld() && !(r.Outcome == OutcomeSucceeded && r.DestinationRef == t.op.DestinationRef) {
			// The effect confirmed first stays the result: whatever a
			// says (retryable, rejected, uncertain) does not undo an
			// effect that exists, and a success elsewhere is a second one.
			if r.Outcome == OutcomeSucceeded {
				if err := t.duplicateEffect(a, r.DestinationRef, fmt.Sprintf("attempt %d succeeded too", a.Number)); err != nil {
					return err
				}
			}
			return t.settleConfirmed(a, a.Worker, join(fmt.Sprintf("attempt %d answered %s", a.Number, r.Outcome), r.Error))
		}
		earlier, err := t.earlierVersionReported(a)
		if err != nil {
			return err
		}
		if earlier != nil {
			return t.afterEarlierVersion(a, earlier, &r)
		}
		if (r.Outcome == OutcomeRejected || r.Outcome == OutcomeRetryable) && !a.Protected {
			late, err := t.lateUncertainWhileHeld(a)
			if err != nil {
				return err
			}
			if late != nil {
				// a did nothing, but the earlier call may have: neither
				// failed nor sent again before that is settled.
				t.op.LastError = r.Error
				t.move(StateUncertain, a.Worker, a.ID, "uncertain after a late report", join(fmt.Sprintf("attempt %d answered %s", a.Number, r.Outcome), r.Error)+
					fmt.Sprintf("; attempt %d, given up before its dispatch mark, had reported that its call may have acted: the operation waits for reconciliation", late.Number))
				return nil
			}
		}
		switch r.Outcome {
		case OutcomeSucceeded:
			t.succeed(r.DestinationRef, r.Response)
			t.move(StateSucceeded, a.Worker, a.ID, "succeeded", "destination ref "+r.DestinationRef)
		case OutcomeRejected:
			t.op.LastError = r.Error
			if a.Protected {
				// This attempt retried an uncertain one under the
				// destination's key, and the destination refused it
				// ("key in use", a check that did not exist before): that
				// says nothing of what the uncertain attempt did. Failed
				// would claim no effect without evidence; its owner
				// decides, with the refusal in front of them.
				t.unprotect()
				t.hold(a.Worker, "protected retry rejected",
					join(r.Error, "the retry was refused, but an earlier attempt may have taken effect"))
				return nil
			}
			t.op.Response = r.Response // the decision is replayed like a success
			t.move(StateFailed, a.Worker, a.ID, "rejected", r.Error)
			t.op.FailureKind = string(FailureRejected)
		case OutcomeRetryable:
			t.op.LastError = r.Error
			policy := l.retryPolicy(t.op.Destination)
			// Attempts given back before any call (abandoned, released)
			// used none of the destination's patience.
			tried, err := t.triedAttempts()
			if err != nil {
				return err
			}
			notBefore, exhausted := policy.next(tried, t.op.CreatedAt, t.now, r.RetryAfter)
			if a.Protected {
				// This attempt retried an uncertain one under the
				// destination's key and did nothing itself; what the
				// uncertain attempt did is still unknown. Only the
				// reconciler may release it again, while the key's
				// retention lasts: an ordinary retry could come after
				// the retention and duplicate the effect.
				t.unprotect()
				if exhausted != "" {
					t.hold(a.Worker, "exhausted while uncertain", fmt.Sprintf(
						"%s after %d attempts; an earlier attempt may have taken effect; last error: %s", exhausted, tried, r.Error))
					return nil
				}
				t.move(StateUncertain, a.Worker, a.ID, "protected retry not done",
					fmt.Sprintf("%s; an earlier attempt may have taken effect; reconcile again not before %s", r.Error, textTime(notBefore)))
				t.op.NotBefore = notBefore
				return nil
			}
			if exhausted != "" {
				t.move(StateFailed, a.Worker, a.ID, "exhausted",
					fmt.Sprintf("%s after %d attempts; last error: %s", exhausted, tried, r.Error))
				t.op.FailureKind = string(FailureExhausted)
				return nil
			}
			t.unprotect()
			t.move(StatePending, a.Worker, a.ID, "retryable",
				fmt.Sprintf("%s; next attempt not before %s", r.Error, textTime(notBefore)))
			t.op.NotBefore = notBefore
		case OutcomeUncertain:
			t.op.LastError = r.Error
			t.move(StateUncertain, a.Worker, a.ID, "uncertain", r.Error)
		}
		return nil
	})
}

// retryLimit says why the policy allows the operation no further attempt
// now (empty when it does), and how many attempts reached a call so far.
func (t *txn) retryLimit(policy RetryPolicy) (exhausted string, tried int, err error) {
	if tried, err = t.triedAttempts(); err != nil {
		return "", 0, err
	}
	return policy.limit(tried, t.op.CreatedAt, t.now), tried, nil
}

// triedAttempts counts the attempts that reached a call: every attempt
// but those abandoned or released before dispatch, unless a late report
// of theirs says they made the call anyway.
func (t *txn) triedAttempts() (int, error) {
	if err := t.writeQueued(); err != nil {
		return 0, err
	}
	attempts, err := t.listAttempts()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range attempts {
		if a.Outcome != AttemptAbandoned || a.LateOutcome != "" {
			n++
		}
	}
	return n, nil
}

// ofEarlierVersion reports whether attempt a was claimed for an earlier
// content version than the operation's now. An attempt claimed before
// attempts kept their version (0) was if the operation was revised after
// its claim, which the timeline says; only a revised operation's is read.
func (t *txn) ofEarlierVersion(a *store.Attempt) (bool, error) {
	if a.Version != 0 || !t.mayHaveEarlierVersions() {
		return a.Version != 0 && a.Version < t.op.Version, nil
	}
	entries, err := t.listTimeline()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(entries, func(e *store.TimelineEntry) bool {
		return e.Event == revisedEvent && e.At.After(a.ClaimedAt)
	}), nil
}

// earlierVersionActed handles a late success or uncertain report of
// attempt a, claimed for an earlier content version than the operation's
// now, on an operation not succeeded: the effect of that content exists,
// or may, and the newer version must not be sent, settled by it, or
// looked for, until a person decides. The operation is held, unless it
// is held already, or another attempt holds it and has marked its
// dispatch, which the timeline then says. An attempt holding it that has
// not marked its dispatch is ended unsent.
func (t *txn) earlierVersionActed(a *store.Attempt, outcome Outcome, evidence string) error {
	what := "acted"
	if outcome == OutcomeUncertain {
		what = "may have acted"
	}
	evidence += fmt.Sprintf("; attempt %d was claimed for %s and had not marked its dispatch, yet its call %s on that content; the operation holds version %d now",
		a.Number, claimedVersion(a), what, t.op.Version)
	const event = eventEarlierVersion
	decide := ": " + decideEarlierVersion(t.op.Version)
	switch State(t.op.State) {
	case StateHeld:
		t.note(a.Worker, a.ID, event, evidence+"; it stays held"+decide)
		return nil
	case StateInProgress:
		holder, err := t.getAttempt(t.op.CurrentAttemptID)
		if err != nil {
			return err
		}
		if t.op.Dispatched {
			t.note(a.Worker, a.ID, event, evidence+fmt.Sprintf("; attempt %d, which holds the operation, had already marked its dispatch of version %d, "+
				"so both calls may have acted: check the destination for both", holder.Number, t.op.Version))
			return nil
		}
		if err := t.endUnsent(holder, notSentEarlierVersion+what+", and the operation is held for a person"); err != nil {
			return err
		}
		evidence += fmt.Sprintf("; attempt %d, which held the operation and had not marked its dispatch, is not sent", holder.Number)
	}
	// Naming the attempt, whose record countEarlierVersions counts if
	// the operation succeeds otherwise.
	t.holdFor(a.Worker, a.ID, event, evidence+decide)
	return nil
}

// endUnsent ends attempt a, which holds the operation and has not marked
// its dispatch, unsent (abandoned) with the error why (notSent…): its
// dispatch is refused, and its worker told why.
func (t *txn) endUnsent(a *store.Attempt, why string) error {
	a.Outcome, a.FinishedAt, a.Error = AttemptAbandoned, t.now, why
	return t.updateAttempt(a)
}

// Timeline events of late reports of an earlier version.
const (
	// eventEarlierVersion records the late report (earlierVersionActed).
	eventEarlierVersion = "late report on an earlier version"
	// eventAfterEarlierVersion holds an operation whose attempt, which
	// held it when that report came, ended otherwise than in success.
	eventAfterEarlierVersion = "held after a late report on an earlier version"
)

// earlierVersionReported returns the attempt of an earlier version whose
// late report, that its call acted or may have, came while attempt a
// held the operation after its dispatch mark (earlierVersionActed noted
// it on the timeline, the operation left to a's outcome), or nil. Only a
// revised operation can have one: the others pay no read.
func (t *txn) earlierVersionReported(a *store.Attempt) (*store.Attempt, error) {
	if !t.mayHaveEarlierVersions() || !t.op.Dispatched {
		return nil, nil
	}
	entries, err := t.listTimeline()
	if err != nil {
		return nil, err
	}
	for _, e := range slices.Backward(entries) {
		if e.At.Before(a.ClaimedAt) {
			break
		}
		// The note of earlierVersionActed, not a hold (which ended any
		// attempt holding the operation then).
		if e.Event == eventEarlierVersion && e.ToState == "" && e.AttemptID != "" && e.AttemptID != a.ID {
			return t.getAttempt(e.AttemptID)
		}
	}
	return nil, nil
}

// lateUncertainWhileHeld returns the attempt, other than a, given up
// before its dispatch mark, whose late uncertain report came while a
// held the operation (staleReport noted it: a had marked its dispatch),
// or nil. Only an operation that has had another attempt can have one.
func (t *txn) lateUncertainWhileHeld(a *store.Attempt) (*store.Attempt, error) {
	if a.Number < 2 {
		return nil, nil
	}
	attempts, err := t.listAttempts()
	if err != nil {
		return nil, err
	}
	for _, b := range attempts {
		if b.ID != a.ID && b.Stale && b.DispatchedAt.IsZero() && lateOutcome(b) == string(OutcomeUncertain) &&
			!b.FinishedAt.Before(a.ClaimedAt) {
			return b, nil
		}
	}
	return nil, nil
}

// earlierVersionEvidence says what the late report of the attempt
// earlier said, for an operation of version now.
func earlierVersionEvidence(earlier *store.Attempt, now int64) string {
	what := "acted"
	if lateOutcome(earlier) == string(OutcomeUncertain) {
		what = "may have acted"
	}
	s := fmt.Sprintf("attempt %d, of %s, had reported that its call %s", earlier.Number, claimedVersion(earlier), what)
	if earlier.DestinationRef != "" {
		s += " (destination ref " + earlier.DestinationRef + ")"
	}
	return s + ": " + decideEarlierVersion(now)
}

// decideEarlierVersion says what a person decides of an operation of
// version now held for an earlier version's effect.
func decideEarlierVersion(now int64) string {
	return fmt.Sprintf("a person decides whether that effect stands (mark succeeded), version %d is sent as well (authorize retry), or neither (cancel)", now)
}

// claimedVersion names the version attempt a was claimed for: "an
// earlier version" for one claimed before attempts kept it.
func claimedVersion(a *store.Attempt) string {
	if a.Version == 0 {
		return "an earlier version"
	}
	return fmt.Sprintf("version %d", a.Version)
}

// lateOutcome is the outcome a stale attempt's late report gave: kept
// beside the attempt's own, or as its own when the report ended it.
func lateOutcome(a *store.Attempt) string {
	if a.LateOutcome != "" {
		return a.LateOutcome
	}
	return a.Outcome
}

// mayHaveEarlierVersions reports whether the operation can have had a
// late report of an earlier version: it was revised (a revision requires
// approval). The others pay no read of their timeline.
func (t *txn) mayHaveEarlierVersions() bool {
	return t.op.Version >= 2 && t.op.RequiresApproval
}

// countEarlierVersions counts, on an operation that has just succeeded,
// each record an attempt of an earlier version reported while the
// operation held another version (eventEarlierVersion) as a duplicate
// effect, when it is not the confirmed one: two records exist, whichever
// way the operation came to succeed (its own attempt, a late success, a
// lookup). A pair counted before is not counted again (duplicateEffect).
func (t *txn) countEarlierVersions() error {
	if !t.mayHaveEarlierVersions() {
		return nil
	}
	entries, err := t.listTimeline()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if e.Event != eventEarlierVersion || e.AttemptID == "" || seen[e.AttemptID] {
			continue
		}
		seen[e.AttemptID] = true
		earlier, err := t.getAttempt(e.AttemptID)
		if err != nil {
			return err
		}
		if lateOutcome(earlier) != string(OutcomeSucceeded) || earlier.DestinationRef == "" || earlier.DestinationRef == t.op.DestinationRef {
			continue
		}
		if err := t.duplicateEffect(earlier, earlier.DestinationRef,
			fmt.Sprintf("attempt %d, of %s, had reported that its call acted", earlier.Number, claimedVersion(earlier))); err != nil {
			return err
		}
	}
	return nil
}

// afterEarlierVersion settles the report r of attempt a, which holds the
// operation, after an attempt of an earlier version (earlier) reported
// that its call acted, or may have (earlierVersionReported). A success is
// the operation's, and the earlier call's effect a second one: counted as
// a duplicate effect when it names another record, noted when it only may
// have been made. Any other answer leaves the earlier call's effect the
// only one known, or possible, for a person to weigh: the operation is
// held, neither sent again, failed, nor looked up.
func (t *txn) afterEarlierVersion(a, earlier *store.Attempt, r *Report) error {
	if r.Outcome == OutcomeSucceeded {
		t.succeed(r.DestinationRef, r.Response)
		t.move(StateSucceeded, a.Worker, a.ID, "succeeded", "destination ref "+r.DestinationRef)
		if lateOutcome(earlier) == string(OutcomeUncertain) {
			t.note(earlier.Worker, earlier.ID, "an earlier version may have acted too",
				fmt.Sprintf("attempt %d, of %s, had reported that its call may have acted: check the destination for a second record", earlier.Number, claimedVersion(earlier)))
		}
		return t.countEarlierVersions()
	}
	t.op.LastError = r.Error
	t.hold(a.Worker, eventAfterEarlierVersion, join(fmt.Sprintf("attempt %d answered %s", a.Number, r.Outcome), r.Error)+"; "+
		earlierVersionEvidence(earlier, t.op.Version))
	return nil
}

// confirmWhileHeld keeps an effect found while another attempt holds the
// operation (a late success, a lookup's record) on the operation, which
// cannot move now: it stops that attempt's dispatch and settles its
// report, release or lease (confirmedWhileHeld). The timeline says so,
// under event, with what (the evidence) and what becomes of the attempt.
func (t *txn) confirmWhileHeld(actor, attemptID, event, ref string, response json.RawMessage, what string) error {
	t.op.DestinationRef, t.op.Response = ref, response
	t.dirty = true
	holder, err := t.getAttempt(t.op.CurrentAttemptID)
	if err != nil {
		return err
	}
	consequence := "the attempt holding the operation will not send it again"
	if !holder.DispatchedAt.IsZero() {
		// Too late to stop it: its call may act as well.
		consequence = fmt.Sprintf("attempt %d, which holds the operation, had already marked its dispatch, so its call may act too "+
			"(a success it reports with another reference is counted as a duplicate effect)", holder.Number)
	}
	t.note(actor, attemptID, event, what+"; the effect is confirmed: "+consequence)
	return nil
}

// confirmedWhileHeld reports whether a late success of an earlier
// attempt arrived while the operation was in progress (staleReport keeps
// its reference and response on the operation then): the effect exists,
// and the attempt that holds the operation must not make it again. An
// operation in progress has no reference otherwise.
func (t *txn) confirmedWhileHeld() bool {
	return State(t.op.State) == StateInProgress && t.op.DestinationRef != ""
}

// settleConfirmed ends attempt a, the current one, on an operation whose
// effect an earlier attempt's late report confirmed while a held it
// (confirmedWhileHeld): the operation succeeds with that reference, and
// a is not sent (again). actor ended a; how says how: its answer, or
// that it gave the claim back or lost its lease. An attempt ended unsent
// (abandoned) says why in its error, which the caller writes.
func (t *txn) settleConfirmed(a *store.Attempt, actor, how string) error {
	if a.Outcome == AttemptAbandoned && a.Error == "" {
		a.Error = notSentConfirmed
	}
	ref := t.op.DestinationRef
	t.succeed(ref, t.op.Response)
	t.move(StateSucceeded, actor, a.ID, "late success resolved",
		fmt.Sprintf("%s; an earlier attempt's late report had confirmed the effect while attempt %d held the operation, destination ref %s",
			how, a.Number, ref))
	return t.countEarlierVersions()
}

// duplicateEffect records that attempt a's success with destination ref
// ref, which differs from the confirmed one, is a second effect at the
// destination: the operation's counter grows and the timeline names both
// references, after what (a report) says how it came. A reference already
// counted (the same report sent again, its answer lost, or another
// attempt naming the same record) is the same effect: it is noted and not
// counted again.
func (t *txn) duplicateEffect(a *store.Attempt, ref, what string) error {
	return t.duplicateEffectBy(a.Worker, a.ID, ref, what)
}

// duplicateEffectBy is duplicateEffect, said by actor of attempt
// attemptID ("" for none: a lookup's record).
func (t *txn) duplicateEffectBy(actor, attemptID, ref, what string) error {
	refs := duplicateRefs(ref, t.op.DestinationRef)
	counted, err := t.countedDuplicate(refs)
	if err != nil {
		return err
	}
	if counted {
		t.note(actor, attemptID, "duplicate effect reported again", what+", "+refs+"; counted once already")
		return nil
	}
	t.op.DuplicateEffects++
	t.dirty = true
	t.note(actor, attemptID, eventDuplicateEffect, what+", "+refs)
	return nil
}

// eventDuplicateEffect is the timeline event of a counted duplicate effect.
const eventDuplicateEffect = "duplicate effect"

// duplicateRefs ends the evidence of a duplicate effect: the reference of
// the second effect and the confirmed one. countedDuplicate finds it
// there.
func duplicateRefs(ref, confirmed string) string {
	return "destination ref " + ref + " differs from confirmed ref " + confirmed
}

// countedDuplicate reports whether the operation's timeline, or what this
// transition adds to it, holds a counted duplicate effect whose evidence
// ends with refs (duplicateRefs). Stored evidence is scrubbed of the
// values of sensitive fields (a reference may hold one, as a Message-ID
// holds its recipient), so it is looked for scrubbed too.
func (t *txn) countedDuplicate(refs string) (bool, error) {
	scrubbed := t.scrub(refs)
	counted := func(e *store.TimelineEntry) bool {
		return e.Event == eventDuplicateEffect && (strings.HasSuffix(e.Evidence, refs) || strings.HasSuffix(e.Evidence, scrubbed))
	}
	if slices.ContainsFunc(t.timeline, counted) {
		return true, nil
	}
	entries, err := t.listTimeline()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(entries, counted), nil
}

// succeed sets the confirmed result.
func (t *txn) succeed(ref string, response json.RawMessage) {
	t.op.DestinationRef = ref
	t.op.Response = response
	t.op.LastError = ""
	t.unprotect()
}

// repeatedReport reports whether r is the report that ended attempt a, sent
// again: a worker whose first report committed but whose answer was lost
// (a dropped connection) tries again. It is answered with the operation as
// it is, and recorded no second time, not as a late report of its own.
func (t *txn) repeatedReport(a *store.Attempt, r *Report) bool {
	return !a.Stale && a.LateOutcome == "" && a.Outcome == string(r.Outcome) &&
		a.DestinationRef == r.DestinationRef && a.Error == r.Error
}

// repeatedLateReport reports whether r is the late report attempt a has
// kept already, sent again (its answer was lost): the same outcome and
// reference, and for anything but a success the same error. Recorded a
// second time, a late success elsewhere would count a second duplicate
// effect that does not exist.
func repeatedLateReport(a *store.Attempt, r *Report) bool {
	late := a.LateOutcome
	if late == "" {
		late = a.Outcome // the late report ended the attempt
	}
	return a.Stale && late == string(r.Outcome) && a.DestinationRef == r.DestinationRef &&
		(r.Outcome == OutcomeSucceeded || a.Error == r.Error)
}

// staleReport keeps a report from an attempt that lost the operation.
func (t *txn) staleReport(a *store.Attempt, token int64, r *Report) error {
	ended := endedWith(a) // before the report, which may end the attempt
	a.Stale = true
	if a.FinishedAt.IsZero() {
		// The report ends the attempt.
		a.FinishedAt = t.now
		a.Outcome = string(r.Outcome)
	} else {
		// The attempt had ended (its lease expired, or it had reported):
		// what it ended with stays, so that counts of attempts by outcome
		// never go down, and the report is kept beside it. Its call
		// lasted until the report, though: the visibility delay of a
		// lookup counts from then (callEnd).
		a.LateOutcome = string(r.Outcome)
		a.FinishedAt = later(a.FinishedAt, t.now)
	}
	// The report fills what the attempt does not have yet (all of it, on
	// an attempt still open), so that an ending's own error still explains
	// it; the timeline entry below carries the whole report.
	if a.DestinationRef == "" {
		a.DestinationRef = r.DestinationRef
	}
	if len(a.Response) == 0 {
		a.Response = r.Response
	}
	if a.Error == "" {
		a.Error = r.Error
	}
	if err := t.updateAttempt(a); err != nil {
		return err
	}
	// What came, then what it said; a duplicate effect ends with both
	// references instead (duplicateRefs).
	late := fmt.Sprintf("late %s report from attempt %d (fencing token %d, current %d)", r.Outcome, a.Number, token, t.op.FencingToken)
	if r.Error != "" {
		late += ", error " + r.Error
	}
	evidence := late
	if r.DestinationRef != "" {
		evidence += ", destination ref " + r.DestinationRef
	}
	t.mayHaveCalled(a, r.Outcome)
	state := State(t.op.State)
	acted := r.Outcome == OutcomeSucceeded || r.Outcome == OutcomeUncertain
	earlier, err := t.ofEarlierVersion(a)
	if err != nil {
		return err
	}
	switch {
	case earlier && acted && state != StateSucceeded:
		// The call sent content the operation has replaced since (the
		// attempt was given up as never sent, then the operation was
		// revised): its effect does not settle the newer version, nor
		// does its doubt. A succeeded operation counts it as a duplicate
		// effect (below).
		if err := t.earlierVersionActed(a, r.Outcome, evidence); err != nil {
			return err
		}
	case r.Outcome == OutcomeSucceeded && (state.Unresolved() || state == StatePending || state == StateFailed):
		// Pending too (a retry authorized, absence wrongly proven, a
		// retryable answer): the effect exists, and the retry not yet
		// claimed would repeat it. Failed too (cancelled by an operator,
		// exhausted): the destination acted all the same, and an
		// operation left failed would invite doing it again by hand.
		if state == StateFailed {
			evidence += "; the operation had failed (" + t.op.FailureKind + "), but the destination acted"
		}
		t.succeed(r.DestinationRef, r.Response)
		t.move(StateSucceeded, a.Worker, a.ID, "late success resolved", evidence)
		if err := t.countEarlierVersions(); err != nil {
			return err
		}
	case r.Outcome == OutcomeSucceeded && state == StateInProgress && t.op.DestinationRef == "":
		if err := t.confirmWhileHeld(a.Worker, a.ID, "late success while another attempt holds the operation",
			r.DestinationRef, r.Response, evidence); err != nil {
			return err
		}
	case r.Outcome == OutcomeSucceeded && (state == StateSucceeded || state == StateInProgress) && t.op.DestinationRef != r.DestinationRef:
		if err := t.duplicateEffect(a, r.DestinationRef, late); err != nil {
			return err
		}
	case r.Outcome == OutcomeUncertain && state == StatePending && a.DispatchedAt.IsZero():
		// The attempt was given up as never sent (its lease ran out
		// before a dispatch mark), yet its worker says it may have
		// called: the retry now pending could repeat an effect. It waits
		// for reconciliation instead, as a dispatched attempt would.
		t.unprotect()
		t.move(StateUncertain, a.Worker, a.ID, "late uncertain report",
			evidence+fmt.Sprintf("; attempt %d had not marked its dispatch, yet may have called: nothing is sent again until that is settled", a.Number))
	case r.Outcome == OutcomeUncertain && state == StateInProgress && a.DispatchedAt.IsZero() && !t.confirmedWhileHeld():
		// As for a pending retry (above), once a retry holds the
		// operation: not yet dispatched, it is not sent; dispatched, it
		// cannot be stopped, and unless it succeeds the operation waits
		// for reconciliation (lateUncertainWhileHeld).
		holder, err := t.getAttempt(t.op.CurrentAttemptID)
		if err != nil {
			return err
		}
		if t.op.Dispatched {
			t.note(a.Worker, a.ID, "late uncertain report", evidence+fmt.Sprintf("; attempt %d had not marked its dispatch, yet may have called; "+
				"attempt %d, which holds the operation, had already marked its dispatch, so both calls may have acted: unless it succeeds, the operation waits for reconciliation",
				a.Number, holder.Number))
			break
		}
		if err := t.endUnsent(holder, notSentMayHaveCalled); err != nil {
			return err
		}
		t.unprotect()
		t.move(StateUncertain, a.Worker, a.ID, "late uncertain report",
			evidence+fmt.Sprintf("; attempt %d had not marked its dispatch, yet may have called: attempt %d, which held the operation, is not sent, nor anything until that is settled",
				a.Number, holder.Number))
	case (r.Outcome == OutcomeSucceeded || r.Outcome == OutcomeUncertain) && state == StateAwaitingApproval:
		// The attempt was given up as never sent, and the operation has
		// gone back to await approval since (a repeat of the same
		// version required it; a revision is an earlier version's case,
		// above). Its worker says the call
		// acted, or may have: approving what waits now could make a
		// second effect, under another idempotency key if revised. Held
		// for a person, who knows which content was sent.
		what := "acted"
		if r.Outcome == OutcomeUncertain {
			what = "may have acted"
		}
		t.hold(a.Worker, "late report while awaiting approval",
			evidence+fmt.Sprintf("; attempt %d had not marked its dispatch, yet its call %s on the content it was sent, perhaps an earlier version: "+
				"a person decides whether that effect stands (mark succeeded) before version %d is approved (authorize retry) or cancelled", a.Number, what, t.op.Version))
	default:
		t.note(a.Worker, a.ID, "stale report kept as evidence", evidence)
	}
	se := t.stale(a, token)
	se.Recorded, se.ended = true, ended
	t.after = se
	return nil
}

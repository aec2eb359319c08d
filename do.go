package opledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/internal/marker"
	"github.com/opledger/opledger/internal/textcut"
)

// Call is what an Action receives for one attempt.
type Call struct {
	// Operation is the claimed operation with its stored, approved payload.
	// Act on this payload, never on content regenerated for the retry.
	Operation *Operation
	// AttemptID identifies this attempt.
	AttemptID string
	// IdempotencyKey is the destination idempotency key: send it to
	// destinations that support one. It is the same on every attempt.
	IdempotencyKey string
	// Protected is true when this attempt retries an uncertain one under that
	// key, relying on the destination to deduplicate.
	Protected bool
	// ProtectedUntil, on a protected attempt, is when the destination may
	// forget its idempotency key (Claim.ProtectedUntil): start no call
	// at or after it, a retry inside the action included, since the key
	// would no longer keep it from repeating the effect. Return a
	// Retryable error instead (nothing sent): the operation goes back
	// to uncertain, and its reconciliation decides again (held once the
	// retention has ended). The zero time on an attempt that is not
	// protected. Do checks the window when it claims and when it marks
	// the dispatch, and ends the action's context when the window ends
	// (its cause says so).
	ProtectedUntil time.Time
}

// Result is what a successful Action returns. An Action that fails may
// return one with a Ref too, when the destination said what it made
// before the call went wrong: the Ref is kept on the attempt as evidence
// for whoever settles the operation, with the error's outcome (a
// retryable error with a Ref counts as uncertain: a retry could make the
// effect twice). It is never the operation's reference: only a success
// confirms an effect.
type Result struct {
	// Ref identifies the effect at the destination (record id, message id).
	// Required (spaces only count as none), and stored as it is, so it
	// must be something the ledger can store (CheckDestinationRef): at
	// most MaxDestinationRefBytes of UTF-8 text without NUL bytes. Do records a success whose Ref it
	// cannot store as uncertain, never as a failure: the destination
	// acted, so the effect must be reconciled, not forgotten.
	Ref string
	// Response is saved and replayed to repeats; any JSON, or nil. A
	// Response that is not valid JSON is dropped: Do records the success
	// and its Ref without it.
	Response json.RawMessage
}

// Action performs the external call of one attempt. Classify its errors
// with Rejected, Retryable and Uncertain; an unclassified error counts as
// uncertain, except a failed connection attempt (the request was never
// sent), which counts as retryable. OutcomeOf says how in detail.
type Action func(ctx context.Context, call Call) (Result, error)

// Do runs the whole protocol around action: record the intent, claim it,
// mark the dispatch, run action, report its outcome. A repeat of an
// operation that already succeeded returns the saved operation (reference
// and response) and a nil error, without running action. A repeat with
// other content fails with ErrFingerprintMismatch. A context that has
// ended before Do starts fails the claim with its error (errors.Is(err,
// context.Canceled) after a cancel); nothing is recorded. A nil action
// is refused with an error matching ErrInvalidInput, before anything is
// recorded.
//
// Do makes at most one attempt. When the attempt does not succeed it
// returns the operation in its new state and an *AttemptError: pending
// (retry later: call Do again at or after NotBefore), failed, or uncertain
// (reconcile before anything is sent again). The action's error is
// classified by OutcomeOf. When the operation cannot be claimed (not due,
// in progress, uncertain, held, failed, awaiting approval) it returns the
// operation as it is now with the *StateError of Claim (for example
// ErrInProgress, ErrNotDue), whose Operation it is.
//
// The operation Do returns is nil only together with an error, in two
// cases. First, when Do fails before it has the operation: a nil action
// or an intent refused as Record would refuse it (ErrInvalidInput,
// ErrInvalidKey, ErrDestinationNotServed), the key recorded with other
// content (ErrFingerprintMismatch), the key of a stored workflow's step,
// or a context that ended or a store that failed before the claim was
// recorded. Second, with a *ReportError: the outcome could not be
// recorded. Every other error comes with the operation.
//
// Whenever the ledger has the operation succeeded when Do is done with it,
// Do returns it as it is then, with a nil error. This includes a late
// success of an earlier attempt (one whose lease ran out) that arrives
// while Do holds the operation: the effect exists, so Do does not start
// the action if it has not yet, and whatever the action answers the
// operation succeeds with the earlier attempt's reference. An action that
// succeeded too, with another reference, made a second effect: the
// ledger counts it in the operation's DuplicateEffects and writes it to
// the timeline, never hidden.
//
// Do checks what the action returned before recording it. A success
// without a Ref, or with a Ref the ledger cannot store
// (CheckDestinationRef: too long, NUL bytes, invalid UTF-8), is recorded
// as uncertain, and the error says why and quotes the start of the
// reference: the destination may have acted, so the effect must be
// looked up, not forgotten. A success whose Response is not valid JSON is
// recorded as a success, with its Ref and without the Response.
//
// The outcome is recorded even when ctx has ended meanwhile (with
// context.WithoutCancel). When ctx has ended after the dispatch mark but
// before the action would start, Do does not start it: it records the
// attempt retryable (nothing was sent) and returns an *AttemptError that
// matches ctx.Err(). That attempt counts toward the destination's attempt
// limit (RetryPolicy.MaxAttempts) and is spaced by its backoff, as any
// retryable report is (and as the HTTP API's workers are told): a
// dispatch mark cannot be given back, and the ledger does not tell a
// call not made from one answered "try later". When the dispatch mark
// itself cannot be written (ctx ended, the store failed), Do does not
// start the action either; it gives the claim back (Release, best
// effort, also after ctx ended) so that the operation is pending again
// at once instead of when its lease runs out, and returns the error of
// Dispatch; an attempt given back so uses none of the attempt limit. A
// Dispatch refused because the attempt no longer holds the operation
// returns that *StaleError or *StateError with the operation as it is.
//
// A protected retry (Call.Protected) is bounded by its window, as the
// executor bounds its calls: the action's context ends at
// Call.ProtectedUntil (context.DeadlineExceeded, with a cause that says
// the window ended), so that an action started just before the window
// closes does not go on past it, when the destination may have
// forgotten its idempotency key. An action that returns with that
// context's error is recorded as its error says (uncertain unless it
// says nothing was sent), and the operation's reconciliation decides
// again. A window that has closed by the time the action would start
// (after the dispatch mark, which checks it too) starts no action: the
// attempt is recorded retryable, nothing sent, with an error that says
// the window ended before the action could start; the operation is
// uncertain again, for its reconciliation to decide, and Do returns an
// *AttemptError that matches context.DeadlineExceeded. Do claims a
// protected retry at any time before its window closes, however little
// of it is left (Do does not know how long its action takes: an action
// that cannot finish in the time left should return a Retryable error,
// nothing sent); the executor, which does, holds one whose window
// closes before its call limit (ClaimNextOptions.CallTimeout).
//
// When the action panics, Do records the attempt uncertain ("action
// panicked: …": it may have sent the request) and panics again with the
// same value.
//
// When the outcome cannot be recorded after the action ran (the store is
// unreachable), Do returns a *ReportError that carries what the action
// returned (Result: its reference and response) and the Report it tried
// to record: send that Report again with Ledger.Report(ctx, e.Key,
// e.AttemptID, e.FencingToken, e.Report) once the store answers. A repeat
// is recognised; sent after the lease ran out it is kept as a late report,
// and a late success still resolves the operation. Until then the
// operation stays in progress and becomes uncertain when its lease runs
// out. If the attempt lost the operation while the action ran (its lease
// ran out), its outcome is kept as a late report and Do returns the
// *StaleError (ErrStaleFencingToken) with the operation as it is.
func (l *Ledger) Do(ctx context.Context, in Intent, action Action) (*Operation, error) {
	if action == nil {
		// Refused before anything is recorded: claimed and dispatched, a
		// nil action would leave an operation uncertain that was never
		// sent.
		return nil, invalidInput("an action is required: Do was given a nil action; nothing was recorded")
	}
	// Record and claim in one transaction.
	claimStart := time.Now() // no later than the claim
	claim, err := l.Claim(ctx, in.Key, ClaimOptions{Intent: &in})
	var se *StateError
	if errors.As(err, &se) && se.State == StateSucceeded {
		return se.Operation, nil
	}
	if err != nil {
		if se != nil && se.Operation != nil {
			// Refused by the operation's state: it is returned as it is
			// now, as with an *AttemptError.
			return se.Operation, err
		}
		return nil, err
	}
	doStep(in.Key, "claimed")
	if op, err := l.Dispatch(ctx, in.Key, claim.AttemptID, claim.FencingToken); err != nil {
		return l.dispatchFailed(ctx, in.Key, claim, op, err)
	}
	doStep(in.Key, "dispatched")
	actCtx, cancel := l.protectedCallContext(ctx, claim, claimStart)
	defer cancel()
	if err := ctx.Err(); err != nil {
		// The caller gave up before the call: nothing was sent.
		const why = "context ended before the action started; nothing sent"
		return l.finish(ctx, in.Key, claim, Report{Outcome: OutcomeRetryable, Error: why}, Result{}, fmt.Errorf("%s: %w", why, err))
	}
	if actCtx.Err() != nil {
		// A protected retry's window closed after the dispatch mark and
		// before the call: a call now could repeat the effect. Nothing
		// was sent, which a retryable report says; a protected retry
		// answered retryable is uncertain again, for its reconciliation
		// to decide (held once the retention has ended).
		why := fmt.Sprintf("the action was not started: the protected retry's window ended at %s (Call.ProtectedUntil), after the dispatch mark and before the action could start; nothing was sent",
			textTime(claim.ProtectedUntil))
		return l.finish(ctx, in.Key, claim, Report{Outcome: OutcomeRetryable, Error: why}, Result{},
			fmt.Errorf("%s: %w", why, context.Cause(actCtx)))
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		// The action panicked (or called runtime.Goexit): it may have
		// sent its request. Record that, then let the panic go on.
		v := recover()
		why := "action did not return (runtime.Goexit)"
		if v != nil {
			why = fmt.Sprintf("action panicked: %v", v)
		}
		_, _ = l.finish(ctx, in.Key, claim, Report{Outcome: OutcomeUncertain, Error: why}, Result{}, errors.New(why))
		if v != nil {
			panic(v)
		}
	}()
	res, actErr := action(actCtx, Call{Operation: claim.Operation, AttemptID: claim.AttemptID,
		IdempotencyKey: claim.IdempotencyKey, Protected: claim.Protected, ProtectedUntil: claim.ProtectedUntil})
	returned = true
	report, actErr := reportOf(res, actErr)
	return l.finish(ctx, in.Key, claim, report, res, actErr)
}

// protectedCallContext is the context of the action of claim, which
// ClaimOptions made at claimStart or later: ctx, and for a protected retry
// one that ends when its window does (Claim.ProtectedUntil, by the
// store's clock, mapped to this machine's from the claim's lease), so
// that the action, started before the window closes, does not run past
// it, as the executor bounds its calls. Its cause says so.
func (l *Ledger) protectedCallContext(ctx context.Context, claim *Claim, claimStart time.Time) (context.Context, context.CancelFunc) {
	if !claim.Protected || claim.ProtectedUntil.IsZero() {
		return ctx, func() {}
	}
	claimedAt := claim.LeaseExpiresAt.Add(-l.opts.Lease) // by the store's clock
	return context.WithDeadlineCause(ctx, claimStart.Add(claim.ProtectedUntil.Sub(claimedAt)),
		fmt.Errorf("%w: the protected retry's window ended at %s (Call.ProtectedUntil): the destination may forget its idempotency key, and a call after it could repeat the effect",
			context.DeadlineExceeded, textTime(claim.ProtectedUntil)))
}

// ReportOf is the Report to record for a call to a destination that
// returned res and err: what Do records for its action, and what the
// executor records for a Go destination's call. Code that claims and
// reports on its own (ClaimNext, then Report) uses it to record the same.
//
//   - No error and a Ref the ledger can store: succeeded, with the Ref and
//     the Response (dropped if it is not savable JSON).
//   - No error but no Ref, or a Ref the ledger cannot store
//     (CheckDestinationRef): uncertain. The destination answered, so it
//     may have acted; the effect must be reconciled, not forgotten.
//   - An error: its outcome (OutcomeOf), its text without the
//     classification mark (ErrorText), and for a rejection the Response,
//     for the operator to see why. A Ref returned with the error is kept
//     on the attempt (see Result); with a retryable error it makes the
//     outcome uncertain, since a retry could make the effect twice.
//
// The notes ReportOf adds to the error text survive the cut to the
// length the ledger stores (Report.WithNote): the destination's own text
// is cut first.
func ReportOf(res Result, err error) Report {
	r, _ := reportOf(res, err)
	return r
}

// reportOf is ReportOf, and the error Do returns with the report: the
// action's error, or the uncertain one that stands for a success the
// ledger cannot record as one; nil for a success.
func reportOf(res Result, actErr error) (Report, error) {
	quote := "" // of a reference the ledger cannot store, in the error text
	if actErr == nil {
		switch err := CheckDestinationRef(res.Ref); {
		case strings.TrimSpace(res.Ref) == "":
			actErr = Uncertain(errors.New("the call succeeded without a destination reference"))
		case err != nil:
			quote = quoteRef(res.Ref)
			actErr = Uncertain(fmt.Errorf("the call succeeded, but its destination reference cannot be stored (%s): %s; the destination reported an effect: reconcile it there",
				InvalidInputDetail(err), quote))
		default:
			return Report{Outcome: OutcomeSucceeded, DestinationRef: res.Ref, Response: savable(res.Response)}, nil
		}
	}
	var r Report
	r.Outcome, r.RetryAfter = OutcomeOf(actErr)
	if r.Outcome == OutcomeRejected {
		r.Response = savable(res.Response) // why it was refused, for the operator
	}
	var notes string
	if strings.TrimSpace(res.Ref) != "" {
		if CheckDestinationRef(res.Ref) == nil {
			r.DestinationRef = res.Ref
		} else {
			notes += "; the destination also reported a reference, not text the ledger can store"
		}
		if r.Outcome == OutcomeRetryable {
			r.Outcome, r.RetryAfter = OutcomeUncertain, 0
			notes += retryableRefNote
		}
	}
	r.Error = ErrorText(actErr)
	r = r.WithNote(notes)
	// The quote was cut before any value was masked: the ledger quotes
	// the reference again, masked first (Report.keptError).
	if quote != "" {
		r.ref, r.refQuote = res.Ref, quote
	}
	return r, actErr
}

// savable is resp if the ledger can save and replay it, else nil: a
// success and its reference matter more than an answer it cannot keep.
func savable(resp json.RawMessage) json.RawMessage {
	if len(resp) == 0 || !SavableResponse(resp) {
		return nil
	}
	return resp
}

// quotedRefBytes is how much of a reference error texts quote.
const quotedRefBytes = 64

// quoteRef quotes the start of a destination reference for an error
// text: Go syntax, so that NUL bytes and invalid UTF-8 show as escapes
// and the text stays storable, cut to quotedRefBytes with its length.
func quoteRef(ref string) string {
	if len(ref) <= quotedRefBytes {
		return strconv.Quote(ref)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(textcut.Prefix(ref, quotedRefBytes)), len(ref))
}

// finish records report, the outcome of claim's attempt, and returns what
// Do returns: the operation, and cause (the action's error, nil for a
// success) inside an *AttemptError unless the operation succeeded.
func (l *Ledger) finish(ctx context.Context, key string, claim *Claim, report Report, res Result, cause error) (*Operation, error) {
	// The outcome must be recorded even if the caller gave up meanwhile.
	op, err := l.Report(context.WithoutCancel(ctx), key, claim.AttemptID, claim.FencingToken, report)
	if err != nil {
		var stale *StaleError
		if errors.As(err, &stale) && stale.Operation != nil && stale.Operation.State == StateSucceeded {
			return stale.Operation, nil
		}
		if errors.As(err, &stale) && stale.Recorded {
			return op, err // kept as a late report: nothing is lost
		}
		return op, &ReportError{Key: key, AttemptID: claim.AttemptID, FencingToken: claim.FencingToken,
			Result: res, Report: report, ActionErr: cause, Err: err, shown: claim.Operation}
	}
	if op.State == StateSucceeded {
		return op, nil
	}
	if cause != nil {
		return op, &AttemptError{Key: key, Outcome: report.Outcome, State: op.State, Err: cause, shown: op, report: report}
	}
	return op, nil
}

// dispatchFailed is what Do returns when the dispatch mark of claim was
// refused with err (op: the operation Dispatch returned, if any). Nothing
// was sent.
func (l *Ledger) dispatchFailed(ctx context.Context, key string, claim *Claim, op *Operation, err error) (*Operation, error) {
	var se *StateError
	if errors.As(err, &se) && se.State == StateSucceeded && se.Operation != nil {
		// A late success of an earlier attempt settled the claim.
		return se.Operation, nil
	}
	var stale *StaleError
	if errors.As(err, &stale) && stale.Operation != nil && stale.Operation.State == StateSucceeded {
		// The lease ran out before the mark, and settling it took a late
		// success of an earlier attempt that had arrived meanwhile.
		return stale.Operation, nil
	}
	if se != nil || stale != nil {
		// The ledger decided already (the lease ran out, the protection
		// expired): the claim is not this attempt's any more.
		if op == nil {
			op = claim.Operation
		}
		return op, err
	}
	// The claim committed, the mark perhaps not: give the claim back
	// rather than leave the operation in progress until its lease runs
	// out. Best effort: if this fails too, lease expiry settles it.
	bg := context.WithoutCancel(ctx)
	const why = "Do could not mark the dispatch; the action was not started, nothing was sent"
	rel, rerr := l.Release(bg, key, claim.AttemptID, claim.FencingToken, why)
	if errors.Is(rerr, ErrAlreadyDispatched) {
		// The mark was written but its answer lost: still nothing was
		// sent, which a retryable report says.
		rel, rerr = l.Report(bg, key, claim.AttemptID, claim.FencingToken, Report{Outcome: OutcomeRetryable, Error: why})
	}
	switch {
	case rerr != nil || rel == nil:
		return claim.Operation, err
	case rel.State == StateSucceeded:
		return rel, nil
	}
	return rel, err
}

// ReportError reports an attempt of Do whose action ran but whose outcome
// the ledger did not record: the store failed. It carries what the action
// returned, so that nothing is lost: send Report again with
// Ledger.Report(ctx, Key, AttemptID, FencingToken, Report).
type ReportError struct {
	// Key is the operation's key.
	Key string
	// AttemptID is the attempt whose outcome was not recorded.
	AttemptID string
	// FencingToken is the attempt's token, to send the report again with.
	FencingToken int64
	// Result is what the action returned (a success's reference and
	// response).
	Result Result
	// Report is the outcome Do tried to record.
	Report Report
	// ActionErr is the action's error (nil when it succeeded), or why Do
	// recorded its success otherwise (a reference the ledger cannot
	// store).
	ActionErr error
	// Err is why the report failed.
	Err error
	// shown is the operation as claimed, whose sensitive values Error
	// masks.
	shown *Operation
}

// Error describes the error, for a log: the values of the operation's
// sensitive fields in the reference it quotes and in the action's error
// are masked, as the ledger masks them when it stores such text (the
// fields keep the real ones).
func (e *ReportError) Error() string {
	var st *secretText
	if e.shown != nil {
		st = newSecretText(e.shown.Payload, e.shown.earlierPayloads, e.shown.SensitiveFields)
	}
	what := string(e.Report.Outcome)
	if e.Result.Ref != "" {
		what += ", destination ref " + quoteRef(st.maskValue(e.Result.Ref))
	}
	msg := fmt.Sprintf("%s: the attempt's outcome (%s) was not recorded: %v", e.Key, what, e.Err)
	if e.ActionErr != nil {
		// The quote of a reference the ledger cannot store is made
		// again from the whole reference masked, not masked once cut.
		msg += "; the action's error: " + e.Report.requoted(st.maskValue, e.ActionErr.Error())
	}
	return st.mask(msg)
}

// Unwrap returns why the report failed and the action's error.
func (e *ReportError) Unwrap() []error {
	if e.ActionErr == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.ActionErr}
}

// doTestHook, set only by this package's tests, is called by Do with the
// operation's key and the step Do has reached: "claimed" (before the
// dispatch mark) and "dispatched" (before the action starts).
var doTestHook atomic.Pointer[func(key, step string)]

func doStep(key, step string) {
	if h := doTestHook.Load(); h != nil {
		(*h)(key, step)
	}
}

// AttemptError reports an attempt of Do that did not succeed.
type AttemptError struct {
	// Key is the operation's key.
	Key     string
	Outcome Outcome // how the action's error was classified
	State   State   // the operation's state after the report
	// Err is the action's error, or why Do did not record its success
	// (no reference, or one the ledger cannot store) or did not start it
	// (the context had ended). It is the action's own, as it was, not
	// masked: Error masks it.
	Err error
	// shown is the operation after the report, whose sensitive values
	// Error masks; report is what was recorded, whose quote of a
	// reference the ledger could not store Error makes again, masked.
	shown  *Operation
	report Report
}

// Error describes the error, for a log. The action's error is given
// without the mark that classified it ("uncertain: "), which Outcome
// already says. The values of the operation's sensitive fields are
// masked in it, as the ledger masks them when it stores such text: the
// quote of a reference the ledger could not store is made from the whole
// reference masked, so that no value is quoted in part.
func (e *AttemptError) Error() string {
	var st *secretText
	if e.shown != nil {
		st = newSecretText(e.shown.Payload, e.shown.earlierPayloads, e.shown.SensitiveFields)
	}
	text := e.report.requoted(st.maskValue, ErrorText(e.Err))
	return st.mask(fmt.Sprintf("%s: attempt %s, operation is %s: %s", e.Key, e.Outcome, e.State, text))
}

// Unwrap returns the action's error.
func (e *AttemptError) Unwrap() error { return e.Err }

// ErrorText is an error's text as the ledger records it for operators:
// the message without the classification prefix of any mark in it
// ("rejected: " and the like, from Rejected, Retryable and Uncertain),
// wrapped or joined as it may be, and led by the text of
// destination.ErrExists when err matches it. It is "" for a nil err.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	text := err.Error()
	walkErrors(err, func(e error) {
		// Outer marks first: an outer mark's text holds the inner one's.
		if c, ok := e.(*classified); ok {
			text = strings.Replace(text, c.Error(), c.err.Error(), 1)
		}
	})
	return marker.ExistsFirst(err, text)
}

// walkErrors calls fn on err and every error it wraps, depth first, each
// before those it wraps.
func walkErrors(err error, fn func(error)) {
	for err != nil {
		fn(err)
		switch x := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walkErrors(e, fn)
			}
			return
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		default:
			return
		}
	}
}

// classified marks an action error with its outcome.
type classified struct {
	outcome    Outcome
	retryAfter time.Duration
	err        error // never nil
}

func (c *classified) Error() string { return string(c.outcome) + ": " + c.err.Error() }
func (c *classified) Unwrap() error { return c.err }

// mark marks err with an outcome; a nil err becomes an error that says
// no cause was given, so that the mark still reads and records.
func mark(outcome Outcome, retryAfter time.Duration, err error) error {
	if err == nil {
		err = errors.New("no cause given")
	}
	return &classified{outcome: outcome, retryAfter: retryAfter, err: err}
}

// Rejected marks err as a refusal before any effect (invalid input,
// permission denied): the operation fails and waits for a person. A nil
// err is marked as "no cause given".
func Rejected(err error) error { return mark(OutcomeRejected, 0, err) }

// Retryable marks err as a failure before any effect (429, 503, refused
// connection); after, if positive, is the destination's Retry-After. Zero
// or negative (a reset time just past) means none. A nil err is marked as
// "no cause given".
func Retryable(err error, after time.Duration) error {
	return mark(OutcomeRetryable, max(after, 0), err)
}

// Uncertain marks err as a failure after which the effect may or may not
// have happened (timeout or reset after the request was written). A nil
// err is marked as "no cause given".
func Uncertain(err error) error { return mark(OutcomeUncertain, 0, err) }

// OutcomeOf classifies an action's error, and gives the Retry-After of a
// retryable one. A nil error is no failure to classify: it comes back
// uncertain, as an error that says nothing would (Do treats a nil error
// as a success, with the Result's reference).
//
//   - An error marked with Rejected, Retryable or Uncertain keeps its mark,
//     wrapped as it may be; of marks wrapped in one another the outermost
//     decides.
//   - An error that joins several (errors.Join, fmt.Errorf with several
//     %w) gets the most cautious outcome of its parts, each classified as
//     it would be alone: uncertain over retryable over rejected. A part
//     without a mark next to marked ones thus counts as uncertain, as it
//     would alone (retryable if it is a failed connection attempt). A
//     retryable outcome takes the longest Retry-After of its parts.
//   - Without a mark, a failed connection attempt means the request never
//     left, so it is retryable: a *net.DNSError, or a *net.OpError with Op
//     "dial" (the connection was refused, or could not be made in time)
//     or "proxyconnect" (net/http could not connect to the HTTP proxy:
//     its dial, or the TLS handshake with an https proxy; no request
//     reached the proxy, let alone the destination), found on the chain
//     before any *net.OpError of another operation (a read, a write).
//   - Everything else — timeouts, resets, cancelled contexts, unknown
//     errors — is uncertain: the effect may have happened.
func OutcomeOf(err error) (Outcome, time.Duration) {
	o, after, _ := outcomeOf(err)
	return o, after
}

// outcomeOf is OutcomeOf; marked tells whether a mark decided.
func outcomeOf(err error) (o Outcome, after time.Duration, marked bool) {
	notSent := false // a failed connection attempt is on the chain
	otherOp := false // a network operation other than connecting is
	for e := err; e != nil; e = errors.Unwrap(e) {
		c, _ := e.(*classified)
		if x, ok := e.(interface{ As(any) bool }); ok && c == nil {
			x.As(&c) // an error that says it is a mark
		}
		if c != nil {
			return c.outcome, max(c.retryAfter, 0), true
		}
		switch x := e.(type) {
		case *net.DNSError:
			notSent = notSent || !otherOp
		case *net.OpError:
			if !notSent && !otherOp {
				notSent = x.Op == "dial" || x.Op == "proxyconnect"
				otherOp = !notSent
			}
		case interface{ Unwrap() []error }:
			o, after, marked = joinedOutcome(x.Unwrap())
			if !marked && notSent {
				return OutcomeRetryable, 0, false
			}
			return o, after, marked
		}
	}
	if notSent {
		return OutcomeRetryable, 0, false
	}
	return OutcomeUncertain, 0, false
}

// joinedOutcome is the most cautious outcome of parts, each classified
// alone; marked tells whether any part had a mark.
func joinedOutcome(parts []error) (o Outcome, after time.Duration, marked bool) {
	caution := map[Outcome]int{OutcomeRejected: 1, OutcomeRetryable: 2, OutcomeUncertain: 3}
	for _, p := range parts {
		if p == nil {
			continue
		}
		po, pafter, pm := outcomeOf(p)
		marked = marked || pm
		switch {
		case caution[po] > caution[o]:
			o, after = po, pafter
		case po == o:
			after = max(after, pafter)
		}
	}
	if o == "" {
		return OutcomeUncertain, 0, marked
	}
	return o, after, marked
}

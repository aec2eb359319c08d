package opledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
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
}

// Result is what a successful Action returns.
type Result struct {
	// Ref identifies the effect at the destination (record id, message id).
	// Required.
	Ref string
	// Response is saved and replayed to repeats; any JSON, or nil.
	Response json.RawMessage
}

// Action performs the external call of one attempt. Classify its errors
// with Rejected, Retryable and Uncertain; an unclassified error counts as
// uncertain, except a failed connection attempt (the request was never
// sent), which counts as retryable.
type Action func(ctx context.Context, call Call) (Result, error)

// Do runs the whole protocol around action: record the intent, claim it,
// mark the dispatch, run action, report its outcome. A repeat of an
// operation that already succeeded returns the saved operation (reference
// and response) without running action. A repeat with other content fails
// with ErrFingerprintMismatch.
//
// Do makes at most one attempt. When the attempt does not succeed it
// returns the operation in its new state and an *AttemptError: pending
// (retry later: call Do again at or after NotBefore), failed, or uncertain
// (reconcile before anything is sent again). When the operation cannot be
// claimed it returns the *StateError of Claim (for example ErrInProgress).
func (l *Ledger) Do(ctx context.Context, in Intent, action Action) (*Operation, error) {
	// Record and claim in one transaction.
	claim, err := l.Claim(ctx, in.Key, ClaimOptions{Intent: &in})
	var se *StateError
	if errors.As(err, &se) && se.State == StateSucceeded {
		return se.Operation, nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := l.Dispatch(ctx, in.Key, claim.AttemptID, claim.FencingToken); err != nil {
		return claim.Operation, err
	}
	res, actErr := action(ctx, Call{Operation: claim.Operation, AttemptID: claim.AttemptID,
		IdempotencyKey: claim.IdempotencyKey, Protected: claim.Protected})
	report := Report{Outcome: OutcomeSucceeded, DestinationRef: res.Ref, Response: res.Response}
	if actErr == nil && res.Ref == "" {
		actErr = Uncertain(errors.New("action succeeded without a destination reference"))
	}
	if actErr != nil {
		report = Report{Error: safeErrorText(actErr)}
		report.Outcome, report.RetryAfter = OutcomeOf(actErr)
	}
	// The outcome must be recorded even if the caller gave up meanwhile.
	op, err := l.Report(context.WithoutCancel(ctx), in.Key, claim.AttemptID, claim.FencingToken, report)
	if err != nil {
		var stale *StaleError
		if errors.As(err, &stale) && stale.Operation.State == StateSucceeded && actErr == nil {
			return stale.Operation, nil
		}
		return op, err
	}
	if actErr != nil {
		return op, &AttemptError{Key: in.Key, Outcome: report.Outcome, State: op.State, Err: actErr}
	}
	return op, nil
}

// AttemptError reports an attempt of Do that did not succeed.
type AttemptError struct {
	Key     string
	Outcome Outcome // how the action's error was classified
	State   State   // the operation's state after the report
	Err     error   // the action's error
}

// Error describes the error.
func (e *AttemptError) Error() string {
	return fmt.Sprintf("%s: attempt %s, operation is %s: %v", e.Key, e.Outcome, e.State, e.Err)
}

// Unwrap returns the action's error.
func (e *AttemptError) Unwrap() error { return e.Err }

// safeErrorText is the error text recorded for operators: the action's own
// message, without the classification prefix.
func safeErrorText(err error) string {
	var c *classified
	if errors.As(err, &c) && c == err {
		return c.err.Error()
	}
	return err.Error()
}

// classified marks an action error with its outcome.
type classified struct {
	outcome    Outcome
	retryAfter time.Duration
	err        error
}

func (c *classified) Error() string { return string(c.outcome) + ": " + c.err.Error() }
func (c *classified) Unwrap() error { return c.err }

// Rejected marks err as a refusal before any effect (invalid input,
// permission denied): the operation fails and waits for a person.
func Rejected(err error) error { return &classified{outcome: OutcomeRejected, err: err} }

// Retryable marks err as a failure before any effect (429, 503, refused
// connection); after, if positive, is the destination's Retry-After.
func Retryable(err error, after time.Duration) error {
	return &classified{outcome: OutcomeRetryable, retryAfter: after, err: err}
}

// Uncertain marks err as a failure after which the effect may or may not
// have happened (timeout or reset after the request was written).
func Uncertain(err error) error { return &classified{outcome: OutcomeUncertain, err: err} }

// OutcomeOf classifies an action's error. Errors marked with Rejected,
// Retryable or Uncertain keep their mark. A failed dial or DNS lookup means
// the request never left, so it is retryable. Everything else — timeouts,
// resets, cancelled contexts, unknown errors — is uncertain: the effect may
// have happened.
func OutcomeOf(err error) (Outcome, time.Duration) {
	var c *classified
	if errors.As(err, &c) {
		return c.outcome, c.retryAfter
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return OutcomeRetryable, 0
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return OutcomeRetryable, 0
	}
	return OutcomeUncertain, 0
}

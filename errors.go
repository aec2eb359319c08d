package opledger

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opledger/opledger/internal/store"
)

// Sentinel errors. Every error the ledger returns for a refused request
// matches one of these with errors.Is; the typed errors below carry details.
var (
	// ErrNotFound: nothing has this key or id in this tenant: no operation
	// (and no tombstone), event, workflow, attempt or token, as the
	// error's text says.
	ErrNotFound = errors.New("not found")
	// ErrFingerprintMismatch: the key is known with other content. The stored
	// operation is untouched; a correction needs Revise or a new key.
	ErrFingerprintMismatch = errors.New("fingerprint mismatch: same key, different content")
	// ErrInvalidState: the transition is not allowed from the current state.
	ErrInvalidState = errors.New("transition not allowed in current state")
	// ErrInProgress: another attempt holds the operation's lease.
	ErrInProgress = errors.New("operation is in progress")
	// ErrAlreadySucceeded: the operation already succeeded; the error's
	// Operation carries the saved reference and response to replay.
	ErrAlreadySucceeded = errors.New("operation already succeeded")
	// ErrNotDue: the operation is pending but may not be claimed before its
	// not_before time.
	ErrNotDue = errors.New("operation not due yet")
	// ErrStaleFencingToken: the attempt no longer holds the operation; its
	// report was kept as evidence but moved nothing.
	ErrStaleFencingToken = errors.New("stale fencing token")
	// ErrInvalidKey: the key does not match the key syntax.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidInput: a field of a request is missing or malformed.
	ErrInvalidInput = errors.New("invalid input")
	// ErrDestinationNotServed: a new operation names a destination that
	// serves other tenants only (Options.DestinationTenants). Nothing was
	// recorded. It matches ErrInvalidInput too.
	ErrDestinationNotServed = errors.New("the destination does not serve this tenant")
	// ErrReasonRequired: an operator decision came without a reason
	// (or with one of spaces only). A missing reason is a missing field,
	// so it matches ErrInvalidInput too; the HTTP API still answers it
	// with its own problem type, 400 reason_required.
	ErrReasonRequired error = reasonRequired{}
	// ErrStaleFinding: Reconcile was given a Finding about other attempts
	// than the operation now has (Finding.AttemptCount): another attempt
	// was made while the lookup ran, so what it saw decides nothing.
	// Nothing was recorded; look again.
	ErrStaleFinding = errors.New("the operation has had another attempt since the lookup")
	// ErrStaleDecision: an operator decision or an approval named the
	// operation as it was seen (Decision.SeenUpdatedAt,
	// Approval.SeenUpdatedAt), and it has changed since: another
	// decision, a worker or the reconciler moved it. Nothing was recorded;
	// look at it again before deciding.
	ErrStaleDecision = errors.New("the operation has changed since it was seen")
	// ErrNotLedger: Open was given a database (a SQLite file, or the
	// PostgreSQL schema its search_path creates in) that holds another
	// application's tables and no ledger. It was left as it is; the
	// error names its tables. It also matches ErrInvalidInput.
	ErrNotLedger = store.ErrNotLedger
	// ErrStoreBusy: another process held the store's write lock (or, on
	// PostgreSQL, a lock the request needed) for longer than the ledger
	// waits for it: on SQLite, Options.SQLiteBusyTimeout (an operator's
	// VACUUM, another process's migration or long write); on PostgreSQL,
	// a lock_timeout the DSN sets. The request's transaction was rolled
	// back, so nothing was recorded: try it again.
	ErrStoreBusy = store.ErrBusy
	// ErrStoreUnavailable: the PostgreSQL server could not be reached
	// (it is down, restarting or failing over, or the network to it is
	// gone): no connection to it could be made, or the one used was lost
	// before the request's transaction was sent to be committed (the
	// server rolls that back), so nothing of the request was recorded;
	// try it again. The API answers 503
	// unavailable.
	ErrStoreUnavailable = store.ErrUnavailable
	// ErrStoreFull: the store's disk is full. The request's transaction
	// was rolled back, so nothing was recorded; writes fail until space
	// is freed.
	ErrStoreFull = store.ErrFull
	// ErrSchemaNewer: a newer release has migrated the store's schema
	// past the newest this one knows. Open refuses such a store; a
	// ledger that was open when the newer release migrated it refuses
	// every write from then on (nothing of the request was recorded) and
	// Ping fails, so that a process of the older release stops instead of
	// writing what the newer schema no longer means. Replace it with the
	// newer release (docs/operations.md, "Upgrading").
	ErrSchemaNewer = store.ErrSchemaNewer
	// ErrClosed: the Ledger (or another tenant's view of the same store,
	// WithTenant) was closed. Every call after Close fails with it,
	// reading and writing nothing.
	ErrClosed = store.ErrClosed
)

// StateError reports a request the operation's current state does not allow.
// It matches ErrInvalidState, and also ErrInProgress, ErrAlreadySucceeded or
// ErrNotDue when the state says so.
type StateError struct {
	Op        string     // what was attempted: "claim", "approve", ...
	Key       string     // the operation's key
	State     State      // the state that refused it
	Operation *Operation // the operation as it is now
	// step is true when the operation is a workflow's step
	// (ReviseWorkflowStep): what to do instead differs.
	step bool
}

// Error describes the error.
func (e *StateError) Error() string {
	msg := fmt.Sprintf("%s %s: operation is %s", e.Op, e.Key, e.State)
	if e.Operation != nil && e.Operation.Tombstoned {
		// Retention kept only its outcome: nothing can change it now.
		return msg + " and compacted (only its outcome is kept)"
	}
	// Its not_before is why a claim was refused (ErrNotDue); to anything
	// else a pending operation's not_before is beside the point.
	if e.Op == "claim" && e.State == StatePending && e.Operation != nil && e.Operation.NotBefore != nil {
		msg += " until " + textTime(*e.Operation.NotBefore)
	}
	if from, ok := decisionFrom[DecisionKind(e.Op)]; ok {
		// Which states it applies to says what to do instead.
		names := make([]string, len(from))
		for i, s := range from {
			names[i] = string(s)
		}
		msg += fmt.Sprintf(": %s applies to an operation that is %s, or %s", e.Op, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
	}
	if e.Op == "approve" {
		msg += ": only an operation awaiting approval can be approved"
		if e.Operation != nil && e.Operation.ApprovedBy != "" {
			msg += fmt.Sprintf("; version %d was approved by %s", e.Operation.Version, e.Operation.ApprovedBy)
		}
	}
	if e.Op == "revise" {
		// "pending" alone would not say why: it was dispatched before.
		msg += ": only an operation awaiting approval, or pending and never dispatched, can be revised; "
		if e.Operation != nil && e.Operation.FirstDispatchedAt != nil {
			msg += "an attempt of this content may have reached the destination (first_dispatched_at), so it is fixed; "
		}
		if e.step {
			// A workflow waits on its step's key: no other operation
			// can take the step's place.
			msg += "a workflow step's content is fixed once it may have been sent: retry it as it is, or cancel it, which fails the workflow"
		} else {
			msg += "a correction after that is a new operation with its own key"
		}
	}
	return msg
}

// Is matches ErrInvalidState and the sentinel of the refusing state.
func (e *StateError) Is(target error) bool {
	switch target {
	case ErrInvalidState:
		return true
	case ErrInProgress:
		return e.State == StateInProgress
	case ErrAlreadySucceeded:
		return e.State == StateSucceeded
	case ErrNotDue:
		// Only a claim refuses a pending operation, and only for its
		// not_before.
		return e.Op == "claim" && e.State == StatePending
	}
	return false
}

// MismatchError reports a key recorded with a different fingerprint.
type MismatchError struct {
	// Key is the operation's key.
	Key        string
	Stored     string // fingerprint on record
	Given      string // fingerprint of the refused request
	State      State  // state of the stored operation
	Tombstoned bool   // the stored record is a tombstone
	// StoredVersion and GivenVersion are set by an approval, which names
	// the version it approves as well as the fingerprint: the version on
	// record and the one approved.
	StoredVersion, GivenVersion int64
	// RevisedTo is set when an intent meets an operation whose version
	// is above the intent's: the content it was recorded with was most
	// likely revised since (Revise), to this version. A worker that
	// claims with its intent then never runs the revision: it claims
	// without one (or reads the operation first).
	RevisedTo int64
}

// Error describes the error.
func (e *MismatchError) Error() string {
	switch {
	case e.StoredVersion != e.GivenVersion:
		return fmt.Sprintf("%s: version %d awaits approval (fingerprint %s, state %s); the approval names version %d",
			e.Key, e.StoredVersion, e.Stored, e.State, e.GivenVersion)
	case e.StoredVersion != 0:
		return fmt.Sprintf("%s: version %d has fingerprint %s (state %s); the approval names %s, other content",
			e.Key, e.StoredVersion, e.Stored, e.State, e.Given)
	}
	if e.RevisedTo != 0 {
		return fmt.Sprintf("%s: key already recorded with fingerprint %s (state %s), request has %s: the operation was revised to version %d since, "+
			"and its content is the revised one (GET shows it); a worker sends it by claiming without an intent", e.Key, e.Stored, e.State, e.Given, e.RevisedTo)
	}
	return fmt.Sprintf("%s: key already recorded with fingerprint %s (state %s), request has %s",
		e.Key, e.Stored, e.State, e.Given)
}

// Is matches ErrFingerprintMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrFingerprintMismatch }

// StaleError reports a dispatch, release or outcome from an attempt that
// no longer holds the operation, or with a fencing token that is not its
// attempt's. An outcome from the attempt itself (its own token) has been
// recorded as evidence (Recorded); anything else was refused unrecorded.
type StaleError struct {
	// Key is the operation's key.
	Key string
	// AttemptID is the attempt the call named.
	AttemptID    string
	FencingToken int64      // the token the caller sent
	AttemptToken int64      // the token the attempt was issued
	Current      int64      // the operation's current token
	Operation    *Operation // the operation after the evidence was recorded
	// Recorded is true when Report kept the attempt's late report as
	// evidence. A token that is not the attempt's own is never recorded:
	// whoever sent it did not make that attempt.
	Recorded bool
	// ended is what the attempt had ended with before this call (an
	// outcome it reported, abandoned, lease_expired, or notSentConfirmed
	// for one abandoned because an earlier attempt confirmed the effect),
	// "" if still open.
	ended string
}

// Error describes the error.
func (e *StaleError) Error() string {
	// A StaleError the ledger returns carries the operation; one a
	// program made itself (a fake of the ledger) may not.
	state := ""
	if e.Operation != nil {
		state = fmt.Sprintf(" (state %s)", e.Operation.State)
	}
	if e.AttemptToken != 0 && e.FencingToken != e.AttemptToken {
		return fmt.Sprintf("%s: fencing token %d is not attempt %s's (it was issued token %d); nothing was recorded%s",
			e.Key, e.FencingToken, e.AttemptID, e.AttemptToken, state)
	}
	why := fmt.Sprintf("a newer claim holds token %d", e.Current)
	if e.Current == e.FencingToken { // nothing claimed the operation since
		switch e.ended {
		case "", AttemptLeaseExpired:
			why = "its lease ended"
		case AttemptAbandoned:
			// Released, or its lease ran out: both before its dispatch.
			why = "it ended before its dispatch: it gave the claim back, or its lease ran out"
		default:
			if rest, ok := strings.CutPrefix(e.ended, notSent); ok {
				// The ledger ended it unsent (endUnsent, settleConfirmed).
				why = "it was never sent: " + rest
				break
			}
			why = "it had reported " + e.ended + " already"
		}
	}
	kept := "nothing was recorded"
	if e.Recorded {
		kept = "its report was kept as evidence"
	}
	return fmt.Sprintf("%s: attempt %s with fencing token %d no longer holds the operation (%s); %s%s",
		e.Key, e.AttemptID, e.FencingToken, why, kept, state)
}

// Is matches ErrStaleFencingToken.
func (e *StaleError) Is(target error) bool { return target == ErrStaleFencingToken }

// refusal is an error about an operation that carries the operation as
// it was when the call was refused (OperationOf).
type refusal struct {
	err error
	op  *Operation
}

func (e *refusal) Error() string { return e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }

// operationCarrier is an error of another package that carries the
// operation a refusal concerns: the *client.Error of a problem of the
// HTTP API, which gives it where OperationOf would.
type operationCarrier interface {
	error
	Operation() *Operation
}

// OperationOf returns the operation a refusal of the ledger concerns, as
// it was when the call was refused: that of a *StateError or a
// *StaleError, or of a refusal with ErrStaleDecision, ErrStaleFinding or
// ErrAlreadyDispatched. The HTTP API gives its state and the operation
// in the problem of each, and OperationOf returns that operation for the
// error of package client too (its Operation method; masked at its
// sensitive fields, as the API shows it), so that code written against
// the library works on the client. It returns nil for any other error;
// the methods of *Operation take that nil (OperationOf(err).Masked() is
// nil).
func OperationOf(err error) *Operation {
	var (
		se      *StateError
		stale   *StaleError
		r       *refusal
		carrier operationCarrier
	)
	switch {
	case errors.As(err, &se):
		return se.Operation
	case errors.As(err, &stale):
		return stale.Operation
	case errors.As(err, &r):
		return r.op
	case errors.As(err, &carrier):
		return carrier.Operation()
	}
	return nil
}

// KeyError explains why a key was refused. It never repeats the key, which
// may be exactly the personal data the check keeps out of logs.
type KeyError struct {
	// Reason says what is wrong with the key, without quoting it.
	Reason string
}

// Error describes the error.
func (e *KeyError) Error() string { return "invalid key: " + e.Reason }

// Is matches ErrInvalidKey.
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }

func invalidInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidInput, fmt.Sprintf(format, args...))
}

// InvalidInputDetail returns the text of err without the leading
// "invalid input: " that an error matching ErrInvalidInput starts with
// (CheckOwner's, CheckDestinationRef's), to be quoted in a message of
// one's own ("config owners.crm: owner is at most 200 bytes"); any other
// error's text whole.
func InvalidInputDetail(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalidInput.Error()+": ")
}

// reasonRequired is ErrReasonRequired: a sentinel of its own that also
// matches ErrInvalidInput.
type reasonRequired struct{}

func (reasonRequired) Error() string { return "a reason is required" }

// Is matches ErrInvalidInput (ErrReasonRequired itself matches by
// equality).
func (reasonRequired) Is(target error) bool { return target == ErrInvalidInput }

// notServedError refuses a new operation for a destination that serves
// other tenants only. It names neither those tenants nor the operation's
// content.
type notServedError struct{ destination, tenant string }

func (e *notServedError) Error() string {
	return fmt.Sprintf("destination %q does not serve tenant %q (it lists the tenants it serves): nothing recorded", e.destination, e.tenant)
}

// Is matches ErrDestinationNotServed and ErrInvalidInput.
func (e *notServedError) Is(target error) bool {
	return target == ErrDestinationNotServed || target == ErrInvalidInput
}

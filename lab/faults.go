package lab

import (
	"fmt"
	"strings"
	"time"
)

// Fault is what a destination does to one call instead of (or besides)
// answering it normally.
type Fault string

// The faults. "Commit" is the moment the destination makes the effect.
const (
	// FaultNone: the call is served normally.
	FaultNone Fault = ""
	// FaultLostResponse: the effect is committed, then the answer is lost
	// (the connection closes without one). The caller sees an uncertain
	// outcome.
	FaultLostResponse Fault = "lost_response"
	// FaultTimeoutBeforeCommit: the request arrives, nothing happens, and
	// no answer comes. The caller cannot tell it from FaultLostResponse:
	// the outcome is uncertain too.
	FaultTimeoutBeforeCommit Fault = "timeout_before_commit"
	// Fault5xxBeforeCommit: 503 Service Unavailable, nothing happened.
	// destination.ClassifyStatus classifies 503 as retryable.
	Fault5xxBeforeCommit Fault = "5xx_before_commit"
	// Fault5xxAfterCommit: the effect is committed, then 500 Internal
	// Server Error. A 500 is uncertain (ClassifyStatus): the destination
	// may have acted, and here it did.
	Fault5xxAfterCommit Fault = "5xx_after_commit"
	// Fault429: 429 Too Many Requests with Retry-After (RetryAfterSeconds),
	// nothing happened: retryable, not before the Retry-After.
	Fault429 Fault = "429"
	// FaultValidation: 422 Unprocessable Entity, nothing happened:
	// rejected.
	FaultValidation Fault = "validation"
	// FaultDelayedVisibility: the effect is committed and the answer lost,
	// as with FaultLostResponse, and at the CRM the new record stays
	// invisible to lookups for LaggingVisibility, longer than the CRM
	// declares (a search index that lags): for a while its authoritative
	// "not found" is wrong. What keeps the effect single then is the CRM's
	// unique reference, which refuses the resend. Elsewhere it is
	// FaultLostResponse.
	FaultDelayedVisibility Fault = "delayed_visibility"
	// FaultLookupError is taken by the destination's next lookup, not by
	// its next call: the lookup service answers 503 Service Unavailable
	// and searches nothing, so the lookup tells neither that the record
	// exists nor that it does not. Calls are served as if it were not
	// queued. The reconciler counts it as a failed lookup: it backs off,
	// never resends, and holds the operation for its owner once lookups
	// have failed reconciler.Config.MaxLookupFailures times. Only a
	// destination that looks records up (the CRM) takes it.
	FaultLookupError Fault = "lookup_error"
)

// LaggingVisibility is how long a record made under FaultDelayedVisibility
// stays invisible to lookups.
const LaggingVisibility = 5 * time.Minute

// RetryAfterSeconds is the Retry-After a Fault429 answer carries.
const RetryAfterSeconds = 2

// CallFaults lists the faults a call takes: every fault but FaultNone and
// FaultLookupError.
var CallFaults = []Fault{FaultLostResponse, FaultTimeoutBeforeCommit, Fault5xxBeforeCommit,
	Fault5xxAfterCommit, Fault429, FaultValidation, FaultDelayedVisibility}

// Faults lists every fault but FaultNone: CallFaults, then
// FaultLookupError.
var Faults = append(append([]Fault(nil), CallFaults...), FaultLookupError)

// ParseFault reads a fault name as written in the constants ("none" and
// "" are FaultNone).
func ParseFault(s string) (Fault, error) { return parseName("fault", s, Faults) }

// Commits reports whether the fault lets the effect happen.
func (f Fault) Commits() bool {
	return f == FaultNone || f == FaultLostResponse || f == Fault5xxAfterCommit || f == FaultDelayedVisibility
}

// OnLookup reports whether the fault is taken by a lookup rather than by
// a call.
func (f Fault) OnLookup() bool { return f == FaultLookupError }

// checkLookupFaults refuses faults taken by a lookup for the destination
// named dest when it offers no lookup: nothing would ever take them. It is
// the one rule behind Inject's refusal (and so the served control API's)
// and the case file's.
func checkLookupFaults(dest string, looksUp bool, faults []Fault) error {
	for _, f := range faults {
		if f.OnLookup() && !looksUp {
			return fmt.Errorf("fault %s fails a lookup, and %s offers none (only the crm looks records up)", f, dest)
		}
	}
	return nil
}

// String is the fault's name, "none" for FaultNone.
func (f Fault) String() string {
	if f == FaultNone {
		return "none"
	}
	return string(f)
}

// CrashPoint is where a worker dies during one attempt. A crash is a fault
// of the worker, not of the destination: the worker simply stops, leaving
// its claim to expire.
type CrashPoint string

// The crash points, in the order a worker passes them.
const (
	// CrashNone: the worker does not crash.
	CrashNone CrashPoint = ""
	// CrashBeforeClaim: the worker dies before claiming; nothing happens.
	CrashBeforeClaim CrashPoint = "before_claim"
	// CrashAfterClaim: the worker dies holding a claim it never
	// dispatched; at lease expiry the operation is pending again.
	CrashAfterClaim CrashPoint = "after_claim"
	// CrashAfterDispatch: the worker dies after the dispatch mark, before
	// the call; at lease expiry the operation is uncertain (nothing was
	// sent, but nobody can know).
	CrashAfterDispatch CrashPoint = "after_dispatch"
	// CrashAfterEffect: the worker dies after the destination made the
	// effect, before reading the answer; at lease expiry the operation is
	// uncertain.
	CrashAfterEffect CrashPoint = "after_effect"
	// CrashAfterReport: the worker dies after reporting; nothing is lost.
	CrashAfterReport CrashPoint = "after_report"
)

// CrashPoints lists every crash point but CrashNone, in order.
var CrashPoints = []CrashPoint{CrashBeforeClaim, CrashAfterClaim, CrashAfterDispatch, CrashAfterEffect, CrashAfterReport}

// ParseCrashPoint reads a crash point name ("none" and "" are CrashNone).
func ParseCrashPoint(s string) (CrashPoint, error) { return parseName("crash point", s, CrashPoints) }

// String is the crash point's name, "none" for CrashNone.
func (c CrashPoint) String() string {
	if c == CrashNone {
		return "none"
	}
	return string(c)
}

// parseName finds s among names; "" and "none" are the zero value.
func parseName[T ~string](what, s string, names []T) (T, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return "", nil
	}
	for _, v := range names {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown %s %q (want none, %s)", what, s, joinNames(names))
}

// joinNames lists names for a message: "a, b, c".
func joinNames[T ~string](names []T) string {
	parts := make([]string, len(names))
	for i, v := range names {
		parts[i] = string(v)
	}
	return strings.Join(parts, ", ")
}

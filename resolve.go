package opledger

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// DecisionKind is an operator's decision about an operation.
type DecisionKind string

// The operator decisions.
const (
	// DecisionMarkSucceeded: the operator confirmed the effect at the
	// destination (needs the reference). From held, uncertain or failed.
	DecisionMarkSucceeded DecisionKind = "mark_succeeded"
	// DecisionAuthorizeRetry: the operator allows one more attempt. From
	// held, uncertain or failed; not for the failed step a workflow was
	// cancelled at (CancelWorkflow), which stays failed.
	DecisionAuthorizeRetry DecisionKind = "authorize_retry"
	// DecisionCancel: the operation will not happen. From held, uncertain,
	// pending or awaiting_approval.
	DecisionCancel DecisionKind = "cancel"
)

// Limits of a Decision's text, in bytes: Resolve refuses longer ones
// (ErrInvalidInput).
const (
	// MaxReasonBytes bounds Decision.Reason.
	MaxReasonBytes = maxReasonLength
	// MaxOperatorBytes bounds Decision.Operator.
	MaxOperatorBytes = maxNameLength
)

// Decision is an operator's decision with its reason.
type Decision struct {
	// Kind is the decision: DecisionMarkSucceeded, DecisionAuthorizeRetry
	// or DecisionCancel.
	Kind DecisionKind `json:"decision"`
	// DestinationRef is required with DecisionMarkSucceeded.
	DestinationRef string `json:"destination_ref,omitempty"`
	// Reason is required: it is what the next person reads.
	Reason string `json:"reason"`
	// Operator names who decided. Default "operator".
	Operator string `json:"operator,omitempty"`
	// SeenUpdatedAt, when set, is the operation's UpdatedAt as the person
	// deciding saw it. If the operation has changed since, the decision is
	// refused with ErrStaleDecision instead of being applied to a
	// situation nobody looked at: a page left open while another operator
	// decided, or the reconciler settled it. Consoles and scripts that
	// show an operation before a person decides should send it.
	SeenUpdatedAt time.Time `json:"seen_updated_at,omitzero"`
}

var decisionFrom = map[DecisionKind][]State{
	DecisionMarkSucceeded:  {StateHeld, StateUncertain, StateFailed},
	DecisionAuthorizeRetry: {StateHeld, StateUncertain, StateFailed},
	DecisionCancel:         {StateHeld, StateUncertain, StatePending, StateAwaitingApproval},
}

// decisionEvents are the timeline events the decisions record.
var decisionEvents = map[DecisionKind]string{
	DecisionMarkSucceeded:  "operator marked succeeded",
	DecisionAuthorizeRetry: "operator authorized retry",
	DecisionCancel:         "operator cancelled",
}

// Resolve records an operator's decision. Every decision needs a reason
// (ErrReasonRequired); a decision the current state does not allow is
// refused with a *StateError, and authorize_retry of the failed step a
// workflow was cancelled at (CancelWorkflow) with ErrInvalidState. The
// time from entering uncertain or held to the decision is recorded as the
// operator recovery time.
//
// A decision that repeats the one that last moved the operation (the same
// kind, operator, reason and destination_ref, and no change of state
// since) is a replay: it records nothing and returns the operation as it
// is, with replayed true. A script that lost Resolve's answer can
// therefore send the same decision again and tell it apart from a
// refusal. Once anything else has moved the operation (a worker claimed
// the retry it allowed, say), a repeat is judged as a new decision:
// refused, or stale when it carries SeenUpdatedAt.
func (l *Ledger) Resolve(ctx context.Context, key string, d Decision) (op *Operation, replayed bool, err error) {
	allowed, ok := decisionFrom[d.Kind]
	if !ok {
		return nil, false, invalidInput("decision must be mark_succeeded, authorize_retry or cancel")
	}
	if strings.TrimSpace(d.Reason) == "" {
		return nil, false, fmt.Errorf("%s: %w", d.Kind, ErrReasonRequired)
	}
	for _, f := range []struct {
		name, value string
		max         int
	}{{"reason", d.Reason, maxReasonLength}, {"operator", d.Operator, maxNameLength}, {"destination_ref", d.DestinationRef, maxNameLength}} {
		if err := checkLength(f.name, f.value, f.max); err != nil {
			return nil, false, err
		}
	}
	if err := checkText("reason", d.Reason, "operator", d.Operator, "destination_ref", d.DestinationRef); err != nil {
		return nil, false, err
	}
	if d.Kind == DecisionMarkSucceeded && strings.TrimSpace(d.DestinationRef) == "" {
		// Blanks name nothing anyone could find again, as for the reason.
		return nil, false, invalidInput("mark_succeeded needs the destination_ref the operator found")
	}
	if d.Kind != DecisionMarkSucceeded && d.DestinationRef != "" {
		// Kept nowhere: refused rather than dropped unseen.
		return nil, false, invalidInput("%s takes no destination_ref (only mark_succeeded records one); say what was found in the reason", d.Kind)
	}
	switch {
	case d.Operator == "":
		d.Operator = "operator"
	case strings.TrimSpace(d.Operator) == "":
		return nil, false, invalidInput("operator must name who decided, or be left out")
	}
	d.Operator = l.attributed(d.Operator)
	op, err = l.mutate(ctx, key, func(t *txn) error {
		replayed = false // a conflict runs this again
		if err := t.need(string(d.Kind)); err != nil {
			return err
		}
		repeat, err := t.repeats(d)
		if err != nil {
			return err
		}
		if repeat {
			replayed = true
			return nil
		}
		if !d.SeenUpdatedAt.IsZero() && !d.SeenUpdatedAt.Equal(t.op.UpdatedAt) {
			return t.refused(fmt.Errorf("%s %s: %w: it is %s, updated at %s, and was seen as updated at %s",
				d.Kind, t.key, ErrStaleDecision, t.op.State, t.op.UpdatedAt.UTC().Format(time.RFC3339Nano),
				d.SeenUpdatedAt.UTC().Format(time.RFC3339Nano)))
		}
		from := State(t.op.State)
		if !contains(allowed, from) {
			return t.refuse(string(d.Kind))
		}
		if d.Kind == DecisionAuthorizeRetry && from == StateFailed {
			c, err := t.workflowCancelledHere()
			if err != nil {
				return err
			}
			if c != nil {
				return t.refused(fmt.Errorf("%s %s: %w: its workflow was cancelled at this step by %s at %s, so it is not attempted again; "+
					"mark it succeeded instead if it took effect after all", d.Kind, t.key, ErrInvalidState, c.Actor, textTime(c.At)))
			}
		}
		recovery := ""
		if !t.op.UnresolvedSince.IsZero() {
			// Not below 0: a clock that reads earlier than when the
			// operation became unresolved (set back, or a demo's run ahead
			// and then a real one) would pull the figures below zero.
			waited := max(t.now.Sub(t.op.UnresolvedSince), 0)
			recovery = fmt.Sprintf("%s%s)", recoveryTime, waited.Round(time.Second))
			if err := t.tx.AppendRecovery(t.ctx, &store.Recovery{Tenant: t.tenant,
				Decision: string(d.Kind), At: t.now, Waited: waited}); err != nil {
				return err
			}
		}
		switch d.Kind {
		case DecisionMarkSucceeded:
			t.succeed(d.DestinationRef, json.RawMessage(nil))
			t.move(StateSucceeded, d.Operator, "", decisionEvents[d.Kind], decisionEvidence(d)+recovery)
		case DecisionAuthorizeRetry:
			t.unprotect()
			// A rejection's saved answer (kept on its attempt) is no
			// longer the operation's: a repeat must not be answered with
			// it, whatever the next attempt comes to.
			t.op.Response = nil
			if t.op.RequiresApproval && t.op.ApprovedBy == "" {
				// Cancelled before its content was approved: a retry
				// does not approve it, so it waits for that again.
				t.move(StateAwaitingApproval, d.Operator, "", decisionEvents[d.Kind],
					fmt.Sprintf("%s%s%s%d awaits approval", decisionEvidence(d), recovery, awaitsVersion, t.op.Version))
				break
			}
			t.move(StatePending, d.Operator, "", decisionEvents[d.Kind], decisionEvidence(d)+recovery)
			t.op.NotBefore = t.now
		case DecisionCancel:
			// A cancelled operation has no next attempt to protect: only
			// an authorized retry leads to one, and that starts unprotected.
			t.unprotect()
			t.move(StateFailed, d.Operator, "", decisionEvents[d.Kind], decisionEvidence(d)+recovery)
			t.op.FailureKind = string(FailureCancelled)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return op, replayed, nil
}

// workflowCancelledHere returns the timeline entry CancelWorkflow added
// to this failed operation when it gave up on its workflow at this step,
// nil if none: no retry of such a step is authorized, since its workflow
// goes no further.
func (t *txn) workflowCancelledHere() (*store.TimelineEntry, error) {
	if _, _, ok := SplitWorkflowStepKey(t.key); !ok {
		return nil, nil
	}
	tl, err := t.listTimeline()
	if err != nil {
		return nil, err
	}
	for i := len(tl) - 1; i >= 0; i-- {
		if e := tl[i]; e.Event == workflowCancelledEvent && e.ToState == "" {
			return e, nil
		}
	}
	return nil, nil
}

// What a decision's timeline evidence may hold after decisionEvidence.
const (
	recoveryTime  = " (recovery time "
	awaitsVersion = "; version "
)

// decisionEvidence is what a decision's timeline entry says first: the
// reference it confirms, if any, and its reason. The recovery time and,
// for a retry that awaits approval, the version may follow.
func decisionEvidence(d Decision) string {
	if d.Kind == DecisionMarkSucceeded {
		return "destination ref " + d.DestinationRef + "; " + d.Reason
	}
	return d.Reason
}

// repeats reports whether d repeats the decision that last moved the
// operation: the timeline's latest change of state is d's, by the same
// operator, with the same reason and reference, and the operation is
// still where that decision left it. Resolve answers such a decision as a
// replay (see there). It reads the timeline, so it runs only for a
// decision that may be one: the state a decision leads to never allows
// the same decision again.
func (t *txn) repeats(d Decision) (bool, error) {
	if contains(decisionFrom[d.Kind], State(t.op.State)) {
		return false, nil
	}
	last, err := t.lastMoveBy(decisionEvents[d.Kind], d.Operator)
	if err != nil || last == nil {
		return false, err
	}
	if d.Kind == DecisionMarkSucceeded && t.op.DestinationRef != d.DestinationRef {
		return false, nil
	}
	// The entry is exactly what d would have written: its evidence (as
	// stored, scrubbed of the operation's sensitive values), the recovery
	// time when it ended an unresolved state, and the version a retry
	// waits to be approved at. A reason that is only the start of the
	// recorded one is another decision.
	rest, ok := strings.CutPrefix(last.Evidence, t.scrub(decisionEvidence(d)))
	if ok && last.ToState == string(StateAwaitingApproval) {
		rest, ok = strings.CutSuffix(rest, fmt.Sprintf("%s%d awaits approval", awaitsVersion, t.op.Version))
	}
	if !ok {
		return false, nil
	}
	if State(last.FromState).Unresolved() {
		return recoverySuffix.MatchString(rest), nil
	}
	return rest == "", nil
}

// lastMoveBy is the timeline's latest entry of a change of state when it
// is event, by actor, into the state the operation is in: the entry of
// the decision, approval or revision a repeat would replay. Nil when the
// latest change of state is another, or the operation moved since (every
// change of state appends its entry; the state is checked too rather
// than trusted to that).
func (t *txn) lastMoveBy(event, actor string) (*store.TimelineEntry, error) {
	tl, err := t.listTimeline()
	if err != nil {
		return nil, err
	}
	for i := len(tl) - 1; i >= 0; i-- {
		if e := tl[i]; e.ToState != "" {
			if e.Event == event && e.Actor == actor && e.ToState == t.op.State {
				return e, nil
			}
			return nil, nil
		}
	}
	return nil, nil
}

// recoverySuffix is the recovery time a decision's evidence ends with
// when it settled an unresolved operation.
var recoverySuffix = regexp.MustCompile(`^` + regexp.QuoteMeta(recoveryTime) + `-?[0-9hms]+\)$`)

func contains(states []State, s State) bool {
	for _, v := range states {
		if v == s {
			return true
		}
	}
	return false
}

// Approval approves exactly one version of an operation's content.
type Approval struct {
	// Version is the version approved, required: the operation's version
	// awaiting approval (another is refused with a *MismatchError).
	Version int64 `json:"version"`
	// Fingerprint is the fingerprint of the content approved, required:
	// the operation's (Operation.Fingerprint), or the approval is refused
	// with a *MismatchError.
	Fingerprint string `json:"fingerprint"`
	// Approver names the person who approves, required; the operation's
	// ApprovedBy from then on.
	Approver string `json:"approver"`
	// SeenUpdatedAt, when set, is the operation's UpdatedAt as the person
	// approving saw it. The same version and fingerprint are not enough
	// to tell that they saw the operation as it is: one cancelled before
	// anyone approved it, then given a retry, awaits approval of the same
	// content again, and an approval from a page drawn before the cancel
	// would pass for one of it. An operation that awaits approval of
	// exactly this content but has changed since is refused with
	// ErrStaleDecision; other content is still a *MismatchError, and
	// another state a *StateError. A workflow step not yet recorded (no
	// operation: ApproveWorkflowStep) has no UpdatedAt, and its approval
	// is of its content only: the field is not checked there.
	SeenUpdatedAt time.Time `json:"seen_updated_at,omitzero"`
}

// validate checks that the approval names a version, a fingerprint and
// who approves. A version or fingerprint left out is refused here rather
// than compared with the operation's and reported as other content.
func (a Approval) validate() error {
	switch {
	case a.Version < 1:
		return invalidInput("version is required: the version approved, 1 or more (the operation's version)")
	case a.Fingerprint == "":
		return invalidInput("fingerprint is required: the fingerprint of the version approved (the operation's fingerprint)")
	case strings.TrimSpace(a.Approver) == "":
		return invalidInput("approver is required: the person who approves")
	}
	if err := checkLength("approver", a.Approver, maxNameLength); err != nil {
		return err
	}
	return checkText("approver", a.Approver)
}

// Approve moves an awaiting_approval operation to pending when the approval
// names exactly its current version and fingerprint. Approving content the
// operation no longer has is refused with a *MismatchError, and an
// operation in another state with a *StateError.
//
// An approval that repeats the one that last moved the operation (the
// same version, fingerprint and approver, and no change of state since)
// is a replay: it records nothing and returns the operation as it is,
// with replayed true, as Resolve does for a repeated decision. Once a
// worker has claimed the operation, a repeat is refused.
func (l *Ledger) Approve(ctx context.Context, key string, a Approval) (op *Operation, replayed bool, err error) {
	if err := a.validate(); err != nil {
		return nil, false, err
	}
	a.Approver = l.attributed(a.Approver)
	op, err = l.mutate(ctx, key, func(t *txn) error {
		var err error
		replayed, err = t.approve(a)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return op, replayed, nil
}

// Revision is new content for an operation that has never been dispatched.
type Revision struct {
	// Payload is the new content, required: JSON null says "no payload"
	// explicitly, an absent one is refused rather than taken for null.
	Payload json.RawMessage `json:"payload"`
	// Version is the new content's version: above the operation's
	// current one (the same version and content again is a replay).
	Version int64 `json:"version"`
	// Actor names who revised it. Default "operator".
	Actor string `json:"actor,omitempty"`
	// SensitiveFields are payload paths to mask from now on, as
	// Intent.SensitiveFields: the new content may carry a member the
	// first did not. They are added to the operation's; none is removed.
	SensitiveFields []string `json:"sensitive_fields,omitempty"`
}

// Revise replaces the content of an operation that is awaiting approval or
// pending, and never dispatched, with a new, higher version; the operation
// then awaits approval of that version. After any dispatch the content is
// fixed (a *StateError): a correction is then a new operation with its own
// key. So it is after an attempt given up before its dispatch mark
// reported late that its call acted, or may have, even once the
// operation awaits approval again.
//
// The revision's SensitiveFields are added to the operation's before
// anything is written, so that its new content and the revision's
// timeline text are masked at them.
//
// A revision that repeats the one that last moved the operation (the same
// version and content, by the same actor, and nothing has moved the
// operation since but an approval of exactly that content) records
// nothing and returns the operation as it is, with replayed true, as
// Resolve does for a repeated decision: a reviser whose answer was lost
// may retry after someone approved. Once a worker has claimed the
// operation, a repeat is refused.
func (l *Ledger) Revise(ctx context.Context, key string, r Revision) (op *Operation, replayed bool, err error) {
	if err := r.normalize(); err != nil {
		return nil, false, err
	}
	r.Actor = l.attributed(r.Actor)
	op, err = l.mutate(ctx, key, func(t *txn) error {
		var err error
		replayed, err = t.revise(r, "")
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return op, replayed, nil
}

// normalize checks a revision and fills its default actor.
func (r *Revision) normalize() error {
	switch {
	case r.Actor == "":
		r.Actor = "operator"
	case strings.TrimSpace(r.Actor) == "":
		return invalidInput("actor must name who revised, or be left out")
	}
	if len(r.Actor) > maxNameLength {
		return invalidInput("actor is at most %d bytes", maxNameLength)
	}
	if err := checkText("actor", r.Actor); err != nil {
		return err
	}
	if len(r.Payload) == 0 {
		return invalidInput("revise needs the new payload (JSON null for none)")
	}
	if err := checkSensitiveFields(r.SensitiveFields); err != nil {
		return err
	}
	if !json.Valid(r.Payload) {
		return invalidInput("payload is not valid JSON")
	}
	return nil
}

package opledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store"
)

// State is the state of an operation (DESIGN.md section 3).
type State string

// The states of an operation.
const (
	// StateAwaitingApproval: recorded; this version must be approved first.
	StateAwaitingApproval State = "awaiting_approval"
	// StatePending: may be claimed now or at NotBefore.
	StatePending State = "pending"
	// StateInProgress: claimed under a lease and a fencing token.
	StateInProgress State = "in_progress"
	// StateUncertain: the call may have taken effect; nobody knows yet.
	StateUncertain State = "uncertain"
	// StateHeld: automation cannot decide; waits for its owner by ReviewBy.
	StateHeld State = "held"
	// StateSucceeded: effect confirmed, reference and response saved. Final.
	StateSucceeded State = "succeeded"
	// StateFailed: no effect and no further automatic attempt. Final.
	StateFailed State = "failed"
)

// States lists every state, in the order of the state table.
var States = []State{StateAwaitingApproval, StatePending, StateInProgress, StateUncertain, StateHeld, StateSucceeded, StateFailed}

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// ParseStates reads a comma-separated list of state names, as the API's
// state parameter and the CLI's --state flag take it ("held,uncertain";
// spaces around a name are ignored). An empty list is no states (nil:
// every state, to ListOptions). A list with an empty entry ("held,", as
// a list built from a variable left unset reads) or a name that is no
// State is refused with an error matching ErrInvalidInput that names
// the entry: listing fewer states, or every state, than meant would go
// unnoticed.
func ParseStates(list string) ([]State, error) {
	if list == "" {
		return nil, nil
	}
	var states []State
	for i, name := range strings.Split(list, ",") {
		switch st := State(strings.TrimSpace(name)); {
		case st == "":
			return nil, invalidInput("entry %d of %.40q is empty: give states separated by commas, with no empty entry (states: %s)",
				i+1, list, StateNames())
		case !st.Valid():
			return nil, invalidInput("unknown state %.40q (states: %s)", string(st), StateNames())
		default:
			states = append(states, st)
		}
	}
	return states, nil
}

// StateNames is the names of the states, in the order of States,
// separated by ", ": for messages that list what a state may be.
func StateNames() string {
	names := make([]string, len(States))
	for i, s := range States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Unresolved reports whether the state waits for reconciliation or a person.
func (s State) Unresolved() bool { return s == StateUncertain || s == StateHeld }

// Final reports whether no automatic transition leaves the state.
func (s State) Final() bool { return s == StateSucceeded || s == StateFailed }

// FailureKind says why a failed operation failed.
type FailureKind string

// The kinds of failure.
const (
	FailureRejected  FailureKind = "rejected"  // refused by the destination before any effect
	FailureExhausted FailureKind = "exhausted" // retry limit or deadline reached
	FailureCancelled FailureKind = "cancelled" // an operator cancelled it
)

// Outcome is what an attempt reports.
type Outcome string

// The outcomes an attempt can report.
const (
	// OutcomeSucceeded: the effect is confirmed; a destination reference is required.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRejected: refused before any effect (bad input, permission).
	OutcomeRejected Outcome = "rejected"
	// OutcomeRetryable: failed before any effect (429, 503, refused connection).
	OutcomeRetryable Outcome = "retryable"
	// OutcomeUncertain: the call may have taken effect (timeout or reset after
	// dispatch, 5xx after dispatch).
	OutcomeUncertain Outcome = "uncertain"
)

// Valid reports whether o is one of the four outcomes.
func (o Outcome) Valid() bool {
	switch o {
	case OutcomeSucceeded, OutcomeRejected, OutcomeRetryable, OutcomeUncertain:
		return true
	}
	return false
}

// Attempt outcomes set by the ledger itself rather than reported.
const (
	// AttemptAbandoned: the lease expired before dispatch; nothing was sent.
	AttemptAbandoned = "abandoned"
	// AttemptLeaseExpired: the lease expired after dispatch; the operation
	// became uncertain.
	AttemptLeaseExpired = "lease_expired"
	// AttemptOpen is how Stats counts attempts still running: claimed, with
	// no outcome yet.
	AttemptOpen = "open"
)

// Intent is what a caller asks the ledger to record: one intended business
// change under a stable key.
type Intent struct {
	// Key identifies the operation within its tenant, e.g. "intake:I17:create".
	Key string `json:"key"`
	// Action names the change, e.g. "crm.create_inquiry".
	Action string `json:"action"`
	// Destination names the external system, e.g. "crm".
	Destination string `json:"destination"`
	// Payload is the approved content, any JSON value.
	Payload json.RawMessage `json:"payload"`
	// Version of the content; 0 means 1.
	Version int64 `json:"version"`
	// Owner is who decides when automation cannot, e.g. "ops-team".
	Owner string `json:"owner,omitempty"`
	// SourceEvent is the event that produced the intent, if any.
	SourceEvent string `json:"source_event,omitempty"`
	// RequiresApproval records the operation as awaiting_approval.
	RequiresApproval bool `json:"requires_approval,omitempty"`
	// SensitiveFields are dotted paths into the payload ("customer.email")
	// whose values are stored but never shown in lists, logs or the API. A
	// path reaches into every element of an array on its way (the payload
	// itself may be one), and also names a member spelled with the dots.
	// The saved response is masked at the same paths, wherever it
	// repeats a sensitive value and wherever its text contains one, and
	// so is the destination reference (Operation.Masked); free text
	// about the operation is masked when stored. They are not part of
	// the fingerprint: a repeat that names fields the recorded operation
	// lacks adds them; none is ever removed.
	SensitiveFields []string `json:"sensitive_fields,omitempty"`
}

// Operation is an operation as the ledger knows it.
//
// Its methods take a nil *Operation too, as OperationOf returns for an
// error that carries none, so that a chain such as
// OperationOf(err).Masked() never panics: Masked and ForClaimant return
// nil, IdempotencyKey "", MaskText its text as it is and MaskedAttempts
// its attempts as they are (an operation that is not there has no
// sensitive values), and json.Marshal encodes it as null.
type Operation struct {
	// Tenant is the tenant that owns the operation (Options.Tenant, or
	// WithTenant's).
	Tenant string `json:"tenant"`
	// Key identifies the operation within its tenant (Intent.Key).
	Key string `json:"key"`
	// Action names the change, as recorded (Intent.Action).
	Action string `json:"action"`
	// Destination names the external system, as recorded
	// (Intent.Destination).
	Destination string `json:"destination"`
	// Version is the version of the current content: the intent's (1
	// when it gave none), raised by each revision (Revise).
	Version int64 `json:"version"`
	// Fingerprint is the current content's (see Fingerprint): "sha256:"
	// and the hex digest of its action, destination, payload and
	// version.
	Fingerprint string `json:"fingerprint"`
	// Payload is the current content, as recorded or revised, with the
	// real values of its sensitive fields; Masked and MarshalJSON mask
	// them.
	Payload json.RawMessage `json:"payload"`
	// SensitiveFields are the payload paths whose values are never shown
	// (Intent.SensitiveFields): those of the intent, and those a repeat
	// or a revision added; none is ever removed.
	SensitiveFields []string `json:"sensitive_fields"`
	// Owner is who decides when automation cannot (Intent.Owner); empty
	// when none was named.
	Owner string `json:"owner"`
	// SourceEvent is the event that produced the operation
	// (Intent.SourceEvent); empty when none did.
	SourceEvent string `json:"source_event"`
	// RequiresApproval is true when the operation was recorded to await
	// approval of its exact content (Intent.RequiresApproval).
	RequiresApproval bool `json:"requires_approval"`
	// ApprovedBy names who approved the current version (Approval.Approver,
	// or the approver of a workflow step approved before it was
	// recorded); empty until then, and again after a revision.
	ApprovedBy string `json:"approved_by"`

	// State is where the operation is in its life: awaiting_approval,
	// pending, in_progress, uncertain, held, succeeded or failed.
	State State `json:"state"`
	// FailureKind says why a failed operation failed (FailureRejected,
	// FailureExhausted, FailureCancelled); empty in any other state.
	FailureKind FailureKind `json:"failure_kind"`
	// Dispatched is true once the current (or last) attempt may have
	// started its external call.
	Dispatched bool `json:"dispatched"`
	// FirstDispatchedAt is when the first call that may have reached the
	// destination could start: the first dispatch mark, or the claim of
	// an attempt that reported success or uncertain without one. Until
	// it is set, the operation was never sent, and its content may still
	// be revised.
	FirstDispatchedAt *time.Time `json:"first_dispatched_at"`
	// AttemptCount is how many attempts have been claimed, those given
	// back or abandoned before their dispatch included; 0 before the
	// first claim.
	AttemptCount int `json:"attempt_count"`
	// FencingToken is the token of the latest claim (that of the attempt
	// CurrentAttemptID): each claim takes the next one, so the token of
	// an earlier claim no longer holds the operation (*StaleError). 0
	// before the first claim.
	FencingToken int64 `json:"fencing_token"`
	// CurrentAttemptID is the ID of the latest attempt, kept after it has
	// ended; empty before the first claim.
	CurrentAttemptID string `json:"current_attempt_id"`
	// LeaseExpiresAt is when the claim of the attempt in progress lapses,
	// by the store's clock (ExtendLease moves it on); nil in any state
	// but in_progress.
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	// NotBefore is when a pending operation may be claimed (a backoff, or
	// the wait a destination asked for with Retry-After), or since when
	// it may: its recording, an approval, a claim given back. For an
	// uncertain operation it is when its next reconciliation is due: when
	// it became uncertain, or later once a lookup was put off. An operation
	// awaiting approval keeps the wait it had, which its approval does
	// not lift.
	NotBefore *time.Time `json:"not_before"`
	// ReviewBy is when the owner of a held operation should have decided
	// it: Options.HoldReviewAfter after it became held (Stats counts
	// those past it as ReviewsOverdue); nil in any state but held.
	ReviewBy *time.Time `json:"review_by"`
	// UnresolvedSince is when the operation last entered uncertain or held.
	UnresolvedSince *time.Time `json:"unresolved_since"`
	// StateSince is when the operation entered its state; awaiting
	// approval, when the version that awaits it was recorded (a revision
	// starts the wait again). Other writes (an owner named, a sensitive
	// field added) leave it. An operation that had succeeded before
	// migration 023 gives its last change.
	StateSince time.Time `json:"state_since"`
	// Protected is true when the next attempt is a retry under the
	// destination's idempotency key.
	Protected bool `json:"protected"`
	// ProtectedUntil, on a protected operation, is when the destination's
	// idempotency-key retention ends: the protected retry is neither
	// claimed nor dispatched after it (the operation is held instead).
	ProtectedUntil *time.Time `json:"protected_until,omitempty"`

	// DestinationRef is the destination's reference of the confirmed
	// effect, set when the effect is confirmed (a success reported, a
	// lookup that found the record, an operator's mark_succeeded): the
	// operation is then succeeded, or succeeds as soon as the attempt
	// that held it at the time is settled. Empty until then. Masked shows
	// it masked where it holds a sensitive value.
	DestinationRef string `json:"destination_ref"`
	// Response is the destination's answer saved with the success, which
	// Do and the proxy replay to a repeat; or, for an operation failed
	// by a rejection, the answer that said why (a retry authorized after
	// it clears it). Nil when none was saved.
	Response json.RawMessage `json:"response"`
	// LastError is the error text of the latest attempt that reported a
	// failure (rejected, retryable, uncertain), masked at the sensitive
	// fields and cut to 1,000 bytes; empty before any such report, and
	// again once the operation succeeded. A lease that ran out without a
	// report leaves it as it was: the timeline says what happened.
	LastError string `json:"last_error"`
	// DuplicateEffects counts late successes whose reference differed from
	// the confirmed one: each is a second effect at the destination.
	DuplicateEffects int `json:"duplicate_effects"`
	// Tombstoned is true when only the compacted record is left.
	Tombstoned bool `json:"tombstoned,omitempty"`

	// CreatedAt is when the operation was recorded, by the ledger's
	// clock (Ledger.Now).
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when its record last changed, by any write (a claim,
	// a dispatch mark, a report, a decision, a lease extended): what
	// Decision.SeenUpdatedAt and Approval.SeenUpdatedAt name.
	UpdatedAt time.Time `json:"updated_at"`

	// shown marks a copy Masked made: masking it again changes nothing,
	// so Masked and MarshalJSON return it as it is.
	shown bool
	// earlierPayloads are the payloads revisions replaced while the
	// operation had sensitive fields (a JSON array, or nil): their
	// sensitive values are masked as the payload's.
	earlierPayloads json.RawMessage
	// forClaimant marks a copy ForClaimant made: MarshalJSON keeps its
	// payload, and Masked masks it like any other.
	forClaimant bool
}

// IdempotencyKey is the destination idempotency key of the operation's
// current version; "" for a nil o.
func (o *Operation) IdempotencyKey() string {
	if o == nil {
		return ""
	}
	return DestinationIdempotencyKey(o.Tenant, o.Key, o.Version)
}

// MarshalJSON encodes the operation as Masked shows it, so that an
// operation written to a log or an API response never carries its
// sensitive values. Code that needs the real payload, response or
// reference reads the fields.
func (o Operation) MarshalJSON() ([]byte, error) {
	type plain Operation
	m := o.Masked()
	if o.forClaimant {
		m.Payload = o.Payload
	}
	return json.Marshal(plain(*m))
}

// Masked returns a copy of the operation as it is shown (the HTTP API,
// the console, opledger ops, and MarshalJSON): its sensitive payload
// fields masked; its saved response masked at the same paths
// (destinations often answer in the shape they were sent), wherever a
// string or number of it is a sensitive value, and wherever a string of
// it (a member name included) contains one (of minSecretLength bytes or
// more, in any of the spellings secretText knows: "invalid address
// ***"); and its destination reference masked in the same way, since
// some destinations name an effect by what it was about (a contact by
// its e-mail address).
// The operation itself keeps the real values: Do's answer to a repeat
// and the proxy's replay give the caller its saved result from them.
// A nil o gives nil.
func (o *Operation) Masked() *Operation {
	if o == nil {
		return nil
	}
	m := *o
	m.forClaimant = false
	if o.shown {
		return &m
	}
	m.shown = true
	m.SensitiveFields = slices.Clone(o.SensitiveFields)
	if m.SensitiveFields == nil {
		m.SensitiveFields = []string{} // [], never null: as a stored operation reads back
	}
	if len(o.SensitiveFields) == 0 {
		return &m
	}
	st := newSecretText(o.Payload, o.earlierPayloads, o.SensitiveFields)
	m.Payload = MaskPayload(o.Payload, o.SensitiveFields)
	m.Response = maskResponse(o.Response, o.SensitiveFields, st)
	m.DestinationRef = st.maskValue(o.DestinationRef)
	return &m
}

// MaskText returns s with every sensitive value of o (of three bytes or
// more), in any of the spellings Masked finds in a response, replaced by
// "***": as the ledger stores free text about o (errors, reasons). For
// text about o that goes elsewhere, a log line say. A nil o masks
// nothing.
func (o *Operation) MaskText(s string) string {
	if o == nil {
		return s
	}
	return newSecretText(o.Payload, o.earlierPayloads, o.SensitiveFields).mask(s)
}

// ForClaimant returns a copy of the operation whose MarshalJSON shows it
// as the worker that claimed it must see it: masked as Masked masks it,
// except the payload, which the claimant sends to the destination as it
// was recorded. Masked of the copy masks it all, as of any operation, so
// nothing else shows the real payload by way of it. The HTTP API answers
// a claim with it. A nil o gives nil.
func (o *Operation) ForClaimant() *Operation {
	if o == nil {
		return nil
	}
	m := *o
	m.forClaimant = true
	return &m
}

// MaskedAttempts returns attempts, which are o's, as they are shown
// beside it: copies whose destination references are masked as Masked
// masks o's (their errors were masked when they were stored). Without
// sensitive fields (or with a nil o) they are returned as they are.
func (o *Operation) MaskedAttempts(attempts []*Attempt) []*Attempt {
	if o == nil {
		return attempts
	}
	st := newSecretText(o.Payload, o.earlierPayloads, o.SensitiveFields)
	if st == nil {
		return attempts
	}
	out := make([]*Attempt, len(attempts))
	for i, a := range attempts {
		c := *a
		c.DestinationRef = st.maskValue(a.DestinationRef)
		out[i] = &c
	}
	return out
}

// numberText is the text by which numbers are compared for echoes: an
// integer as written (exact however long), any other number in its
// shortest float form, so that 1.10 echoes 1.1.
func numberText(n json.Number) string {
	if !strings.ContainsAny(string(n), ".eE") {
		return string(n)
	}
	f, err := n.Float64()
	if err != nil {
		return string(n)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// maskResponse masks a saved response at the sensitive paths, and in
// every string or number in it the sensitive values st knows
// (secretText.maskValue: a whole value of any length, a value inside a
// string of minSecretLength bytes or more), member names included
// (maskNames): destinations often answer in the shape they were sent,
// echo a value elsewhere, quote it in a message, or key a result by it.
// The response is decoded and encoded once for both; it is returned
// unchanged when there is nothing to mask or it is not JSON.
func maskResponse(doc json.RawMessage, paths []string, st *secretText) json.RawMessage {
	if len(paths) == 0 || len(doc) == 0 {
		return doc
	}
	d, err := decodeJSON(doc) // numbers exact: see numberText
	if err != nil || d == nil {
		return doc
	}
	changed := false
	for _, path := range paths {
		atPath(d, path, func(obj map[string]any, key string) { obj[key], changed = Mask, true })
	}
	if st != nil {
		var walk func(v any) any
		walk = func(v any) any {
			switch x := v.(type) {
			case map[string]any:
				for k, el := range x {
					x[k] = walk(el)
				}
				if maskNames(x, st) {
					changed = true
				}
			case []any:
				for i, el := range x {
					x[i] = walk(el)
				}
			case string:
				if m := st.maskValue(x); m != x {
					changed = true
					return m
				}
			case json.Number:
				if st.values[numberText(x)] || st.values[string(x)] {
					changed = true
					return Mask
				}
			}
			return v
		}
		d = walk(d)
	}
	// A member named twice is decoded as its last value: an earlier one,
	// which may hold a secret (at a sensitive path, or a value of any
	// length), is shown only if the answer's text is; it is shown
	// re-encoded, each member once.
	if !changed && !namesTwice(doc) {
		return doc
	}
	out, err := json.Marshal(d)
	if err != nil {
		return json.RawMessage(`"` + Mask + `"`) // nothing shown rather than a secret
	}
	return out
}

// namesTwice reports whether an object in the JSON document doc names a
// member twice (or doc is not JSON).
func namesTwice(doc []byte) bool {
	type frame struct {
		names   map[string]bool // nil: an array
		wantKey bool
	}
	var stack []*frame
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber() // a number past a double is a number, not an error
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if name, ok := tok.(string); ok && top != nil && top.names != nil && top.wantKey {
			if top.names[name] {
				return true
			}
			top.names[name], top.wantKey = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{names: map[string]bool{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				stack[len(stack)-1].wantKey = true // a value ended
			}
		default: // a scalar value
			if top != nil {
				top.wantKey = true
			}
		}
	}
}

// maskNames masks the sensitive values inside the member names of obj
// (secretText.mask: a destination may key its answer by an address),
// and reports whether it renamed any. A masked name that another member
// already has is told apart by " (2)", " (3)"… (masked too), in the
// order of the real names, so that no member is lost from view.
func maskNames(obj map[string]any, st *secretText) bool {
	var renamed []string
	for k := range obj {
		if st.mask(k) != k {
			renamed = append(renamed, k)
		}
	}
	if len(renamed) == 0 {
		return false
	}
	slices.Sort(renamed)
	values := make([]any, len(renamed))
	for i, k := range renamed {
		values[i] = obj[k]
		delete(obj, k)
	}
	for i, k := range renamed {
		masked := st.mask(k)
		name := masked
		for n := 2; ; n++ {
			if _, taken := obj[name]; !taken {
				break
			}
			// Masked again: the suffix may complete a value.
			name = st.mask(fmt.Sprintf("%s (%d)", masked, n))
		}
		obj[name] = values[i]
	}
	return true
}

// sensitiveValues returns the strings and numbers found at the paths of
// payload, as their JSON text, and apart the member names inside them
// that read as data (redact.DataName); none when payload is not JSON.
func sensitiveValues(payload json.RawMessage, paths []string) (values, names map[string]bool) {
	p, err := decodeJSON(payload) // numbers exact: see numberText
	if err != nil || p == nil {
		return nil, nil
	}
	values, names = map[string]bool{}, map[string]bool{}
	for _, path := range paths {
		atPath(p, path, func(obj map[string]any, key string) { collectLeaves(obj[key], values, names) })
	}
	return values, names
}

// collectLeaves adds the strings and numbers in v (as their JSON text) to
// values. Empty strings are not secrets. A number is added as numberText
// compares it and as it was written (1.5e3 and 1500), so that text
// quoting it as the payload has it is masked too. The member names of
// an object inside a sensitive field are its content too (recipients
// keyed by address), except those that read as field names (redact.DataName):
// they go to names, masked inside text (and as member names) but never
// compared with a whole value, which a short name ("1") would match all
// too often.
func collectLeaves(v any, values, names map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for name, el := range x {
			if redact.DataName(name) {
				names[name] = true
			}
			collectLeaves(el, values, names)
		}
	case []any:
		for _, el := range x {
			collectLeaves(el, values, names)
		}
	case string:
		if x != "" {
			values[x] = true
			// A number written as text ("2.50") may come back as a
			// number (2.5): as numberText compares it too.
			if n := json.Number(x); json.Valid([]byte(x)) && isNumber(x) {
				values[numberText(n)] = true
			}
		}
	case json.Number:
		values[numberText(x)] = true
		values[string(x)] = true
	}
}

// isNumber reports whether s, valid JSON, is a number.
func isNumber(s string) bool {
	return s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9')
}

// Mask is the value that replaces a sensitive field.
const Mask = "***"

// MaskPayload returns payload with the values at the dotted paths replaced
// by Mask, wherever atPath finds them (through arrays, the payload's own
// included, and in members whose names contain dots). A payload that is
// not JSON, or a path that is absent, is left as it is.
func MaskPayload(payload json.RawMessage, paths []string) json.RawMessage {
	if len(paths) == 0 || len(payload) == 0 {
		return payload
	}
	// Numbers stay as they were written: decoded as float64, a long
	// one would be shown rounded.
	doc, err := decodeJSON(payload)
	if err != nil || doc == nil {
		return payload
	}
	for _, p := range paths {
		atPath(doc, p, func(obj map[string]any, key string) { obj[key] = Mask })
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return payload
	}
	return out
}

// atPath calls fn with the object and member name of every value in node
// that path (a dotted path) names. An array on the way stands for each
// of its elements, at the top as below it, and a member whose own name
// contains dots ("customer.email") matches the steps it spells, as well
// as nested members do. The member names tried are the prefixes of path
// that end before a dot or at its end, shortest first: substrings of
// path, so that no name is built.
func atPath(node any, path string, fn func(obj map[string]any, key string)) {
	switch x := node.(type) {
	case []any:
		for _, el := range x {
			atPath(el, path, fn)
		}
	case map[string]any:
		for end := 0; ; end++ {
			dot := strings.IndexByte(path[end:], '.')
			if dot < 0 {
				if _, ok := x[path]; ok {
					fn(x, path)
				}
				return
			}
			end += dot
			if v, ok := x[path[:end]]; ok {
				atPath(v, path[end+1:], fn)
			}
		}
	}
}

// Attempt is one technical try at an operation.
type Attempt struct {
	// ID identifies the attempt (a ULID): Claim.AttemptID.
	ID string `json:"id"`
	// Number is the attempt's place among the operation's attempts,
	// from 1.
	Number int `json:"number"`
	// FencingToken is the token its claim was issued (Claim.FencingToken).
	FencingToken int64 `json:"fencing_token"`
	// Worker names who claimed it (ClaimOptions.Worker, or the ledger's
	// Options.Worker when the claim named none).
	Worker string `json:"worker"`
	// Protected is true when the attempt retried an uncertain one under
	// the destination's idempotency key (Claim.Protected).
	Protected bool `json:"protected"`
	// ClaimedAt is when it was claimed, by the ledger's clock.
	ClaimedAt time.Time `json:"claimed_at"`
	// LeaseExpiresAt is when its claim lapses or lapsed: the claim's
	// lease end, moved on by ExtendLease.
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// DispatchedAt is when its dispatch mark was written (Dispatch, or a
	// claim with Dispatch); nil for an attempt never marked.
	DispatchedAt *time.Time `json:"dispatched_at"`
	// FinishedAt is when the attempt ended: its report, its lease found
	// expired or its claim given back; a late report after that moves it
	// to the report's time, since the call lasted until then.
	FinishedAt *time.Time `json:"finished_at"`
	// Outcome is what the attempt ended with: the reported Outcome, or
	// AttemptAbandoned or AttemptLeaseExpired; empty while it is open. It
	// does not change once set.
	Outcome string `json:"outcome"`
	// DestinationRef is the reference the attempt reported: that of its
	// success, or one a destination gave with a failure (kept as
	// evidence); empty when it reported none.
	DestinationRef string `json:"destination_ref"`
	// Error is the error text it reported, or why the ledger ended it
	// (given back, never sent), masked at the operation's sensitive
	// fields and cut to 1,000 bytes; empty for a success.
	Error string `json:"error"`
	// Stale is true when the report arrived after the attempt lost the
	// operation; it was kept as evidence.
	Stale bool `json:"stale"`
	// LateOutcome is the outcome of a stale report that arrived after the
	// attempt had ended (its lease expired, or it had reported already),
	// kept as evidence beside Outcome; of several, the latest. Such a
	// report fills DestinationRef and Error only where they were empty.
	LateOutcome string `json:"late_outcome"`
	// Version is the operation's content version the attempt was claimed
	// for: its call sent that content. 0 for attempts claimed before
	// releases of December 2026, whose version is not known.
	Version int64 `json:"version"`
}

// TimelineEntry is one step in an operation's history.
type TimelineEntry struct {
	// At is when it happened, by the ledger's clock (Ledger.Now).
	At time.Time `json:"at"`
	// Actor is who did it: a worker's name, an operator's (followed by
	// the credential of WithCredential, if any), ActorReconciler,
	// ActorSystem, or ActorEvent's "event:<source>:<event_id>".
	Actor string `json:"actor"`
	// AttemptID is the attempt the entry is about, if any.
	AttemptID string `json:"attempt_id,omitempty"`
	// Event says what happened, in a few words for a person ("claimed",
	// "dispatched", "operator cancelled"). Compare From and To, not
	// Event, in code.
	Event string `json:"event"`
	// From and To are the state before and after; both are empty for an
	// entry that changed no state (a dispatch mark, a note), and From for
	// the one that recorded the operation.
	From State `json:"from,omitempty"`
	To   State `json:"to,omitempty"`
	// Evidence is what the change rests on (a reference, an error, an
	// operator's reason), masked at the operation's sensitive fields.
	Evidence string `json:"evidence,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// operationTimes is an Operation allocated together with the times its
// pointers point at: one allocation where each time of its own would be
// one more. Each pointer has its own element, as timePtr's copies are
// each their own.
type operationTimes struct {
	op    Operation
	times [6]time.Time
}

func toOperation(r *store.Operation) *Operation {
	o := new(operationTimes)
	used := 0
	at := func(t time.Time) *time.Time { // timePtr, in o.times
		if t.IsZero() {
			return nil
		}
		o.times[used] = t
		used++
		return &o.times[used-1]
	}
	o.op = Operation{
		Tenant: r.Tenant, Key: r.Key, Action: r.Action, Destination: r.Destination,
		Version: r.Version, Fingerprint: r.Fingerprint, Payload: json.RawMessage(r.Payload),
		SensitiveFields: r.SensitiveFields, Owner: r.Owner, SourceEvent: r.SourceEvent,
		RequiresApproval: r.RequiresApproval, ApprovedBy: r.ApprovedBy,
		State: State(r.State), FailureKind: FailureKind(r.FailureKind), Dispatched: r.Dispatched,
		FirstDispatchedAt: at(r.FirstDispatchedAt), AttemptCount: r.AttemptCount,
		FencingToken: r.FencingToken, CurrentAttemptID: r.CurrentAttemptID,
		LeaseExpiresAt: at(r.LeaseExpiresAt), NotBefore: at(r.NotBefore),
		ReviewBy: at(r.ReviewBy), UnresolvedSince: at(r.UnresolvedSince), StateSince: stateSince(r),
		Protected: r.Protected, ProtectedUntil: at(r.ProtectedUntil),
		DestinationRef: r.DestinationRef, Response: savedResponse(r.Response),
		LastError: r.LastError, DuplicateEffects: r.DuplicateEffects,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		earlierPayloads: json.RawMessage(r.EarlierPayloads),
	}
	return &o.op
}

// savedResponse is a stored response as an operation carries it: nil for
// none, and for an empty one that PostgreSQL kept as it was reported
// before reports made it none (json.RawMessage encodes an empty one as
// no JSON at all, and the operation could not be shown).
func savedResponse(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// stateSince is when r entered its state: a row that had succeeded before
// migration 023 has no such time, and gives its last change.
func stateSince(r *store.Operation) time.Time {
	if r.StateSince.IsZero() {
		return r.UpdatedAt
	}
	return r.StateSince
}

func tombstoneOperation(t *store.Tombstone) *Operation {
	return &Operation{
		Tenant: t.Tenant, Key: t.Key, Version: t.Version, Fingerprint: t.Fingerprint, State: State(t.State),
		FailureKind: FailureKind(t.FailureKind), DestinationRef: t.DestinationRef,
		DuplicateEffects: t.DuplicateEffects, AttemptCount: t.AttemptCount,
		Tombstoned: true, CreatedAt: t.CreatedAt, UpdatedAt: t.FinishedAt, StateSince: t.FinishedAt,
	}
}

func toAttempt(a *store.Attempt) *Attempt {
	return &Attempt{
		ID: a.ID, Number: a.Number, FencingToken: a.FencingToken, Worker: a.Worker,
		Protected: a.Protected, ClaimedAt: a.ClaimedAt, LeaseExpiresAt: a.LeaseExpiresAt,
		DispatchedAt: timePtr(a.DispatchedAt), FinishedAt: timePtr(a.FinishedAt), Outcome: a.Outcome,
		DestinationRef: a.DestinationRef, Error: a.Error, Stale: a.Stale, LateOutcome: a.LateOutcome,
		Version: a.Version,
	}
}

func toTimelineEntry(e *store.TimelineEntry) *TimelineEntry {
	return &TimelineEntry{
		At: e.At, Actor: e.Actor, AttemptID: e.AttemptID, Event: e.Event,
		From: State(e.FromState), To: State(e.ToState), Evidence: e.Evidence,
	}
}

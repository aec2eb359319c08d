package opledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// Event is an inbound notification (a webhook) as it arrived. It is
// identified by (Source, EventID) within the tenant; each arrival is a
// delivery. Authenticate it (package webhook) before handing it to
// ReceiveEvent: a known event id proves nothing about who sent it.
type Event struct {
	// Source names the sender, e.g. "stripe" or "forms". Key syntax.
	Source string `json:"source"`
	// EventID is the sender's id of the event, the same on every
	// delivery. Key syntax: no personal data.
	EventID string `json:"event_id"`
	// DeliveryID is the sender's id of this arrival, if it has one.
	DeliveryID string `json:"delivery_id,omitempty"`
	// Type selects the mapping rule, e.g. "submission.accepted".
	Type string `json:"type"`
	// OccurredAt is when the sender says the event happened.
	OccurredAt time.Time `json:"occurred_at,omitzero"`
	// Payload is the event's data, any JSON value (usually an object).
	Payload json.RawMessage `json:"payload"`
}

// EventStatus is what became of an event.
type EventStatus string

// The statuses of a recorded event.
const (
	// EventApplied: the rule's intents were recorded, or matched operations
	// already recorded with the same content.
	EventApplied EventStatus = "applied"
	// EventOutOfOrder: the event is older than one already applied to the
	// same object; it was recorded and flagged, not applied.
	EventOutOfOrder EventStatus = "out_of_order"
	// EventConflict: an intent collided with an operation of other content
	// and the rule gives no way to correct it; nothing was applied and a
	// person must decide. Reason says which key.
	EventConflict EventStatus = "conflict"
	// EventUnmapped: no rule matches the event's source and type.
	EventUnmapped EventStatus = "unmapped"
)

// EventRecord is an event as the ledger recorded it.
type EventRecord struct {
	// Tenant is the tenant that received the event.
	Tenant string `json:"tenant"`
	// Source names the sender (Event.Source).
	Source string `json:"source"`
	// EventID is the sender's id of the event (Event.EventID): with
	// Source, what identifies it.
	EventID string `json:"event_id"`
	// Type is the event's type, as its first delivery gave it
	// (Event.Type).
	Type string `json:"type"`
	// OccurredAt is when the sender says the event happened, as its first
	// delivery gave it; nil when it gave none.
	OccurredAt *time.Time `json:"occurred_at"`
	// PayloadSHA256 is the hex SHA-256 of the first delivery's payload in
	// canonical JSON (RFC 8785 with exact numbers, as Fingerprint has it),
	// or of its raw bytes when RFC 8785 refuses it (two members of one
	// name, an escaped lone surrogate, a number beyond a double's range)
	// or the event was recorded before digests were canonical (its
	// redeliveries are then compared with its bytes); the payload itself
	// is not kept.
	PayloadSHA256 string `json:"payload_sha256"`
	// Rule is the matching rule's name, empty when none matched.
	Rule string `json:"rule"`
	// Status is what became of the event: applied, out_of_order,
	// conflict or unmapped.
	Status EventStatus `json:"status"`
	// OutOfOrder is Status == EventOutOfOrder.
	OutOfOrder bool `json:"out_of_order"`
	// Reason explains any status but applied; of an applied event, it
	// names the earlier correction it withdrew, if any.
	Reason string `json:"reason,omitempty"`
	// ObjectKey and OrderValue are the object and its ordering value, when
	// the rule declares them.
	ObjectKey string `json:"object_key,omitempty"`
	// OrderValue is the event's ordering value of its object, by which
	// an older event is told from a newer one (EventOutOfOrder).
	OrderValue string `json:"order_value,omitempty"`
	// OperationKeys are the operations the event produced or matched.
	OperationKeys []string `json:"operation_keys"`
	// ReceivedAt is when its first delivery arrived, by the ledger's
	// clock: events are listed newest first by it.
	ReceivedAt time.Time `json:"received_at"`
}

// Delivery is one arrival of an event.
type Delivery struct {
	// ID is the store's number of the arrival. It counts every tenant's
	// deliveries, so it is not shown by the HTTP API (a tenant would read
	// from two of its own how many others received in between): a
	// Delivery read through the API has 0.
	ID int64 `json:"-"`
	// DeliveryID is the sender's id of this arrival (Event.DeliveryID);
	// empty when it gave none.
	DeliveryID string `json:"delivery_id,omitempty"`
	// ReceivedAt is when it arrived, by the ledger's clock.
	ReceivedAt time.Time `json:"received_at"`
	// Duplicate is true for every arrival after the first.
	Duplicate bool `json:"duplicate"`
	// PayloadDiffers is true when this arrival's payload is not the one
	// the first delivery carried, compared as JSON: member order,
	// whitespace, escapes and a number's spelling do not count, a
	// number's exact value does. The first delivery's mapping stands.
	PayloadDiffers bool `json:"payload_differs,omitempty"`
}

// EventResult answers ReceiveEvent.
type EventResult struct {
	// Duplicate is true when the event had been received before: only the
	// delivery was recorded, nothing else changed.
	Duplicate bool `json:"duplicate"`
	// OutOfOrder is true when the event was flagged, not applied.
	OutOfOrder bool `json:"out_of_order"`
	// Status is the recorded event's status (EventRecord.Status).
	Status EventStatus `json:"status"`
	// Reason explains any status but applied (EventRecord.Reason).
	Reason string `json:"reason,omitempty"`
	// Event is the recorded event.
	Event *EventRecord `json:"event"`
	// Delivery is this arrival.
	Delivery *Delivery `json:"delivery"`
	// Operations are the operations the event produced (on a duplicate:
	// the ones the first delivery produced), as they are now.
	Operations []*Operation `json:"operations"`
}

// Limits of an event's fields.
const (
	// MaxEventPayload is the largest event payload accepted, in bytes.
	MaxEventPayload = 1 << 20
)

// ErrEventPayloadTooLarge: an event's payload is larger than
// MaxEventPayload. It matches ErrInvalidInput too; the HTTP API answers
// it 413, as it does a request body past its limit.
var ErrEventPayloadTooLarge = fmt.Errorf("%w: payload is larger than %d bytes", ErrInvalidInput, MaxEventPayload)

// validate checks an event's identifying fields.
func (ev *Event) validate() error {
	switch {
	case ev.Source == "":
		return invalidInput("source is required: the name of the system that sent the event, in the key syntax (forms, stripe)")
	case ev.EventID == "":
		return invalidInput("event_id is required: the sender's id of the event, the same on every delivery of it")
	}
	if err := ValidateKey(ev.Source); err != nil {
		return invalidInput("source: %s", strings.TrimPrefix(err.Error(), "invalid key: "))
	}
	if err := ValidateKey(ev.EventID); err != nil {
		return invalidInput("event_id: %s", strings.TrimPrefix(err.Error(), "invalid key: "))
	}
	if len(ev.Source)+1+len(ev.EventID) > maxNameLength {
		return invalidInput("source and event_id together are at most %d bytes", maxNameLength-1)
	}
	if ev.DeliveryID != "" {
		if err := ValidateKey(ev.DeliveryID); err != nil {
			return invalidInput("delivery_id: %s", strings.TrimPrefix(err.Error(), "invalid key: "))
		}
	}
	if err := checkRequiredName("type", ev.Type); err != nil {
		return err
	}
	if err := checkText("type", ev.Type); err != nil {
		return err
	}
	if !ev.OccurredAt.IsZero() && !ValidEventTime(ev.OccurredAt) {
		return invalidInput("occurred_at must be a time of the years 1 to 9999 (UTC), got year %d", ev.OccurredAt.UTC().Year())
	}
	if len(ev.Payload) > MaxEventPayload {
		return ErrEventPayloadTooLarge
	}
	if len(ev.Payload) == 0 {
		ev.Payload = json.RawMessage("null")
	}
	if !json.Valid(ev.Payload) {
		return invalidInput("payload is not valid JSON")
	}
	return nil
}

// ValidEventTime reports whether t can be an event's OccurredAt: a time
// of the years 1 to 9999 in UTC, which every store keeps and JSON
// encodes (RFC 3339 has four-digit years).
func ValidEventTime(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 1 && y <= 9999
}

// payloadDigests are the digests an event's payload is compared by.
type payloadDigests struct {
	// stored is what a new event records as its payload_sha256: the hex
	// SHA-256 of the payload's canonical JSON (canonicalJSON, as
	// fingerprints have it: member order, whitespace, escapes and a
	// number's spelling do not count, a number's exact value does), or of
	// its raw bytes when it has none (RFC 8785 refuses it: two members of
	// one name, an escaped lone surrogate, a number beyond a double's
	// range).
	stored string
	// raw is the hex SHA-256 of the payload's bytes: what an event
	// recorded before digests were canonical holds.
	raw string
}

func payloadDigest(p []byte) string {
	sum := sha256.Sum256(p)
	return hex.EncodeToString(sum[:])
}

// digestsOf returns the digests of the valid JSON payload p.
func digestsOf(p []byte) payloadDigests {
	d := payloadDigests{raw: payloadDigest(p)}
	d.stored = d.raw
	if canon, err := canonicalJSON(p); err == nil {
		d.stored = payloadDigest(canon)
	}
	return d
}

// against is the digest a repeat's delivery records, given its event's:
// the event's own when the payload matches it, by its canonical digest or
// (an event recorded before digests were canonical) by its raw one, so
// that a delivery's payload differs exactly when its digest is not its
// event's. Either match is the same content: a raw digest equal to a
// canonical one is of canonical bytes.
func (d payloadDigests) against(eventDigest string) string {
	if d.raw == eventDigest {
		return eventDigest
	}
	return d.stored
}

// ActorEvent prefixes the timeline actor of changes an event made:
// "event:<source>:<event_id>".
const ActorEvent = "event"

// ReceiveEvent records one arrival of an event and, on its first arrival,
// what the rules make of it, all in one transaction:
//
//   - A new (source, event_id) is recorded with its delivery, and the
//     matching rule's intents are recorded as operations (or matched to
//     operations already recorded with the same content).
//   - A repeat (same event id, any delivery id) records only the delivery
//     and returns the operations the first arrival produced; it creates
//     nothing, even when two deliveries arrive at once.
//   - An event older than one already applied to the same object (the
//     rule's object and order_by) is recorded with status out_of_order and
//     not applied.
//   - A newer version of an object whose operation has the same key but
//     other content is a correction: an operation not yet dispatched is
//     revised (and awaits approval again); one that may have reached its
//     destination gets an update operation under the rule's update_key,
//     which requires approval. Without update_key, or without an object
//     order, the event is recorded with status conflict for a person.
//     The update operation the object's previous event recorded is
//     withdrawn (failed, cancelled) if it was not sent yet: approved
//     after the newer one, it would send older content.
//
// rules may be nil: every event is then recorded as unmapped. A rule that
// cannot map the event (a missing field, a produced key that is invalid,
// an ordering value or a payload the ledger cannot store) refuses it with
// a *RuleError (ErrInvalidInput) and records nothing. A payload larger
// than MaxEventPayload is refused with ErrEventPayloadTooLarge.
func (l *Ledger) ReceiveEvent(ctx context.Context, rules *Rules, ev Event) (*EventResult, error) {
	if err := ev.validate(); err != nil {
		return nil, err
	}
	digest := digestsOf(ev.Payload)
	// Map outside the transaction: it depends on the event and the rules
	// only. It is used only if the event turns out to be new.
	mapping, mapErr := rules.mapEvent(&ev)
	if mapErr == nil {
		mapErr = l.servesMapping(mapping)
	}
	for range maxConflictRetries {
		var res *EventResult
		err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			res, err = l.receiveIn(ctx, tx, &ev, digest, mapping, mapErr)
			return err
		})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if res.Duplicate {
			// A repeat's answer is read once its delivery is stored, in
			// a read that locks nothing: inside the write it locked the
			// event's operations, step operations among them without
			// their workflow, and closed a circle with a workflow
			// transaction holding one of them (docs/scaling.md, "One
			// lock order").
			err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
				var err error
				res.Operations, err = l.operationsIn(ctx, r, res.Event.OperationKeys)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("receive event %s: its repeat is recorded; reading its operations: %w", ev.EventID, err)
			}
		}
		return res, nil
	}
	return nil, fmt.Errorf("receive event %s: gave up after %d write conflicts: %w", ev.EventID, maxConflictRetries, store.ErrConflict)
}

// servesMapping refuses, as a rule that cannot map the event, a mapping
// with an operation for a destination that does not serve the tenant
// (Options.DestinationTenants): the rules and the destinations disagree,
// and the event is refused whole rather than recorded with operations
// that could never be sent.
func (l *Ledger) servesMapping(m *Mapping) error {
	if m == nil {
		return nil
	}
	for i, in := range m.Intents {
		err := l.served.check(l.tenant, in.Destination)
		if err == nil && m.Updates != nil && m.Updates[i] != nil {
			err = l.served.check(l.tenant, m.Updates[i].Destination)
		}
		if err != nil {
			return &RuleError{Rule: m.Rule, Field: fmt.Sprintf("operations[%d].destination", i), Err: err}
		}
	}
	return nil
}

// receiveIn is one try of ReceiveEvent inside a write transaction.
func (l *Ledger) receiveIn(ctx context.Context, tx store.Tx, ev *Event, digest payloadDigests, mapping *Mapping, mapErr error) (*EventResult, error) {
	existing, err := tx.GetEvent(ctx, l.tenant, ev.Source, ev.EventID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	now, err := l.now(ctx, tx)
	if err != nil {
		return nil, err
	}
	d := &store.Delivery{Tenant: l.tenant, Source: ev.Source, EventID: ev.EventID, DeliveryID: ev.DeliveryID,
		ReceivedAt: now, PayloadSHA256: digest.stored}
	if existing != nil {
		d.Duplicate = true
		d.PayloadSHA256 = digest.against(existing.PayloadSHA256)
		if err := tx.InsertDelivery(ctx, d); err != nil {
			return nil, err
		}
		// Its operations are read after the commit (ReceiveEvent).
		rec := toEventRecord(existing)
		return &EventResult{Duplicate: true, OutOfOrder: rec.OutOfOrder, Status: rec.Status, Reason: rec.Reason,
			Event: rec, Delivery: toDelivery(d, existing.PayloadSHA256)}, nil
	}
	if mapErr != nil {
		return nil, mapErr
	}
	row := &store.Event{Tenant: l.tenant, Source: ev.Source, EventID: ev.EventID, Type: ev.Type,
		OccurredAt: ev.OccurredAt.UTC().Truncate(time.Microsecond), PayloadSHA256: digest.stored, Rule: mapping.Rule,
		ObjectKey: mapping.ObjectKey, OrderValue: mapping.OrderValue, Operations: []string{}, ReceivedAt: now}
	// The event row goes in first, before the plan locks anything: of
	// two deliveries racing, the second stops here on the unique key,
	// holding no lock, rolls back and is retried as a duplicate. (Planned
	// first, a delivery could hold a workflow while it waited for the
	// other's event row, which waited for a step key whose holder waited
	// for that workflow: a deadlock on PostgreSQL.) Its outcome is written
	// once planned.
	if err := tx.InsertEvent(ctx, row); err != nil {
		return nil, err
	}
	plan, err := l.planEvent(ctx, tx, row, mapping)
	if err != nil {
		return nil, err
	}
	if err := tx.UpdateEvent(ctx, row); err != nil {
		return nil, err
	}
	if err := tx.InsertDelivery(ctx, d); err != nil {
		return nil, err
	}
	ops, err := l.applyPlan(ctx, tx, row, plan)
	if err != nil {
		return nil, err
	}
	rec := toEventRecord(row)
	return &EventResult{OutOfOrder: rec.OutOfOrder, Status: rec.Status, Reason: rec.Reason,
		Event: rec, Delivery: toDelivery(d, digest.stored), Operations: ops}, nil
}

// eventStep is what applying an event does to one operation.
type eventStep struct {
	kind   string // "record", "same", "revise", "update"
	intent Intent // the intent to record (kind record or update), or that matched (same)
	fp     string
	key    string // the operation the step concerns
	// version is the new version of a revise.
	version int64
	// noRow: the plan found no operation at key (nothing, or a
	// tombstone), so the transaction does not hold its row.
	noRow bool
}

// eventPlan is the decided effect of a new event.
type eventPlan struct {
	steps  []eventStep
	object *store.EventObject // nil when the rule declares no object
	objNew bool
	objRev int64
	// holdsKeys: the plan read several keys' operations
	// (lockEventKeys), and on PostgreSQL the transaction holds those it
	// found.
	holdsKeys bool
	// workflows are the workflows the plan read and found: on PostgreSQL
	// the transaction holds them. Recording a step-shaped key w/x whose
	// workflow w is not among them checks that w is still not stored
	// (workflowUnlocked) rather than lock it out of order.
	workflows map[string]bool
}

// planEvent decides what a new event does, reading the ledger inside the
// transaction but writing nothing, and sets the event row's status,
// reason and operation keys. Writing only after every intent has been
// decided makes an event all-or-nothing: a conflict on one intent applies
// none.
func (l *Ledger) planEvent(ctx context.Context, tx store.Tx, row *store.Event, m *Mapping) (*eventPlan, error) {
	plan := &eventPlan{workflows: map[string]bool{}}
	if m.Rule == "" {
		row.Status, row.Reason = string(EventUnmapped), "no rule maps events of this source and type"
		return plan, nil
	}
	var obj *store.EventObject
	newer := false
	if m.ObjectKey != "" {
		o, err := tx.GetEventObject(ctx, l.tenant, row.Source, m.ObjectKey)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			obj = o
		}
		if obj != nil {
			// A value of another kind is refused, not compared as text:
			// nothing it could be compared with tells older from newer.
			if err := sameOrderKind(m, obj.OrderValue); err != nil {
				return nil, err
			}
			switch c := compareOrder(m.OrderValue, obj.OrderValue); {
			case c < 0:
				row.Status = string(EventOutOfOrder)
				row.Reason = fmt.Sprintf("older than event %s already applied to %s (order %s < %s); not applied",
					obj.EventID, m.ObjectKey, m.OrderValue, obj.OrderValue)
				return plan, nil
			case c > 0:
				newer = true
			}
		}
	}
	conflict := func(reason string) (*eventPlan, error) {
		row.Status, row.Reason = string(EventConflict), reason
		row.Operations = []string{}
		return &eventPlan{}, nil
	}
	// readKey reads what is stored at key, and the stored workflow
	// whose step key is, if any: that workflow first, as every workflow
	// transaction locks a workflow before its steps (on PostgreSQL, an
	// event that locked a step's operation and then waited for its
	// workflow deadlocked with one). stepConflict refuses to write key
	// when it is such a step: only the workflow records and revises its
	// steps.
	//
	// When lockEventKeys has read the keys (held is not nil), the event
	// may hold operations already: a workflow or an operation it found
	// missing is then only checked with a plain read, and one stored
	// since makes the plan outdated, to be made again from the top
	// (where lockEventKeys locks it in order), instead of being locked
	// here, out of order.
	type stepOf struct {
		workflow *store.Workflow
		step     string
	}
	var held *heldKeys
	readKey := func(key string) (*storedContent, stepOf, error) {
		var s stepOf
		if wk, step, ok := SplitWorkflowStepKey(key); ok {
			w, err := held.workflow(ctx, tx, l.tenant, wk)
			if err != nil {
				return nil, stepOf{}, err
			}
			if w != nil {
				plan.workflows[wk] = true
				if s.workflow, s.step, err = stepIn(w, step); err != nil {
					return nil, stepOf{}, err
				}
			}
		}
		if held != nil {
			if row := held.operations[key]; row != nil {
				return contentOf(row), s, nil
			}
			recorded, err := tx.OperationExists(ctx, l.tenant, key)
			if err != nil {
				return nil, stepOf{}, err
			}
			if recorded {
				return nil, stepOf{}, errPlanOutdated // recorded since lockEventKeys read none
			}
			current, err := l.tombstoneAt(ctx, tx, key)
			return current, s, err
		}
		current, err := l.contentAt(ctx, tx, key)
		return current, s, err
	}
	stepConflict := func(key string, s stepOf) (*eventPlan, error) {
		if s.workflow == nil {
			return nil, nil
		}
		return conflict(fmt.Sprintf("operation %s is step %s of workflow %s, which records and revises its steps itself (a rule may not); a person must decide", key, s.step, s.workflow.Key))
	}
	var err error
	var earlier []string
	if newer {
		if earlier, err = earlierUpdates(ctx, tx, l.tenant, row.Source, obj.EventID, m); err != nil {
			return nil, err
		}
	}
	if held, err = lockEventKeys(ctx, tx, l.tenant, m, earlier); err != nil {
		return nil, err
	}
	plan.holdsKeys = held != nil
	for i, in := range m.Intents {
		fp, err := in.normalize()
		if err != nil {
			return nil, &RuleError{Rule: m.Rule, Field: fmt.Sprintf("operations[%d]", i), Err: err}
		}
		current, step, err := readKey(in.Key)
		if err != nil {
			return nil, err
		}
		if current == nil || !current.sameContent(in) {
			if p, err := stepConflict(in.Key, step); p != nil || err != nil {
				return p, err
			}
		}
		switch {
		case current == nil:
			plan.steps = append(plan.steps, eventStep{kind: "record", intent: in, fp: fp, key: in.Key, noRow: true})
			row.Operations = append(row.Operations, in.Key)
			continue
		case current.sameContent(in):
			plan.steps = append(plan.steps, eventStep{kind: "same", intent: in, key: in.Key, noRow: current.tombstone})
			row.Operations = append(row.Operations, in.Key)
			continue
		case !newer && m.Updates[i] != nil:
			// The same version again under another event id: it matches
			// the update operation an earlier event already produced.
			up := *m.Updates[i]
			if _, err := up.normalize(); err != nil {
				return nil, &RuleError{Rule: m.Rule, Field: fmt.Sprintf("operations[%d].update_key", i), Err: err}
			}
			have, _, err := readKey(up.Key) // its workflow first, if a step's
			if err != nil {
				return nil, err
			}
			if obj != nil && have != nil && have.sameContent(up) {
				plan.steps = append(plan.steps, eventStep{kind: "same", intent: up, key: up.Key, noRow: have.tombstone})
				row.Operations = append(row.Operations, up.Key)
				continue
			}
			fallthrough
		case !newer:
			why := "the rule declares no object order"
			switch {
			case obj != nil:
				why = fmt.Sprintf("the event is not newer than event %s already applied to %s", obj.EventID, m.ObjectKey)
			case m.ObjectKey != "":
				// The object was read before the operation: an event that
				// wrote both may have committed in between. A plain read:
				// the event holds operations, and an event locks the
				// object before them (planned again, it does).
				if tracked, err := tx.EventObjectExists(ctx, l.tenant, row.Source, m.ObjectKey); err != nil {
					return nil, err
				} else if tracked {
					return nil, errPlanOutdated
				}
				why = "no earlier event for " + m.ObjectKey + " is recorded"
			}
			return conflict(fmt.Sprintf("operation %s is recorded with other content and %s; a person must decide", in.Key, why))
		case current.revisable():
			plan.steps = append(plan.steps, eventStep{kind: "revise", intent: in, key: in.Key, version: current.version + 1})
			row.Operations = append(row.Operations, in.Key)
			continue
		}
		// A correction of an operation that may have reached its
		// destination: a new, explicitly keyed operation needing approval.
		if m.Updates[i] == nil {
			return conflict(fmt.Sprintf("operation %s (%s) may already have reached its destination and rule %q declares no update_key; a person must decide",
				in.Key, current.state, m.Rule))
		}
		up := *m.Updates[i]
		upFP, err := up.normalize()
		if err != nil {
			return nil, &RuleError{Rule: m.Rule, Field: fmt.Sprintf("operations[%d].update_key", i), Err: err}
		}
		have, upStep, err := readKey(up.Key)
		if err != nil {
			return nil, err
		}
		if have == nil {
			if p, err := stepConflict(up.Key, upStep); p != nil || err != nil {
				return p, err
			}
		}
		switch {
		case have == nil:
			plan.steps = append(plan.steps, eventStep{kind: "update", intent: up, fp: upFP, key: up.Key, noRow: true})
		case have.sameContent(up):
			plan.steps = append(plan.steps, eventStep{kind: "same", intent: up, key: up.Key, noRow: have.tombstone})
		default:
			return conflict(fmt.Sprintf("update operation %s is recorded with other content; a person must decide", up.Key))
		}
		row.Operations = append(row.Operations, up.Key)
	}
	// A correction still waiting that the event applied last to the
	// object recorded is withdrawn: approved after this one, it would
	// send older content after newer.
	var withdrawn []string
	for i, k := range earlier {
		if k == "" || slices.Contains(row.Operations, k) || held == nil {
			continue
		}
		op := held.operations[k]
		if !waitingCorrection(op, m.Updates[i], row.Source+":"+obj.EventID) {
			continue
		}
		// Only an update operation: the earlier event noted it as its
		// correction when it recorded it (its own first operation at
		// that place, under a key template edited since, is not one).
		marked, err := correctionBy(ctx, tx, op, ActorEvent+":"+row.Source+":"+obj.EventID)
		if err != nil {
			return nil, err
		}
		if marked {
			plan.steps = append(plan.steps, eventStep{kind: "withdraw", key: k, intent: *m.Updates[i]})
			withdrawn = append(withdrawn, k)
		}
	}
	row.Status = string(EventApplied)
	if len(withdrawn) > 0 {
		row.Reason = fmt.Sprintf("withdrew the correction %s of event %s, not yet sent: approved after this event's, it would send older content",
			strings.Join(withdrawn, ", "), obj.EventID)
	}
	if m.ObjectKey != "" && (obj == nil || newer) {
		plan.object = &store.EventObject{Tenant: l.tenant, Source: row.Source, ObjectKey: m.ObjectKey,
			OrderValue: m.OrderValue, EventID: row.EventID}
		plan.objNew = obj == nil
		if obj != nil {
			plan.objRev = obj.Revision
		}
	}
	return plan, nil
}

// earlierUpdates returns, by intent of m, the key of the update
// operation that event eventID (the one applied last to the object)
// recorded for that intent, where it recorded one: the key in its place
// among the event's operations that is neither the intent's key nor the
// update key m gives it. Only an event mapped by the same rule into as
// many operations has such places; "" where there is none. A plain read:
// the event row is not locked.
func earlierUpdates(ctx context.Context, tx store.Tx, tenant, source, eventID string, m *Mapping) ([]string, error) {
	e, err := tx.GetEvent(ctx, tenant, source, eventID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // forgotten after its retention
	}
	if err != nil {
		return nil, err
	}
	if e.Rule != m.Rule || len(e.Operations) != len(m.Intents) || len(m.Updates) != len(m.Intents) {
		return nil, nil
	}
	out := make([]string, len(m.Intents))
	found := false
	for i, k := range e.Operations {
		up := m.Updates[i]
		if up == nil || k == m.Intents[i].Key || k == up.Key {
			continue
		}
		if _, _, stepShaped := SplitWorkflowStepKey(k); stepShaped {
			continue // only a workflow decides on its steps
		}
		out[i], found = k, true
	}
	if !found {
		return nil, nil
	}
	return out, nil
}

// waitingCorrection reports whether op is an update operation that event
// source (its "source:event_id") recorded as up's correction and that
// has not been sent: awaiting approval, or approved and pending with no
// call yet.
func waitingCorrection(op *store.Operation, up *Intent, source string) bool {
	if op == nil || up == nil || op.SourceEvent != source || op.Action != up.Action || op.Destination != up.Destination {
		return false
	}
	return contentOf(op).revisable() // what a revision may still change was never sent
}

// correctionBy reports whether op's timeline has the note actor (an
// event) wrote when it recorded op as the update operation of a
// correction.
func correctionBy(ctx context.Context, tx store.Tx, op *store.Operation, actor string) (bool, error) {
	tl, err := tx.ListTimeline(ctx, op.Tenant, op.Key)
	if err != nil {
		return false, err
	}
	for _, e := range tl {
		if e.Event == correctionNote && e.Actor == actor {
			return true, nil
		}
	}
	return false, nil
}

// correctionNote is the timeline event of the note on an update
// operation an event recorded.
const correctionNote = "correction"

// heldKeys are the workflows and operations lockEventKeys found (and on
// PostgreSQL, locked), by key, as it read them: nothing else can write
// them before the transaction ends, and the event writes only after it
// has planned.
type heldKeys struct {
	workflows  map[string]*store.Workflow
	operations map[string]*store.Operation
}

// workflow returns workflow key for planEvent: read with GetWorkflow
// when lockEventKeys did not run (h is nil), as lockEventKeys read it
// when it found it; otherwise it checks with a plain read, and a
// workflow stored since lockEventKeys read none is errPlanOutdated. nil
// when there is none.
func (h *heldKeys) workflow(ctx context.Context, tx store.Tx, tenant, key string) (*store.Workflow, error) {
	if h != nil {
		if w := h.workflows[key]; w != nil {
			return w, nil
		}
		stored, err := tx.WorkflowExists(ctx, tenant, key)
		if err != nil {
			return nil, err
		}
		if stored {
			return nil, errPlanOutdated
		}
		return nil, nil
	}
	w, err := tx.GetWorkflow(ctx, tenant, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return w, err
}

// lockEventKeys reads (on PostgreSQL, locks) what an event whose rule
// writes several keys may write, in the order of docs/scaling.md ("One
// lock order"): the stored workflows whose steps those keys may be, by
// workflow key, then the keys' operations, by key. planEvent then
// decides on them in the rule's order from the rows read here, without
// reading them again. Without it two
// events writing the same operations in opposite orders each held one
// and waited for the other, until PostgreSQL broke the deadlock. A key
// shaped like a step of no stored workflow has its key lock taken just
// before its row, as a new workflow put takes its step keys' locks. Keys
// with no operation yet take no row lock here; applyPlan writes them in
// key order. It returns what it found; nil when the rule writes one key
// only (nothing to order, nothing read).
func lockEventKeys(ctx context.Context, tx store.Tx, tenant string, m *Mapping, earlier []string) (*heldKeys, error) {
	keys := make([]string, 0, 3*len(m.Intents))
	for i, in := range m.Intents {
		keys = append(keys, in.Key)
		if i < len(m.Updates) && m.Updates[i] != nil {
			keys = append(keys, m.Updates[i].Key)
		}
	}
	for _, k := range earlier {
		if k != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) < 2 {
		return nil, nil // one key: no order to keep
	}
	var workflows []string
	for _, k := range keys {
		if w, _, ok := SplitWorkflowStepKey(k); ok {
			workflows = append(workflows, w)
		}
	}
	slices.Sort(workflows)
	h := &heldKeys{workflows: map[string]*store.Workflow{}, operations: map[string]*store.Operation{}}
	for _, w := range slices.Compact(workflows) {
		row, err := tx.GetWorkflow(ctx, tenant, w)
		switch {
		case err == nil:
			h.workflows[w] = row
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	for _, k := range keys {
		if w, _, ok := SplitWorkflowStepKey(k); ok && h.workflows[w] == nil {
			// The key lock that recording a step-shaped key of no
			// stored workflow takes (txn.refuseWorkflowStep), taken
			// here in key order, before the row's: taken at the write,
			// after the rows of keys that sort after it, it closed a
			// circle with a workflow put that holds its step keys'
			// locks and waits for one of those rows. (A key of a
			// workflow the event holds is locked at its write, as
			// before: the workflow comes first.)
			if err := tx.LockOperationKey(ctx, tenant, k); err != nil {
				return nil, err
			}
		}
		row, err := tx.GetOperation(ctx, tenant, k)
		switch {
		case err == nil:
			h.operations[k] = row
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	return h, nil
}

// errPlanOutdated: an operation, a workflow or the event's object is not
// as planEvent read it, or was read between the writes of one
// transaction. On PostgreSQL planEvent's reads lock only what exists
// when they read it: a concurrent transaction (another event for the
// same object, a claim, a workflow put, a record) can store what one of
// them found missing before a later read or the plan's writes. Where the
// event then holds operations already, it checks for such a row with a
// plain read (EventObjectExists, WorkflowExists, OperationExists) rather
// than lock it out of the order of docs/scaling.md ("One lock order"),
// and the event is planned again from the top, from what is there now.
var errPlanOutdated = fmt.Errorf("an operation, a workflow or the tracked object changed while the event was planned: %w", store.ErrConflict)

// applyPlan writes what planEvent decided and returns the operations (in
// the rule's order). It writes them in key order, as lockEventKeys reads
// them: the locks a write takes that the plan's reads could not (a new
// key's row, the key lock of a key that may be a workflow's step) are
// then taken in key order too, as two events recording the same new keys,
// or a new workflow put with the same step keys, take them. A key planned
// as new may sort before keys the event holds: a row stored there since
// the plan is not waited for (decideNewIn) but makes the plan outdated,
// and planned again the event locks it in order. The same holds for a key
// planned as the same content as its tombstone: the event holds no row
// there, and the operations it returns are those its steps decided, so
// that no row is locked after the plan's, out of key order.
func (l *Ledger) applyPlan(ctx context.Context, tx store.Tx, row *store.Event, plan *eventPlan) ([]*Operation, error) {
	actor := ActorEvent + ":" + row.Source + ":" + row.EventID
	steps := slices.SortedStableFunc(slices.Values(plan.steps), func(a, b eventStep) int { return strings.Compare(a.key, b.key) })
	decided := make(map[string]*Operation, len(steps))
	for _, st := range steps {
		var decide func(t *txn) error
		switch st.kind {
		case "record", "update":
			in, fp := st.intent, st.fp
			wk, _, stepShaped := SplitWorkflowStepKey(st.key)
			unlocked := stepShaped && !plan.workflows[wk]
			decide = func(t *txn) error {
				if t.op != nil {
					return errPlanOutdated // planned for a new key
				}
				t.workflowUnlocked = unlocked
				if err := t.record(&in, fp, actor); err != nil {
					if errors.Is(err, ErrInvalidState) {
						// A workflow with this step was stored after the
						// plan read none: planned again, the event is a
						// conflict.
						return errPlanOutdated
					}
					return err
				}
				if t.tombstone != nil {
					return errPlanOutdated
				}
				if st.kind == "update" {
					t.note(actor, "", correctionNote, "update of a newer version of "+row.ObjectKey+" (order "+row.OrderValue+"); requires approval")
				}
				return nil
			}
		case "revise":
			payload, version, fields := st.intent.Payload, st.version, st.intent.SensitiveFields
			decide = func(t *txn) error {
				if t.op == nil || t.op.Version != version-1 || !contentOf(t.op).revisable() {
					return errPlanOutdated // planned for a revisable operation at the version before
				}
				// The sensitive fields the rule now declares apply to the
				// new content, as they would to the same content.
				_, err := t.revise(Revision{Payload: payload, Version: version, Actor: actor, SensitiveFields: fields},
					"newer version of "+row.ObjectKey+" (order "+row.OrderValue+")")
				return err
			}
		case "withdraw":
			evidence := fmt.Sprintf("withdrawn: event %s applies a newer version of %s (order %s); approved after it, this would send older content",
				row.EventID, row.ObjectKey, row.OrderValue)
			decide = func(t *txn) error {
				if t.op == nil || !waitingCorrection(t.op, &st.intent, t.op.SourceEvent) {
					return errPlanOutdated // held since the plan: not expected
				}
				t.move(StateFailed, actor, "", withdrawnEvent, evidence)
				t.op.FailureKind = string(FailureCancelled)
				return nil
			}
		default: // same content: only sensitive fields the operation lacks, and an approval it lacks
			fields, approval, noRow := st.intent.SensitiveFields, st.intent.RequiresApproval, st.noRow
			decide = func(t *txn) error {
				if t.op == nil {
					return nil // a tombstone keeps no payload to mask
				}
				if noRow {
					// The tombstone the plan compared with was
					// forgotten and the key recorded again since.
					return errPlanOutdated
				}
				t.addSensitiveFields(fields, actor)
				t.repeatRequiresApproval(approval, "the rule that mapped event "+row.EventID+" requires approval", actor)
				return nil
			}
		}
		decideAt := l.decideIn
		if plan.holdsKeys && st.noRow {
			// Planned for a key with no operation (a new one, or a
			// tombstone's), while the event may hold keys after it: a
			// row stored here since is not waited for.
			decideAt = l.decideNewIn
		}
		op, refusal, err := decideAt(ctx, tx, l.tenant, st.key, decide)
		if err != nil {
			return nil, err
		}
		if refusal != nil {
			return nil, refusal
		}
		decided[st.key] = op
	}
	if o := plan.object; o != nil {
		o.UpdatedAt = row.ReceivedAt
		if plan.objNew {
			o.Revision = 1
			if err := tx.InsertEventObject(ctx, o); err != nil {
				return nil, err
			}
		} else {
			o.Revision = plan.objRev + 1
			if err := tx.UpdateEventObject(ctx, o, plan.objRev); err != nil {
				return nil, err
			}
		}
	}
	// The operations as decided, in the rule's order. A key decided
	// without a row is read as its tombstone, with a plain read: reading
	// its row again would lock a row stored there since, after the rows
	// the event holds (a deadlock with an event that holds that row and
	// waits for one of them).
	out := make([]*Operation, 0, len(row.Operations))
	for _, k := range row.Operations {
		if op := decided[k]; op != nil {
			out = append(out, op)
			continue
		}
		ts, err := l.tombstone(ctx, tx, k)
		if err != nil {
			return nil, err
		}
		if ts != nil { // else forgotten since the plan read it
			out = append(out, tombstoneOperation(ts))
		}
	}
	return out, nil
}

// withdrawnEvent is the timeline event of a correction an event withdrew.
const withdrawnEvent = "withdrawn"

// storedContent is the content of an operation (or its tombstone) as far
// as an event needs to compare it.
type storedContent struct {
	action, destination string
	version             int64
	fingerprint         string
	state               State
	neverDispatched     bool
	// tombstone: only the fingerprint, the state and (since migration
	// 018; 0 before) the version are left.
	tombstone bool
}

// contentAt reads the operation or tombstone at key; nil when neither
// exists.
func (l *Ledger) contentAt(ctx context.Context, tx store.Tx, key string) (*storedContent, error) {
	row, err := tx.GetOperation(ctx, l.tenant, key)
	if err == nil {
		return contentOf(row), nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	return l.tombstoneAt(ctx, tx, key)
}

// tombstoneAt reads the tombstone at key; nil when there is none.
func (l *Ledger) tombstoneAt(ctx context.Context, tx store.Tx, key string) (*storedContent, error) {
	ts, err := l.tombstone(ctx, tx, key)
	if ts == nil || err != nil {
		return nil, err
	}
	return &storedContent{fingerprint: ts.Fingerprint, state: State(ts.State), version: ts.Version, tombstone: true}, nil
}

// tombstone reads the tombstone at key; nil when there is none (never
// compacted, or forgotten after its retention).
func (l *Ledger) tombstone(ctx context.Context, r store.Reader, key string) (*store.Tombstone, error) {
	ts, err := r.GetTombstone(ctx, l.tenant, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return ts, err
}

// contentOf is the content of an operation row.
func contentOf(row *store.Operation) *storedContent {
	return &storedContent{action: row.Action, destination: row.Destination, version: row.Version,
		fingerprint: row.Fingerprint, state: State(row.State), neverDispatched: row.FirstDispatchedAt.IsZero()}
}

// sameContent reports whether in has the stored content, at whatever
// version the operation has reached (a revision raises the version).
func (c *storedContent) sameContent(in Intent) bool {
	if c.tombstone { // the fingerprint covers action and destination
		version := c.version
		if version <= 0 { // compacted before its version was kept
			version = in.Version
		}
		fp, err := Fingerprint(in.Action, in.Destination, in.Payload, version)
		return err == nil && fp == c.fingerprint
	}
	if in.Action != c.action || in.Destination != c.destination {
		return false
	}
	fp, err := Fingerprint(in.Action, in.Destination, in.Payload, c.version)
	return err == nil && fp == c.fingerprint
}

// revisable reports whether Revise may still change the content.
func (c *storedContent) revisable() bool {
	return !c.tombstone && c.neverDispatched && (c.state == StateAwaitingApproval || c.state == StatePending)
}

// revise is the revise transition of Ledger.Revise, usable inside a larger
// transaction: the content of an operation that is awaiting approval, or
// pending and never dispatched, is replaced by r's new, higher version,
// which must be approved. r's sensitive fields are added first, so that
// the text written with the revision is scrubbed of their values too.
func (t *txn) revise(r Revision, why string) (replayed bool, err error) {
	if err := t.need("revise"); err != nil {
		return false, err
	}
	t.addSensitiveFields(r.SensitiveFields, r.Actor)
	payload, version, actor := r.Payload, r.Version, r.Actor
	if !contentOf(t.op).revisable() {
		// Awaiting approval too: a retry of content never approved after
		// an attempt reported late that its call may have acted.
		return false, t.refuse("revise")
	}
	fp, err := Fingerprint(t.op.Action, t.op.Destination, payload, version)
	if err != nil {
		return false, err
	}
	if version <= t.op.Version {
		// The same revision again (its answer lost) is a replay: the
		// operation still has exactly that content, not yet dispatched,
		// and the revision that gave it was this actor's.
		if version == t.op.Version && fp == t.op.Fingerprint {
			stands, err := t.revisionStands(version, fp, actor)
			if err != nil || stands {
				return stands, err
			}
		}
		return false, invalidInput("revise needs a version above the current %d", t.op.Version)
	}
	if err := t.keepEarlierPayload(payload); err != nil {
		return false, err
	}
	t.op.Payload = bytes.Clone(payload) // the caller may reuse its buffer
	t.op.Version = version
	t.op.Fingerprint = fp
	t.op.RequiresApproval = true
	t.op.ApprovedBy = ""
	t.move(StateAwaitingApproval, actor, "", revisedEvent, join(revisionEvidence(version, fp), why))
	t.op.StateSince = t.now // the wait for an approval is the new version's
	return false, nil
}

// keepEarlierPayload keeps the payload a revision to next replaces, when
// a worker was given it: an attempt claimed for the current version (or
// before attempts had versions), given up before its dispatch mark, may
// still report on it, quoting values that are sensitive now or become
// so. Its values are then masked as the payload's are (EarlierPayloads).
// A payload no worker was given, or one kept already, is not kept: a
// stream of corrections to an operation awaiting approval keeps none.
func (t *txn) keepEarlierPayload(next json.RawMessage) error {
	if t.op.AttemptCount == 0 || bytes.Equal(t.op.Payload, next) {
		return nil
	}
	attempts, err := t.listAttempts()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(attempts, func(a *store.Attempt) bool { return a.Version == t.op.Version || a.Version == 0 }) {
		return nil
	}
	earlier, err := appendEarlierPayload(t.op.EarlierPayloads, t.op.Payload)
	if err != nil {
		return err
	}
	t.op.EarlierPayloads = earlier
	return nil
}

// revisionStands reports whether the operation is as actor's revision to
// version (fingerprint fp) left it: that revision is its last move, or
// the move before an approval of exactly that version and fingerprint.
// The approval does not make the reviser's retry an error: the revision
// it repeats is in force.
func (t *txn) revisionStands(version int64, fp, actor string) (bool, error) {
	tl, err := t.listTimeline()
	if err != nil {
		return false, err
	}
	approval := t.scrub(approvalEvidence(Approval{Version: version, Fingerprint: fp}))
	approved := false
	for i := len(tl) - 1; i >= 0; i-- {
		e := tl[i]
		switch {
		case e.ToState == "":
			continue // a note, not a move
		case !approved && e.Event == approvedEvent && e.Evidence == approval:
			approved = true
		default:
			// As stored: scrubbed of the operation's sensitive values.
			return e.Event == revisedEvent && e.Actor == actor &&
				strings.HasPrefix(e.Evidence, t.scrub(revisionEvidence(version, fp))), nil
		}
	}
	return false, nil
}

// revisedEvent is the timeline event of a revision.
const revisedEvent = "revised"

// revisionEvidence is what a revision's timeline entry says first: the
// version and fingerprint it made.
func revisionEvidence(version int64, fp string) string {
	return fmt.Sprintf("version %d, %s", version, fp)
}

// operationsIn reads operations (or their tombstones) by key and
// returns them in the order of keys. Its callers read in a View, which
// locks nothing.
func (l *Ledger) operationsIn(ctx context.Context, r store.Reader, keys []string) ([]*Operation, error) {
	byKey := make(map[string]*Operation, len(keys))
	for _, k := range slices.Compact(slices.Sorted(slices.Values(keys))) {
		row, err := r.GetOperation(ctx, l.tenant, k)
		if err == nil {
			byKey[k] = toOperation(row)
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		ts, err := l.tombstone(ctx, r, k)
		if err != nil {
			return nil, err
		}
		if ts != nil { // else forgotten after its tombstone retention
			byKey[k] = tombstoneOperation(ts)
		}
	}
	out := []*Operation{}
	for _, k := range keys {
		if op, ok := byKey[k]; ok {
			out = append(out, op)
		}
	}
	return out, nil
}

func toEventRecord(e *store.Event) *EventRecord {
	ops := e.Operations
	if ops == nil {
		ops = []string{}
	}
	return &EventRecord{Tenant: e.Tenant, Source: e.Source, EventID: e.EventID, Type: e.Type,
		OccurredAt: timePtr(e.OccurredAt), PayloadSHA256: e.PayloadSHA256, Rule: e.Rule,
		Status: EventStatus(e.Status), OutOfOrder: e.Status == string(EventOutOfOrder), Reason: e.Reason,
		ObjectKey: e.ObjectKey, OrderValue: e.OrderValue, OperationKeys: ops, ReceivedAt: e.ReceivedAt}
}

func toDelivery(d *store.Delivery, firstDigest string) *Delivery {
	return &Delivery{ID: d.ID, DeliveryID: d.DeliveryID, ReceivedAt: d.ReceivedAt, Duplicate: d.Duplicate,
		PayloadDiffers: d.PayloadSHA256 != firstDigest}
}

// EventDetail is an event with its deliveries and operations.
type EventDetail struct {
	// Event is the recorded event.
	Event *EventRecord `json:"event"`
	// Deliveries are its arrivals, oldest first.
	Deliveries []*Delivery `json:"deliveries"`
	// Operations are the operations it produced or matched, as they are
	// now.
	Operations []*Operation `json:"operations"`
}

// GetEvent returns a recorded event with every delivery and the operations
// it produced, as they are now. Unknown events return ErrNotFound.
func (l *Ledger) GetEvent(ctx context.Context, source, eventID string) (*EventDetail, error) {
	for _, name := range [...]struct{ what, v string }{{"source", source}, {"event_id", eventID}} {
		if name.v == "" {
			return nil, invalidInput("%s is empty", name.what)
		}
		if ke := (*KeyError)(nil); errors.As(ValidateKey(name.v), &ke) {
			return nil, invalidInput("%s is not in the key syntax: %s", name.what, ke.Reason)
		}
	}
	var out *EventDetail
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		e, err := r.GetEvent(ctx, l.tenant, source, eventID)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("get event %s/%s: %w", source, eventID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		ds, err := r.ListDeliveries(ctx, l.tenant, source, eventID)
		if err != nil {
			return err
		}
		ops, err := l.operationsIn(ctx, r, e.Operations)
		if err != nil {
			return err
		}
		out = &EventDetail{Event: toEventRecord(e), Deliveries: []*Delivery{}, Operations: ops}
		for _, d := range ds {
			out.Deliveries = append(out.Deliveries, toDelivery(d, e.PayloadSHA256))
		}
		return nil
	})
	return out, err
}

// EventListOptions filter a list of events.
type EventListOptions struct {
	// Source lists only the events of this sender; empty means any.
	Source string
	// Status lists only the events with this status; empty means any.
	Status EventStatus
	// Limit is the page size: 0 for 50, at most MaxListLimit; a negative
	// one is refused.
	Limit int
	// Cursor continues a previous page (EventPage.NextCursor).
	Cursor string
}

// EventPage is one page of events, newest first.
type EventPage struct {
	// Items are the page's events, newest first.
	Items []*EventRecord `json:"items"`
	// NextCursor fetches the next page; empty on the last page.
	NextCursor string `json:"next_cursor"`
}

// ListEvents returns recorded events newest first, filtered and paged.
func (l *Ledger) ListEvents(ctx context.Context, o EventListOptions) (*EventPage, error) {
	p := store.EventListParams{Tenant: l.tenant, Source: o.Source, Status: string(o.Status)}
	var err error
	if p.Limit, err = pageLimit(o.Limit, 50, MaxListLimit); err != nil {
		return nil, err
	}
	switch o.Status {
	case "", EventApplied, EventOutOfOrder, EventConflict, EventUnmapped:
	default:
		return nil, invalidInput("unknown event status %q (statuses: %s, %s, %s, %s)", o.Status, EventApplied, EventOutOfOrder, EventConflict, EventUnmapped)
	}
	if err := checkText("source", o.Source); err != nil {
		return nil, err
	}
	scope := eventListScope(p)
	if o.Cursor != "" {
		at, source, id, err := decodeEventCursor(o.Cursor, scope)
		if err != nil {
			return nil, err
		}
		p.AfterReceivedAt, p.AfterSource, p.AfterEventID = at, source, id
	}
	page := &EventPage{Items: []*EventRecord{}}
	p.Limit++
	err = l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		rows, err := r.ListEvents(ctx, p)
		if err != nil {
			return err
		}
		for i, row := range rows {
			if i == p.Limit-1 {
				last := rows[i-1]
				page.NextCursor = encodeEventCursor(last.ReceivedAt, last.Source, last.EventID, scope)
				break
			}
			page.Items = append(page.Items, toEventRecord(row))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// eventListScope names the list an event cursor belongs to: its filters,
// hashed, as listScope does for operations. A cursor of one list is
// refused by any other (another source or status), instead of continuing
// it from a place that list never had and skipping its rows.
func eventListScope(p store.EventListParams) string {
	h := sha256.Sum256([]byte("events\x00" + p.Source + "\x00" + p.Status))
	return hex.EncodeToString(h[:4])
}

func encodeEventCursor(at time.Time, source, id, scope string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(scope + "|" + strconv.FormatInt(at.UnixMicro(), 10) + "|" + source + "|" + id))
}

func decodeEventCursor(c, scope string) (time.Time, string, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		s, sameList := strings.CutPrefix(string(b), scope+"|")
		parts := strings.SplitN(s, "|", 3)
		if sameList && len(parts) == 3 && ValidateKey(parts[1]) == nil && ValidateKey(parts[2]) == nil {
			if v, perr := strconv.ParseInt(parts[0], 10, 64); perr == nil && v > 0 {
				return time.UnixMicro(v).UTC(), parts[1], parts[2], nil
			}
		}
	}
	return time.Time{}, "", "", invalidInput("cursor does not continue this list: it was issued for another source or status, or not by opledger (give the same filters, or start without a cursor)")
}

// EventStats are the event figures of DESIGN.md section 10.
type EventStats struct {
	// Events counts distinct events received, those retention has
	// forgotten (TombstoneRetention) included: it never goes down.
	Events int `json:"events"`
	// EventsByStatus counts Events by status (all statuses present).
	EventsByStatus map[EventStatus]int `json:"events_by_status"`
	// Kept counts the events still in the ledger, those ListEvents can
	// list: Events less those retention has forgotten.
	Kept int `json:"kept"`
	// KeptByStatus counts Kept by status (all statuses present).
	KeptByStatus map[EventStatus]int `json:"kept_by_status"`
	// Deliveries counts every arrival, the first ones included.
	Deliveries int `json:"deliveries"`
	// DuplicateDeliveries counts arrivals of an event already received.
	DuplicateDeliveries int `json:"duplicate_deliveries"`
}

// EventStats returns the tenant's event figures, or every tenant's
// together when allTenants is true. Concurrent calls share reads as
// Stats' do, and each still gets figures read after it was made.
func (l *Ledger) EventStats(ctx context.Context, allTenants bool) (*EventStats, error) {
	tenant := l.tenant
	if allTenants {
		tenant = ""
	}
	c, err := l.eventStatsReads.do(ctx, tenant, func(ctx context.Context) (c *store.EventCounts, err error) {
		err = l.store.ViewSnapshot(ctx, func(ctx context.Context, r store.Reader) error { // counts that add up, as in Stats
			c, err = r.EventCounts(ctx, tenant)
			return err
		})
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("event stats: %w", err)
	}
	out := &EventStats{EventsByStatus: map[EventStatus]int{}, KeptByStatus: map[EventStatus]int{},
		Deliveries: c.Deliveries, DuplicateDeliveries: c.DuplicateDeliveries}
	for _, s := range []EventStatus{EventApplied, EventOutOfOrder, EventConflict, EventUnmapped} {
		out.EventsByStatus[s] = c.ByStatus[string(s)]
		out.KeptByStatus[s] = c.KeptByStatus[string(s)]
	}
	for _, n := range c.ByStatus {
		out.Events += n
	}
	for _, n := range c.KeptByStatus {
		out.Kept += n
	}
	return out, nil
}

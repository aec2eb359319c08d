package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/opledger/opledger"
)

// WebhookOptions configure a WebhookSource.
type WebhookOptions struct {
	// Source names the sender in every event. Default "lab".
	Source string
	// Type of every event. Default "lab.event".
	Type string
	// Now stamps OccurredAt when an event is emitted. Default time.Now.
	Now func() time.Time
	// Rules map the events to operations in Ledger.ReceiveEvent; nil
	// records every event as unmapped.
	Rules *opledger.Rules
}

// WebhookSource is a simulated webhook sender. Emit creates an event and
// queues its first delivery; Duplicate queues one more delivery of it;
// Reorder swaps two queued deliveries. DeliverNext hands the first queued
// delivery to a ledger, Deliver delivers one event at once. Every arrival
// carries its own delivery id, so a ledger sees distinct deliveries of one
// event.
type WebhookSource struct {
	source, typ string
	now         func() time.Time
	rules       *opledger.Rules

	mu         sync.Mutex
	events     map[string]opledger.Event
	order      []string
	queue      []string // event ids, one per queued delivery
	deliveries int
}

// WebhookCounters count a source's events and deliveries.
type WebhookCounters struct {
	// Events emitted (distinct event ids).
	Events int `json:"events"`
	// Deliveries made to a ledger, first ones and repeats.
	Deliveries int `json:"deliveries"`
	// Queued deliveries not made yet.
	Queued int `json:"queued"`
}

// NewWebhookSource returns a source that has sent nothing.
func NewWebhookSource(o WebhookOptions) *WebhookSource {
	if o.Source == "" {
		o.Source = "lab"
	}
	if o.Type == "" {
		o.Type = "lab.event"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &WebhookSource{source: o.Source, typ: o.Type, now: o.Now, rules: o.Rules, events: map[string]opledger.Event{}}
}

// Emit creates the event eventID with payload and queues its first
// delivery. Emitting a known id again queues a delivery of the original
// event (a duplicate), whatever payload is given.
func (w *WebhookSource) Emit(eventID string, payload json.RawMessage) opledger.Event {
	return w.EmitType(eventID, w.typ, payload)
}

// EmitType is Emit with an event type other than the source's.
func (w *WebhookSource) EmitType(eventID, typ string, payload json.RawMessage) opledger.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev, ok := w.events[eventID]
	if !ok {
		ev = opledger.Event{Source: w.source, EventID: eventID, Type: typ, OccurredAt: w.now(), Payload: payload}
		w.events[eventID] = ev
		w.order = append(w.order, eventID)
	}
	w.queue = append(w.queue, eventID)
	return ev
}

// Duplicate queues one more delivery of an emitted event.
func (w *WebhookSource) Duplicate(eventID string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.events[eventID]; !ok {
		return fmt.Errorf("lab webhook: event %s was never emitted", eventID)
	}
	w.queue = append(w.queue, eventID)
	return nil
}

// Reorder swaps the queued deliveries at positions i and j (0 is next).
func (w *WebhookSource) Reorder(i, j int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i < 0 || j < 0 || i >= len(w.queue) || j >= len(w.queue) {
		return fmt.Errorf("lab webhook: reorder %d and %d of %d queued deliveries", i, j, len(w.queue))
	}
	w.queue[i], w.queue[j] = w.queue[j], w.queue[i]
	return nil
}

// Queued lists the event ids of the queued deliveries, next first.
func (w *WebhookSource) Queued() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.queue...)
}

// DeliverNext makes the first queued delivery to l. It returns nil, nil
// when nothing is queued.
func (w *WebhookSource) DeliverNext(ctx context.Context, l *opledger.Ledger) (*opledger.EventResult, error) {
	w.mu.Lock()
	if len(w.queue) == 0 {
		w.mu.Unlock()
		return nil, nil
	}
	id := w.queue[0]
	w.queue = w.queue[1:]
	ev := w.arrivalLocked(id)
	w.mu.Unlock()
	return l.ReceiveEvent(ctx, w.rules, ev)
}

// Deliver delivers the emitted event eventID to l at once, outside the
// queue.
func (w *WebhookSource) Deliver(ctx context.Context, l *opledger.Ledger, eventID string) (*opledger.EventResult, error) {
	w.mu.Lock()
	if _, ok := w.events[eventID]; !ok {
		w.mu.Unlock()
		return nil, fmt.Errorf("lab webhook: event %s was never emitted", eventID)
	}
	ev := w.arrivalLocked(eventID)
	w.mu.Unlock()
	return l.ReceiveEvent(ctx, w.rules, ev)
}

// arrivalLocked counts one delivery of id and returns it; the caller
// holds mu.
func (w *WebhookSource) arrivalLocked(id string) opledger.Event {
	w.deliveries++
	ev := w.events[id]
	ev.DeliveryID = fmt.Sprintf("%s-d%d", id, w.deliveries)
	return ev
}

// Counters returns the source's counters.
func (w *WebhookSource) Counters() WebhookCounters {
	w.mu.Lock()
	defer w.mu.Unlock()
	return WebhookCounters{Events: len(w.events), Deliveries: w.deliveries, Queued: len(w.queue)}
}

// Reset forgets every event and delivery.
func (w *WebhookSource) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = map[string]opledger.Event{}
	w.order = nil
	w.queue = nil
	w.deliveries = 0
}

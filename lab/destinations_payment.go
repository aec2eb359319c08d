package lab

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// PaymentOptions configure a Payment.
type PaymentOptions struct {
	// Name of the destination. Default "payment".
	Name string
	// Now is the destination's clock. Default time.Now.
	Now func() time.Time
	// Retention is how long an idempotency key is remembered after its
	// first use. Default 24 hours.
	Retention time.Duration
}

// IdempotencyHeader is the header that carries the Payment's idempotency
// key.
const IdempotencyHeader = "Idempotency-Key"

// Payment is a simulated destination with an idempotency key, in the way
// of Stripe: a charge made under a key is remembered for Retention from
// the key's first use. A repeat with the same key and the same parameters
// (payload) gets the original answer again (Idempotent-Replayed: true) and
// charges nothing; with other parameters it is refused with 422. Once the
// retention has passed the key is forgotten, and a repeat is a second
// charge. A call without a key always charges. A call that made no effect
// (a fault before the commit) leaves no key behind.
type Payment struct {
	base
	retention time.Duration
	keys      map[string]*paymentKey
}

// paymentKey is a remembered idempotency key.
type paymentKey struct {
	payload []byte
	answer  answer
	first   time.Time
}

// NewPayment returns a Payment that has charged nothing.
func NewPayment(o PaymentOptions) *Payment {
	if o.Retention <= 0 {
		o.Retention = 24 * time.Hour
	}
	return &Payment{base: newBase(o.Name, "payment", o.Now), retention: o.Retention, keys: map[string]*paymentKey{}}
}

// Capabilities: the Idempotency-Key header, kept Retention.
func (p *Payment) Capabilities() destination.Capabilities {
	return destination.Capabilities{IdempotencyKey: &destination.IdempotencyKey{Header: IdempotencyHeader, Retention: p.retention}}
}

// Call charges in process, with the injected fault if any.
func (p *Payment) Call(_ context.Context, call opledger.Call) (opledger.Result, error) {
	r, err := callRequest(call)
	return p.result(p.do(r, err, p.charge), destination.HTTPPolicy{})
}

// charge serves one charge; the caller holds mu.
func (p *Payment) charge(r request) answer {
	return p.serve(func() answer {
		now := p.now()
		if r.idemKey != "" {
			if k, ok := p.keys[r.idemKey]; ok {
				if !now.Before(k.first.Add(p.retention)) {
					delete(p.keys, r.idemKey) // forgotten: this is a new charge
				} else if !bytes.Equal(k.payload, r.payload) {
					return errorAnswer(http.StatusUnprocessableEntity,
						"idempotency key reused with other parameters")
				} else {
					a := k.answer
					a.replayed = true
					return a
				}
			}
		}
		ref := p.nextRef()
		p.effect(r.key, ref)
		a := jsonAnswer(http.StatusCreated, map[string]any{"id": ref, "key": r.key, "payload": r.payload})
		if r.idemKey != "" {
			p.keys[r.idemKey] = &paymentKey{payload: r.payload, answer: a, first: now}
		}
		return a
	})
}

// Reset forgets every charge, key, fault and counter.
func (p *Payment) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked()
	p.keys = map[string]*paymentKey{}
}

// Handler serves the Payment over HTTP: POST /records charges, reading
// the Idempotency-Key header.
func (p *Payment) Handler() http.Handler { return p.mux(p.charge) }

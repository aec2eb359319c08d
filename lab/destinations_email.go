package lab

import (
	"context"
	"net/http"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// EmailOptions configure an Email.
type EmailOptions struct {
	// Name of the destination. Default "email".
	Name string
	// Now is the destination's clock. Default time.Now.
	Now func() time.Time
}

// Email is a simulated destination that guarantees nothing: no lookup, no
// idempotency key. Every accepted call sends a message (an effect), so a
// resend after an uncertain outcome is a second message.
type Email struct {
	base
}

// NewEmail returns an Email that has sent nothing.
func NewEmail(o EmailOptions) *Email {
	return &Email{base: newBase(o.Name, "email", o.Now)}
}

// Capabilities declares nothing: every uncertain outcome is for a person.
func (e *Email) Capabilities() destination.Capabilities { return destination.Capabilities{} }

// Call sends the message in process, with the injected fault if any.
func (e *Email) Call(_ context.Context, call opledger.Call) (opledger.Result, error) {
	r, err := callRequest(call)
	return e.result(e.do(r, err, e.send), destination.HTTPPolicy{})
}

// send serves one message; the caller holds mu.
func (e *Email) send(r request) answer {
	return e.serve(func() answer {
		ref := e.nextRef()
		e.effect(r.key, ref)
		return jsonAnswer(http.StatusCreated, map[string]string{"id": ref, "key": r.key})
	})
}

// Reset forgets every message, fault and counter.
func (e *Email) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resetLocked()
}

// Handler serves the Email over HTTP: POST /records sends.
func (e *Email) Handler() http.Handler { return e.mux(e.send) }

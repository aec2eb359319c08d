package lab_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/lab"
)

// clock is a simulated clock for the destinations.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// simulated is what the three destinations have in common.
type simulated interface {
	destination.Destination
	Inject(...lab.Fault) error
	Counters() lab.Counters
	EffectsFor(key string) int
	Reset()
	Handler() http.Handler
}

func operation(dest, key, payload string) *opledger.Operation {
	return &opledger.Operation{Tenant: "default", Key: key, Action: dest + ".create", Destination: dest,
		Version: 1, Payload: json.RawMessage(payload)}
}

func call(op *opledger.Operation) opledger.Call {
	return opledger.Call{Operation: op, AttemptID: "A1", IdempotencyKey: op.IdempotencyKey()}
}

// httpConfig is the destination.HTTP configuration of a lab destination
// served at url.
func httpConfig(name, url string, caps destination.Capabilities) destination.HTTPConfig {
	c := destination.HTTPConfig{
		Name: name, URL: url + "/records", Ref: "/id",
		Body: `{"key": {{json .Key}}, "payload": {{json .Payload}}}`,
	}
	if k := caps.IdempotencyKey; k != nil {
		c.Idempotency = &destination.IdempotencyConfig{Header: k.Header, Retention: destination.Duration(k.Retention)}
	}
	if u := caps.UniqueReference; u != nil {
		c.UniqueReference = &destination.UniqueReferenceConfig{ConflictStatus: u.ConflictStatus}
	}
	if l := caps.Lookup; l != nil {
		results := "/items"
		c.Lookup = &destination.LookupConfig{
			URL: url + "/records?external_ref={{urlquery .Key}}", Results: &results,
			Authoritative: l.Authoritative, VisibilityDelay: new(destination.Duration(l.VisibilityDelay)),
			Match: []destination.MatchConfig{{Record: "/key", Value: "{{.Key}}"}, {Record: "/payload/amount", Payload: "/amount"}},
		}
	}
	return c
}

// serveHTTP serves d on 127.0.0.1 and returns a destination.HTTP for it.
func serveHTTP(t *testing.T, d simulated, now func() time.Time) *destination.HTTP {
	t.Helper()
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	h, err := destination.NewHTTP(httpConfig(d.Name(), srv.URL, d.Capabilities()), destination.LoadOptions{Now: now})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return h
}

// crmVia is crm as the ledger reaches it: crm itself when via is
// "in-process", its HTTP service through destination.HTTP when "http".
func crmVia(t *testing.T, via string, crm *lab.CRM, now func() time.Time) interface {
	destination.Destination
	destination.Lookuper
} {
	t.Helper()
	if via == "http" {
		return serveHTTP(t, crm, now)
	}
	return crm
}

type destCase struct {
	name string
	make func(now func() time.Time) simulated
}

var destCases = []destCase{
	{"crm", func(now func() time.Time) simulated { return lab.NewCRM(lab.CRMOptions{Now: now}) }},
	{"email", func(now func() time.Time) simulated { return lab.NewEmail(lab.EmailOptions{Now: now}) }},
	{"payment", func(now func() time.Time) simulated { return lab.NewPayment(lab.PaymentOptions{Now: now}) }},
}

// Every fault leads to the same outcome, the same effects and the same
// counters in process and over HTTP, at every destination.
func TestFaultsInProcessAndOverHTTP(t *testing.T) {
	t.Parallel()
	faults := []struct {
		fault   lab.Fault
		outcome opledger.Outcome
		effects int
		after   time.Duration // expected Retry-After
	}{
		{lab.FaultNone, opledger.OutcomeSucceeded, 1, 0},
		{lab.FaultLostResponse, opledger.OutcomeUncertain, 1, 0},
		{lab.FaultTimeoutBeforeCommit, opledger.OutcomeUncertain, 0, 0},
		{lab.Fault5xxBeforeCommit, opledger.OutcomeRetryable, 0, 0},
		{lab.Fault5xxAfterCommit, opledger.OutcomeUncertain, 1, 0},
		{lab.Fault429, opledger.OutcomeRetryable, 0, lab.RetryAfterSeconds * time.Second},
		{lab.FaultValidation, opledger.OutcomeRejected, 0, 0},
		{lab.FaultDelayedVisibility, opledger.OutcomeUncertain, 1, 0},
	}
	for _, dc := range destCases {
		for _, fc := range faults {
			for _, via := range []string{"in-process", "http"} {
				t.Run(dc.name+"/"+fc.fault.String()+"/"+via, func(t *testing.T) {
					t.Parallel()
					clk := newClock()
					d := dc.make(clk.Now)
					var caller destination.Destination = d
					if via == "http" {
						caller = serveHTTP(t, d, clk.Now)
					}
					op := operation(d.Name(), "k:1", `{"amount": 5}`)
					require.NoError(t, d.Inject(fc.fault))
					res, err := caller.Call(context.Background(), call(op))
					if fc.outcome == opledger.OutcomeSucceeded {
						require.NoError(t, err)
						require.NotEmpty(t, res.Ref)
					} else {
						require.Error(t, err)
						outcome, after := opledger.OutcomeOf(err)
						require.Equal(t, fc.outcome, outcome, "error: %v", err)
						require.Equal(t, fc.after, after)
					}
					require.Equal(t, lab.Counters{Attempts: 1, Effects: fc.effects}, d.Counters())
					require.Equal(t, fc.effects, d.EffectsFor("k:1"))
					require.Zero(t, d.EffectsFor("k:2"))

					// The fault was used up: the next call is served normally.
					_, err = caller.Call(context.Background(), call(operation(d.Name(), "k:2", `{"amount": 6}`)))
					require.NoError(t, err)
					require.Equal(t, 1, d.EffectsFor("k:2"))
					require.Equal(t, 2, d.Counters().Attempts)
				})
			}
		}
	}
}

// The faults are taken in the order injected, one per call.
func TestInjectQueuesFaults(t *testing.T) {
	t.Parallel()
	e := lab.NewEmail(lab.EmailOptions{})
	require.NoError(t, e.Inject(lab.Fault429, lab.FaultValidation))
	ctx := context.Background()
	var outcomes []opledger.Outcome
	for i := range 3 {
		_, err := e.Call(ctx, call(operation("email", "m:"+string(rune('a'+i)), `{}`)))
		o := opledger.OutcomeSucceeded
		if err != nil {
			o, _ = opledger.OutcomeOf(err)
		}
		outcomes = append(outcomes, o)
	}
	require.Equal(t, []opledger.Outcome{opledger.OutcomeRetryable, opledger.OutcomeRejected, opledger.OutcomeSucceeded}, outcomes)
	require.Equal(t, lab.Counters{Attempts: 3, Effects: 1}, e.Counters())
	e.Reset()
	require.Equal(t, lab.Counters{}, e.Counters())
	require.Zero(t, e.EffectsFor("m:c"))
}

// A lookup fault injected in Go at a destination that looks nothing up
// (the email, the payment) is refused, as POST /NAME/faults refuses it:
// nothing would ever take it. Inject then queues none of the faults it was
// given, the call faults beside it neither; the CRM takes it.
func TestInjectRefusesLookupFaultWithoutLookup(t *testing.T) {
	t.Parallel()
	for _, d := range []interface {
		Name() string
		Inject(...lab.Fault) error
		PendingFaults() int
	}{lab.NewEmail(lab.EmailOptions{}), lab.NewPayment(lab.PaymentOptions{})} {
		err := d.Inject(lab.FaultLostResponse, lab.FaultLookupError)
		require.EqualError(t, err, "fault lookup_error fails a lookup, and "+d.Name()+" offers none (only the crm looks records up)")
		require.Zero(t, d.PendingFaults(), "%s queued faults from a refused Inject", d.Name())
		require.NoError(t, d.Inject(lab.FaultLostResponse))
		require.Equal(t, 1, d.PendingFaults())
	}
	crm := lab.NewCRM(lab.CRMOptions{})
	require.NoError(t, crm.Inject(lab.FaultLostResponse, lab.FaultLookupError))
	require.Equal(t, 2, crm.PendingFaults())
}

// The CRM refuses a duplicate create as "exists", hides new records for
// the visibility delay, and tells a matching record from another one, in
// process and over HTTP.
func TestCRMUniqueReferenceAndLookup(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"in-process", "http"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := newClock()
			crm := lab.NewCRM(lab.CRMOptions{Now: clk.Now, VisibilityDelay: time.Minute})
			d := crmVia(t, via, crm, clk.Now)
			caps := crm.Capabilities()
			require.True(t, caps.Lookup.Authoritative)
			require.Equal(t, time.Minute, caps.Lookup.VisibilityDelay)
			require.Equal(t, http.StatusConflict, caps.UniqueReference.ConflictStatus)

			op := operation("crm", "lead:7", `{"amount": 5}`)
			require.NoError(t, crm.Inject(lab.FaultLostResponse))
			_, err := d.Call(ctx, call(op))
			require.Equal(t, opledger.OutcomeUncertain, outcomeOf(err))

			// Within the visibility delay the record is not found.
			found, err := d.Lookup(ctx, op, nil)
			require.NoError(t, err)
			require.False(t, found.Found)

			// A retry is refused as a duplicate: no second effect.
			_, err = d.Call(ctx, call(op))
			require.ErrorIs(t, err, destination.ErrExists)
			require.Equal(t, opledger.OutcomeUncertain, outcomeOf(err))
			require.Equal(t, 1, crm.EffectsFor("lead:7"))

			clk.Add(time.Minute)
			found, err = d.Lookup(ctx, op, nil)
			require.NoError(t, err)
			require.True(t, found.Found)
			require.True(t, found.Matches)
			require.Equal(t, "crm-1", found.Ref)

			// Other content under the same reference is found, not matched.
			other := operation("crm", "lead:7", `{"amount": 6}`)
			found, err = d.Lookup(ctx, other, nil)
			require.NoError(t, err)
			require.True(t, found.Found)
			require.False(t, found.Matches)

			require.Equal(t, lab.Counters{Attempts: 2, Effects: 1, Lookups: 3}, crm.Counters())
		})
	}
}

// FaultDelayedVisibility: the CRM's index lags longer than it declares, so
// its authoritative "not found" is wrong for a while; the unique reference
// still refuses the resend.
func TestCRMDelayedVisibility(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"in-process", "http"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := newClock()
			crm := lab.NewCRM(lab.CRMOptions{Now: clk.Now}) // declares no delay
			d := crmVia(t, via, crm, clk.Now)
			op := operation("crm", "lead:8", `{"amount": 5}`)
			require.NoError(t, crm.Inject(lab.FaultDelayedVisibility))
			_, err := d.Call(ctx, call(op))
			require.Equal(t, opledger.OutcomeUncertain, outcomeOf(err), "the answer is lost")
			require.Equal(t, 1, crm.EffectsFor("lead:8"), "the record was made")

			clk.Add(lab.LaggingVisibility - time.Second)
			found, err := d.Lookup(ctx, op, nil)
			require.NoError(t, err)
			require.False(t, found.Found, "the lagging index does not show it yet")
			_, err = d.Call(ctx, call(op))
			require.ErrorIs(t, err, destination.ErrExists, "the unique reference refuses the resend")
			require.Equal(t, 1, crm.EffectsFor("lead:8"))

			clk.Add(time.Second)
			found, err = d.Lookup(ctx, op, nil)
			require.NoError(t, err)
			require.True(t, found.Found)
			require.True(t, found.Matches)
		})
	}
}

// FaultLookupError is taken by the CRM's next lookup, not by its next
// call: a call queued after it gets the fault queued for it, and the
// lookup fails (the CRM answers 503) without telling found from not
// found, in process and over HTTP alike. The failed lookup is counted;
// the lookup after it is served normally.
func TestCRMLookupError(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"in-process", "http"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := newClock()
			crm := lab.NewCRM(lab.CRMOptions{Now: clk.Now})
			d := crmVia(t, via, crm, clk.Now)
			op := operation("crm", "lead:9", `{"amount": 5}`)
			require.NoError(t, crm.Inject(lab.FaultLookupError, lab.FaultLostResponse))
			_, err := d.Call(ctx, call(op))
			require.Equal(t, opledger.OutcomeUncertain, outcomeOf(err), "the call takes lost_response, not the lookup's fault")
			require.Equal(t, 1, crm.EffectsFor("lead:9"))
			require.Equal(t, 1, crm.PendingFaults(), "the lookup's fault waits for a lookup")

			found, err := d.Lookup(ctx, op, nil)
			require.ErrorContains(t, err, "503")
			require.False(t, found.Found)
			_, after := opledger.OutcomeOf(err)
			require.Zero(t, after, "no Retry-After: the reconciler's own backoff applies")
			require.Zero(t, crm.PendingFaults())

			found, err = d.Lookup(ctx, op, nil)
			require.NoError(t, err)
			require.True(t, found.Found)
			require.True(t, found.Matches)
			require.Equal(t, lab.Counters{Attempts: 1, Effects: 1, Lookups: 2}, crm.Counters())
		})
	}
}

// The payment replays a known key with the same parameters, refuses it with
// other ones, and forgets it after the retention: a resend is then a second
// charge.
func TestPaymentIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"in-process", "http"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := newClock()
			pay := lab.NewPayment(lab.PaymentOptions{Now: clk.Now, Retention: time.Hour})
			var d destination.Destination = pay
			if via == "http" {
				d = serveHTTP(t, pay, clk.Now)
			}
			require.Equal(t, &destination.IdempotencyKey{Header: "Idempotency-Key", Retention: time.Hour}, pay.Capabilities().IdempotencyKey)

			op := operation("payment", "charge:1", `{"amount": 5}`)
			require.NoError(t, pay.Inject(lab.FaultLostResponse))
			_, err := d.Call(ctx, call(op))
			require.Equal(t, opledger.OutcomeUncertain, outcomeOf(err))

			clk.Add(59 * time.Minute)
			res, err := d.Call(ctx, call(op))
			require.NoError(t, err)
			require.Equal(t, "payment-1", res.Ref, "the original charge is replayed")
			require.Equal(t, 1, pay.EffectsFor("charge:1"))

			changed := operation("payment", "charge:1", `{"amount": 7}`)
			_, err = d.Call(ctx, call(changed))
			require.Equal(t, opledger.OutcomeRejected, outcomeOf(err))
			require.Equal(t, 1, pay.EffectsFor("charge:1"))

			clk.Add(time.Minute)
			res, err = d.Call(ctx, call(op))
			require.NoError(t, err)
			require.Equal(t, "payment-2", res.Ref, "after the retention the key is forgotten")
			require.Equal(t, 2, pay.EffectsFor("charge:1"))
			require.Equal(t, []string{"payment-1", "payment-2"}, pay.RefsFor("charge:1"))

			// No key: every call charges.
			noKey := call(operation("payment", "charge:2", `{"amount": 1}`))
			noKey.IdempotencyKey = ""
			if via == "in-process" { // destination.HTTP always sends the key
				for range 2 {
					_, err = d.Call(ctx, noKey)
					require.NoError(t, err)
				}
				require.Equal(t, 2, pay.EffectsFor("charge:2"))
			}
		})
	}
}

// An email is sent again on every call: nothing protects it.
func TestEmailHasNoProtection(t *testing.T) {
	t.Parallel()
	e := lab.NewEmail(lab.EmailOptions{Name: "mail"})
	require.True(t, e.Capabilities().None())
	require.Equal(t, "mail", e.Name())
	op := operation("mail", "notify:1", `{"to": "x"}`)
	require.NoError(t, e.Inject(lab.FaultLostResponse))
	_, err := e.Call(context.Background(), call(op))
	require.Equal(t, opledger.OutcomeUncertain, outcomeOf(err))
	_, err = e.Call(context.Background(), call(op))
	require.NoError(t, err)
	require.Equal(t, 2, e.EffectsFor("notify:1"))
}

// A payload that is not JSON is refused before anything happens.
func TestInvalidPayloadRejected(t *testing.T) {
	t.Parallel()
	c := lab.NewCRM(lab.CRMOptions{})
	_, err := c.Call(context.Background(), call(operation("crm", "x:1", `{not json`)))
	require.Equal(t, opledger.OutcomeRejected, outcomeOf(err))
	require.Equal(t, lab.Counters{Attempts: 1}, c.Counters())
}

func outcomeOf(err error) opledger.Outcome {
	if err == nil {
		return opledger.OutcomeSucceeded
	}
	o, _ := opledger.OutcomeOf(err)
	return o
}

func TestParseFaultAndCrashPoint(t *testing.T) {
	t.Parallel()
	for _, f := range append([]lab.Fault{lab.FaultNone}, lab.Faults...) {
		got, err := lab.ParseFault(f.String())
		require.NoError(t, err)
		require.Equal(t, f, got)
	}
	_, err := lab.ParseFault("explode")
	require.ErrorContains(t, err, "unknown fault")
	for _, c := range append([]lab.CrashPoint{lab.CrashNone}, lab.CrashPoints...) {
		got, err := lab.ParseCrashPoint(c.String())
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	_, err = lab.ParseCrashPoint("during_lunch")
	require.Error(t, err)
	require.True(t, lab.FaultLostResponse.Commits())
	require.False(t, lab.FaultTimeoutBeforeCommit.Commits())
}

// Concurrent calls are safe and counted exactly.
func TestConcurrentCalls(t *testing.T) {
	t.Parallel()
	p := lab.NewPayment(lab.PaymentOptions{})
	op := operation("payment", "c:1", `{"amount": 1}`)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = p.Call(context.Background(), call(op))
		}()
	}
	wg.Wait()
	require.Equal(t, lab.Counters{Attempts: 20, Effects: 1}, p.Counters())
}

// A number a double cannot hold is stored, shown by the CRM's lookup and
// compared exactly as it was sent: the record of 9007199254740993 reads
// 9007199254740993 (not 9007199254740992), matches that intent, and does
// not match an intent for 9007199254740992; and the payment refuses its
// key reused for the neighbouring amount instead of replaying the charge.
func TestDestinationsKeepNumbersExact(t *testing.T) {
	t.Parallel()
	const sent, neighbour = `{"amount": 9007199254740993}`, `{"amount": 9007199254740992}`
	for _, via := range []string{"in-process", "http"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := newClock()
			crm := lab.NewCRM(lab.CRMOptions{Now: clk.Now})
			d := crmVia(t, via, crm, clk.Now)
			op := operation("crm", "lead:big", sent)
			require.NoError(t, crm.Inject(lab.FaultLostResponse))
			_, err := d.Call(ctx, call(op))
			require.Equal(t, opledger.OutcomeUncertain, outcomeOf(err))

			found, err := d.Lookup(ctx, op, nil)
			require.NoError(t, err)
			require.True(t, found.Found)
			require.True(t, found.Matches, "the record holds what was sent: %s", found.Evidence)
			found, err = d.Lookup(ctx, operation("crm", "lead:big", neighbour), nil)
			require.NoError(t, err)
			require.True(t, found.Found)
			require.False(t, found.Matches, "another amount is other content: %s", found.Evidence)

			pay := lab.NewPayment(lab.PaymentOptions{Now: clk.Now})
			var p destination.Destination = pay
			if via == "http" {
				p = serveHTTP(t, pay, clk.Now)
			}
			charge := operation("payment", "charge:big", sent)
			_, err = p.Call(ctx, call(charge))
			require.NoError(t, err)
			other := call(operation("payment", "charge:big", neighbour))
			other.IdempotencyKey = call(charge).IdempotencyKey
			_, err = p.Call(ctx, other)
			require.Equal(t, opledger.OutcomeRejected, outcomeOf(err), "the key reused with another amount: %v", err)
			require.Equal(t, 1, pay.Counters().Effects)
		})
	}

	// Over HTTP the record reads back with the number as sent.
	crm := lab.NewCRM(lab.CRMOptions{})
	srv := httptest.NewServer(crm.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/records", "application/json",
		strings.NewReader(`{"key": "lead:big", "payload": `+sent+`}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	resp, err = http.Get(srv.URL + "/records?external_ref=lead:big")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Contains(t, string(body), `"payload":{"amount":9007199254740993}`)
}

package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// Counters are what a simulated destination saw and did.
type Counters struct {
	// Attempts counts the calls received, whatever their fault or answer.
	Attempts int `json:"attempts"`
	// Effects counts the effects made: records created, emails sent,
	// charges made. A replayed or refused call makes none.
	Effects int `json:"effects"`
	// Lookups counts the lookups received, a failed one
	// (FaultLookupError) too.
	Lookups int `json:"lookups"`
}

// request is one create call as the model sees it, in process or over HTTP.
type request struct {
	key         string          // operation key, for EffectsFor
	externalRef string          // the CRM's unique reference; default key
	idemKey     string          // the Idempotency-Key header
	payload     json.RawMessage // canonical JSON
}

// answer is the model's answer to one call.
type answer struct {
	status     int
	body       []byte
	retryAfter string
	replayed   bool
	// noAnswer: the connection closes without an answer.
	noAnswer bool
}

// errNoAnswer is the transport error of a call whose answer never came.
var errNoAnswer = errors.New("connection closed without an answer")

// base is what every simulated destination shares: its name, clock, fault
// queue and counters, under one mutex.
type base struct {
	name string
	now  func() time.Time
	// looksUp: the destination offers a lookup, so lookup faults
	// (Fault.OnLookup) can be taken (the CRM).
	looksUp bool

	mu     sync.Mutex
	faults []Fault
	// lookupFaults are the faults queued for the next lookups
	// (Fault.OnLookup).
	lookupFaults []Fault
	// current is the fault of the call being served, for commit.
	current  Fault
	counters Counters
	effects  map[string]int
	refs     map[string][]string
	seq      int
}

func newBase(name, def string, now func() time.Time) base {
	if name == "" {
		name = def
	}
	if now == nil {
		now = time.Now
	}
	return base{name: name, now: now, effects: map[string]int{}, refs: map[string][]string{}}
}

// Name is the destination's name, what operations carry in
// Intent.Destination.
func (b *base) Name() string { return b.name }

// Inject queues faults: the next calls get them, one each, in order; later
// calls are served normally. A fault taken by a lookup (FaultLookupError)
// is queued for the next lookups instead, in the same way, and calls do
// not see it. A destination without lookups (the email, the payment)
// refuses a lookup fault, which nothing would ever take: Inject then
// returns an error naming it and queues none of faults. The served
// control API (POST /NAME/faults) answers that error as a 400.
func (b *base) Inject(faults ...Fault) error {
	if err := checkLookupFaults(b.name, b.looksUp, faults); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range faults {
		if f.OnLookup() {
			b.lookupFaults = append(b.lookupFaults, f)
		} else {
			b.faults = append(b.faults, f)
		}
	}
	return nil
}

// PendingFaults is how many injected faults no call or lookup has taken
// yet.
func (b *base) PendingFaults() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.faults) + len(b.lookupFaults)
}

// Counters returns the counters so far.
func (b *base) Counters() Counters {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counters
}

// EffectsFor is the number of effects made for one operation key.
func (b *base) EffectsFor(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.effects[key]
}

// RefsFor lists the references of the effects made for one operation key,
// in the order they were made.
func (b *base) RefsFor(key string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.refs[key]...)
}

// resetLocked clears the common state; the caller holds mu.
func (b *base) resetLocked() {
	b.faults = nil
	b.lookupFaults = nil
	b.counters = Counters{}
	b.effects = map[string]int{}
	b.refs = map[string][]string{}
	b.seq = 0
}

// nextRef numbers a new record; the caller holds mu.
func (b *base) nextRef() string {
	b.seq++
	return b.name + "-" + strconv.Itoa(b.seq)
}

// effect counts one effect for key, made under ref; the caller holds mu.
func (b *base) effect(key, ref string) {
	b.counters.Effects++
	b.effects[key]++
	b.refs[key] = append(b.refs[key], ref)
}

// do answers one create with serve under the lock; a request that could
// not be read is answered 400 (and counted as an attempt).
func (b *base) do(r request, readErr error, serve func(request) answer) answer {
	b.mu.Lock()
	defer b.mu.Unlock()
	if readErr != nil {
		b.counters.Attempts++
		return errorAnswer(http.StatusBadRequest, readErr.Error())
	}
	return serve(r)
}

// mux serves POST /records with serve.
func (b *base) mux(serve func(request) answer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /records", func(w http.ResponseWriter, req *http.Request) {
		r, err := readRequest(req)
		writeAnswer(w, b.do(r, err, serve))
	})
	return mux
}

// lookupFailed counts one lookup and takes the next lookup fault, if any:
// true when the lookup is to fail. The caller holds mu.
func (b *base) lookupFailed() bool {
	b.counters.Lookups++
	if len(b.lookupFaults) == 0 {
		return false
	}
	b.lookupFaults = b.lookupFaults[1:]
	return true
}

// serve counts the call, applies the next fault around commit, and returns
// the answer. commit makes the effect (or refuses it) and answers; it runs
// under mu. The caller holds mu.
func (b *base) serve(commit func() answer) answer {
	b.counters.Attempts++
	f := FaultNone
	if len(b.faults) > 0 {
		f = b.faults[0]
		b.faults = b.faults[1:]
	}
	switch f {
	case FaultTimeoutBeforeCommit:
		return answer{noAnswer: true}
	case Fault5xxBeforeCommit:
		return errorAnswer(http.StatusServiceUnavailable, "injected: unavailable, nothing was done")
	case Fault429:
		a := errorAnswer(http.StatusTooManyRequests, "injected: too many requests, nothing was done")
		a.retryAfter = strconv.Itoa(RetryAfterSeconds)
		return a
	case FaultValidation:
		return errorAnswer(http.StatusUnprocessableEntity, "injected: validation failed, nothing was done")
	}
	b.current = f
	a := commit()
	b.current = FaultNone
	switch f {
	case FaultLostResponse, FaultDelayedVisibility:
		return answer{noAnswer: true}
	case Fault5xxAfterCommit:
		return errorAnswer(http.StatusInternalServerError, "injected: internal error after the commit")
	}
	return a
}

func errorAnswer(status int, msg string) answer {
	body, _ := json.Marshal(map[string]string{"error": msg})
	return answer{status: status, body: body}
}

func jsonAnswer(status int, v any) answer {
	body, err := json.Marshal(v)
	if err != nil {
		return errorAnswer(http.StatusInternalServerError, "encode answer")
	}
	return answer{status: status, body: body}
}

// result turns an answer into what an in-process Call returns, classified
// exactly as destination.HTTP classifies the same answer over HTTP.
func (b *base) result(a answer, policy destination.HTTPPolicy) (opledger.Result, error) {
	if a.noAnswer {
		return opledger.Result{}, opledger.Uncertain(&destination.SendError{
			Method: http.MethodPost, Host: b.name, Written: true, Err: errNoAnswer})
	}
	if err := b.classify(a, http.MethodPost, policy); err != nil {
		return opledger.Result{Response: a.body}, err
	}
	var rec struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(a.body, &rec); err != nil || rec.ID == "" {
		return opledger.Result{Response: a.body}, opledger.Uncertain(errors.New(b.name + ": answer without a reference"))
	}
	return opledger.Result{Ref: rec.ID, Response: a.body}, nil
}

// classify classifies an answer to a method request as
// destination.ClassifyStatus classifies the same answer over HTTP: nil
// for a 2xx.
func (b *base) classify(a answer, method string, policy destination.HTTPPolicy) error {
	h := http.Header{}
	if a.retryAfter != "" {
		h.Set("Retry-After", a.retryAfter)
	}
	resp := &http.Response{StatusCode: a.status, Status: strconv.Itoa(a.status) + " " + http.StatusText(a.status),
		Header: h, Request: &http.Request{Method: method, URL: &url.URL{Host: b.name}}}
	if policy.Now == nil {
		policy.Now = b.now
	}
	return destination.ClassifyStatus(resp, policy)
}

// callRequest builds the model's request from an in-process call.
func callRequest(call opledger.Call) (request, error) {
	op := call.Operation
	if op == nil {
		return request{}, errors.New("call without an operation")
	}
	p, err := canonical(op.Payload)
	if err != nil {
		return request{}, err
	}
	r := request{key: op.Key, idemKey: call.IdempotencyKey, payload: p}
	r.externalRef = payloadRef(p)
	return r, nil
}

// payloadRef is the payload's "external_ref" string, if it has one.
func payloadRef(p json.RawMessage) string {
	var v struct {
		ExternalRef string `json:"external_ref"`
	}
	_ = json.Unmarshal(p, &v)
	return v.ExternalRef
}

// canonical re-encodes JSON with sorted object keys, so that equal content
// compares equal byte for byte. Every number keeps its text as sent
// (json.Number): one a double cannot hold (9007199254740993) is neither
// changed in the record nor taken for its neighbour. Empty input is null.
func canonical(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.Decode(new(any)) != io.EOF {
		return nil, errors.New("the payload is not JSON")
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Each simulated destination is a destination.Destination; the CRM also
// looks effects up.
var (
	_ destination.Destination = (*CRM)(nil)
	_ destination.Lookuper    = (*CRM)(nil)
	_ destination.Destination = (*Email)(nil)
	_ destination.Destination = (*Payment)(nil)
)

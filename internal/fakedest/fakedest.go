// Package fakedest is a simulated HTTP destination for tests: a small
// record store on 127.0.0.1 that counts requests and effects, and injects
// faults on demand (a response lost after the commit, 503, 429 with
// Retry-After, 422, records that stay invisible to lookups for a while,
// failing lookups).
//
// Its API:
//
//	POST /records                  create; body {"external_ref": ..., ...}
//	                               answer 201 {"id": "R1", "external_ref": ..., ...}
//	GET  /records?external_ref=X   search; answer {"items": [...]} (none for an empty X)
//	GET  /records/{id}             one record, or 404
//
// With Dedup set, a create carrying an Idempotency-Key seen before answers
// the original record again and creates nothing. With Unique set, a create
// whose external_ref already exists answers 409.
//
// Dropper is a rawer upstream: it answers the first request of each
// connection and drops the connection on the next, for tests of what a
// client does when a reused connection breaks after the request was
// written.
//
// Allowed imports: the standard library.
package fakedest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
)

// Fault is what happens to one create request.
type Fault int

// The faults.
const (
	// OK: the create is processed normally.
	OK Fault = iota
	// LoseResponse: the record is created (an effect), then the connection
	// is closed without an answer.
	LoseResponse
	// DropBeforeCommit: the connection is closed after the request was read,
	// before anything is created.
	DropBeforeCommit
	// Unavailable answers 503 without creating anything.
	Unavailable
	// TooMany answers 429 with the server's RetryAfter header value.
	TooMany
	// Invalid answers 422 without creating anything.
	Invalid
	// InternalAfterCommit creates the record, then answers 500.
	InternalAfterCommit
	// Hang creates the record, then holds the connection without an answer
	// until the caller goes away (a caller killed mid-call).
	Hang
	// Block creates the record, then holds the answer until Release (or
	// until the caller goes away): a request in flight for as long as a
	// test needs.
	Block
	// Unauthorized answers 401 without creating anything: the caller's
	// credential was not taken (an access token that expired).
	Unauthorized
)

// Record is a created record.
type Record struct {
	ID             string         `json:"id"`
	ExternalRef    string         `json:"external_ref,omitempty"`
	Fields         map[string]any `json:"-"`
	IdempotencyKey string         `json:"-"`
	hidden         bool
}

func (r *Record) encode() map[string]any {
	out := map[string]any{}
	for k, v := range r.Fields {
		out[k] = v
	}
	out["id"] = r.ID
	if r.ExternalRef != "" {
		out["external_ref"] = r.ExternalRef
	}
	return out
}

// Server is a running fake destination.
type Server struct {
	srv *httptest.Server

	mu sync.Mutex
	// Dedup: creates with a known Idempotency-Key replay the first answer.
	dedup bool
	// Unique: a second create with the same external_ref gets 409.
	unique bool
	// hideNew: records created from now on are invisible to lookups until Reveal.
	hideNew    bool
	retryAfter string
	faults     []Fault
	lookupFail int
	// lookupThrottle: the next lookups answer 429 with retryAfter.
	lookupThrottle int

	records []*Record
	byKey   map[string]*Record
	creates int
	lookups int
	keys    []string
	headers []http.Header
	seen    chan struct{}
	release chan struct{}
}

// Options configure a Server.
type Options struct {
	// Dedup honours the Idempotency-Key header.
	Dedup bool
	// Unique refuses a second record with the same external_ref (409).
	Unique bool
}

// New starts a fake destination on 127.0.0.1; it is closed when t ends.
func New(t interface{ Cleanup(func()) }, opts Options) *Server {
	s := &Server{dedup: opts.Dedup, unique: opts.Unique, byKey: map[string]*Record{}, retryAfter: "1",
		release: make(chan struct{}, 1024)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /records", s.create)
	mux.HandleFunc("GET /records", s.search)
	mux.HandleFunc("GET /records/{id}", s.get)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Fail queues faults for the next creates, in order.
func (s *Server) Fail(f ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f...)
}

// SetRetryAfter sets the Retry-After value TooMany answers with, and
// throttled lookups (ThrottleLookups).
func (s *Server) SetRetryAfter(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retryAfter = v
}

// HideNew makes records created from now on invisible to lookups until
// Reveal, like a search index that lags behind.
func (s *Server) HideNew() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hideNew = true
}

// Reveal makes every record visible and stops hiding new ones.
func (s *Server) Reveal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hideNew = false
	for _, r := range s.records {
		r.hidden = false
	}
}

// FailLookups makes the next n lookups answer 502.
func (s *Server) FailLookups(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookupFail = n
}

// ThrottleLookups makes the next n lookups answer 429 Too Many Requests
// with the server's Retry-After (SetRetryAfter), as a destination that
// rate-limits its searches does.
func (s *Server) ThrottleLookups(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookupThrottle = n
}

// Put stores a record directly, as if created by someone else.
func (s *Server) Put(externalRef string, fields map[string]any) *Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.add(externalRef, fields, "")
}

// Creates is how many create requests arrived.
func (s *Server) Creates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates
}

// Effects is how many records exist: the effects at the destination.
func (s *Server) Effects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Lookups is how many lookup requests arrived.
func (s *Server) Lookups() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookups
}

// Keys lists the Idempotency-Key header of every create, in order.
func (s *Server) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// CreateHeaders lists the request headers of every create, in order.
func (s *Server) CreateHeaders() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

// Release lets one create held by Block answer.
func (s *Server) Release() { s.release <- struct{}{} }

// Records returns copies of the records.
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, len(s.records))
	for i, r := range s.records {
		out[i] = *r
	}
	return out
}

// Arrivals returns a channel that receives once for each create request
// as it arrives, before it is processed. Call before the requests are made.
func (s *Server) Arrivals() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = make(chan struct{}, 1024)
	}
	return s.seen
}

func (s *Server) add(externalRef string, fields map[string]any, key string) *Record {
	r := &Record{ID: "R" + strconv.Itoa(len(s.records)+1), ExternalRef: externalRef, Fields: fields,
		IdempotencyKey: key, hidden: s.hideNew}
	s.records = append(s.records, r)
	if key != "" {
		s.byKey[key] = r
	}
	return r
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var fields map[string]any
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		http.Error(w, "body must be a JSON object", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")

	s.mu.Lock()
	s.creates++
	s.keys = append(s.keys, key)
	s.headers = append(s.headers, r.Header.Clone())
	if s.seen != nil {
		s.seen <- struct{}{}
	}
	fault := OK
	if len(s.faults) > 0 {
		fault, s.faults = s.faults[0], s.faults[1:]
	}
	retryAfter := s.retryAfter
	var rec *Record
	status := http.StatusCreated
	switch fault {
	case Unavailable, TooMany, Invalid, DropBeforeCommit, Unauthorized:
	default:
		ext, _ := fields["external_ref"].(string)
		delete(fields, "external_ref")
		switch {
		case s.dedup && key != "" && s.byKey[key] != nil:
			rec, status = s.byKey[key], http.StatusOK
		case s.unique && ext != "" && s.findLocked(ext, true) != nil:
			status = http.StatusConflict
		default:
			rec = s.add(ext, fields, key)
		}
	}
	var answer map[string]any
	if rec != nil {
		answer = rec.encode()
	}
	s.mu.Unlock()

	switch fault {
	case Hang:
		<-r.Context().Done()
	case Block:
		select {
		case <-s.release:
			writeJSON(w, status, answer)
		case <-r.Context().Done():
		}
	case LoseResponse, DropBeforeCommit:
		hijackClose(w)
	case Unavailable:
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	case TooMany:
		w.Header().Set("Retry-After", retryAfter)
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case Unauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "token expired"})
	case Invalid:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "validation failed", "field": "email"})
	case InternalAfterCommit:
		http.Error(w, "internal error", http.StatusInternalServerError)
	default:
		if status == http.StatusConflict {
			writeJSON(w, status, map[string]any{"error": "external_ref already exists"})
			return
		}
		writeJSON(w, status, answer)
	}
}

// hijackClose closes the connection without an answer: to the client, a
// reset or EOF after its request was written.
func hijackClose(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("fakedest: response writer cannot hijack")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(fmt.Sprintf("fakedest: hijack: %v", err))
	}
	_ = conn.Close()
}

// findLocked returns the record with externalRef; hidden ones only when
// includeHidden.
func (s *Server) findLocked(externalRef string, includeHidden bool) *Record {
	for _, r := range s.records {
		if r.ExternalRef == externalRef && (includeHidden || !r.hidden) {
			return r
		}
	}
	return nil
}

func (s *Server) lookupFault(w http.ResponseWriter) bool {
	s.lookups++
	if s.lookupFail > 0 {
		s.lookupFail--
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return true
	}
	if s.lookupThrottle > 0 {
		s.lookupThrottle--
		w.Header().Set("Retry-After", s.retryAfter)
		http.Error(w, "too many requests", http.StatusTooManyRequests)
		return true
	}
	return false
}

func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	ext := r.URL.Query().Get("external_ref")
	s.mu.Lock()
	if s.lookupFault(w) {
		s.mu.Unlock()
		return
	}
	items := []any{}
	for _, rec := range s.records {
		// An empty external_ref names no record: the records created
		// without one are not "the records whose reference is empty".
		if ext != "" && rec.ExternalRef == ext && !rec.hidden {
			items = append(items, rec.encode())
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	if s.lookupFault(w) {
		s.mu.Unlock()
		return
	}
	var answer map[string]any
	for _, rec := range s.records {
		if rec.ID == id && !rec.hidden {
			answer = rec.encode()
		}
	}
	s.mu.Unlock()
	if answer == nil {
		// As an API says it: a JSON error document (a text page would
		// be a gateway's, which proves no absence).
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "no such record"})
		return
	}
	writeJSON(w, http.StatusOK, answer)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Package httpapi serves the opledger HTTP API (DESIGN.md section 8) over a
// *opledger.Ledger: JSON in and out, RFC 9457 problem details for errors,
// bearer tokens that each belong to one tenant.
//
// Allowed imports: opledger, opledger/webhook, internal/opjson,
// internal/advance, internal/redact, the standard library, prometheus
// client.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opledger/opledger"
)

// Authenticator maps a bearer token to the token it is: its tenant, which
// scopes the request, and its ID and name, which the decisions the request
// takes record (opledger.Ledger.WithCredential). It returns an error
// matching opledger.ErrUnauthorized for unknown or revoked tokens.
// *opledger.Ledger is one.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (*opledger.TokenInfo, error)
}

// Options configure the API handler.
type Options struct {
	// Auth checks bearer tokens. Required.
	Auth Authenticator
	// MaxBodyBytes bounds request bodies; larger ones get 413. Default 1 MiB.
	MaxBodyBytes int64
	// MaxJSONDepth bounds JSON nesting; deeper bodies get 400. Default 32.
	MaxJSONDepth int
	// Logger receives one line per request. Default slog.Default().
	Logger *slog.Logger
	// Rules map events to operations; nil records events unmapped.
	Rules *opledger.Rules
	// Webhooks are the providers that post to /v1/webhooks/{source}.
	Webhooks map[string]WebhookSource
	// MetricsMaxAge is how long /metrics serves the ledger's figures it
	// read last before it reads them again. Reading them counts every
	// operation still in the ledger (docs/scaling.md), so scrapes within
	// MetricsMaxAge of a read, and scrapes that arrive while one runs,
	// share that read, however many scrapers there are. Zero means
	// DefaultMetricsMaxAge; a negative value reads on every scrape.
	MetricsMaxAge time.Duration
	// Destinations name the destinations this server's executor and
	// reconciler know (its destinations.yaml): /metrics has their attempt
	// series from 0 before their first attempt ends, so that the first
	// lease expiry of a new destination is an increase too; and an
	// operation recorded through PUT (an operation, or a workflow's steps)
	// for a destination not among them is logged at warning level, once
	// per destination name, since nothing here will send it.
	Destinations []string
	// AbandonedCalls, when set, counts the destination calls this
	// process's executor abandoned that are still running
	// (executor.Executor.AbandonedCalls): /metrics reports it as
	// opledger_executor_abandoned_calls.
	AbandonedCalls func() int
	// AbandonedLookups, when set, reports how many lookups this process's
	// reconciler abandoned are still running
	// (reconciler.Reconciler.AbandonedLookups): /metrics serves it as
	// opledger_reconciler_abandoned_lookups.
	AbandonedLookups func() int
}

// DefaultMetricsMaxAge is the default of Options.MetricsMaxAge.
const DefaultMetricsMaxAge = 10 * time.Second

type server struct {
	ledger  *opledger.Ledger
	opts    Options
	log     *slog.Logger
	metrics http.Handler
	// refusedEvents counts, in this process, the events a rule could not
	// map (422 mapping_failed): they are recorded nowhere else.
	refusedEvents *prometheus.CounterVec
	// refusedWebhooks counts, in this process, the webhook deliveries
	// refused before they became events (a bad signature): they too are
	// recorded nowhere else.
	refusedWebhooks *prometheus.CounterVec
	// refusedEventRequests counts, in this process, the requests to
	// POST /v1/events refused before they became events (a malformed
	// body), as refusedWebhooks counts a webhook's.
	refusedEventRequests *prometheus.CounterVec
	ready                readiness
	// unserved holds the destination names noteUnserved has warned of.
	unserved sync.Map
}

// noteUnserved warns, once per name, of a new operation recorded for a
// destination that this server's destinations file does not name (when it
// names some): no executor here sends it, and unless another process or a
// worker of its own serves that destination, it waits for ever (the
// exception queue and opledger_oldest_due_seconds show it).
func (s *server) noteUnserved(r *http.Request, destination string) {
	if len(s.opts.Destinations) == 0 || slices.Contains(s.opts.Destinations, destination) {
		return
	}
	if _, warned := s.unserved.LoadOrStore(destination, true); warned {
		return
	}
	s.log.WarnContext(r.Context(), "operation recorded for a destination this server does not send to: "+
		"unless another process or a worker of yours claims it, it waits for ever (a misspelt destination?)",
		"request_id", requestID(r.Context()), "destination", destination, "destinations", strings.Join(s.opts.Destinations, ","))
}

// New returns the API handler. Routes outside /v1/ are not served.
func New(l *opledger.Ledger, opts Options) (http.Handler, error) {
	if opts.Auth == nil {
		return nil, errors.New("httpapi: Options.Auth is required")
	}
	for name, src := range opts.Webhooks {
		if src.Verify == nil {
			return nil, fmt.Errorf("httpapi: webhook source %s has no Verify", name)
		}
		if _, err := l.WithTenant(src.Tenant); err != nil {
			return nil, fmt.Errorf("httpapi: webhook source %s: tenant: %w", name, err)
		}
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.MaxJSONDepth <= 0 {
		opts.MaxJSONDepth = 32
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MetricsMaxAge == 0 {
		opts.MetricsMaxAge = DefaultMetricsMaxAge
	}
	s := &server{ledger: l, opts: opts, log: opts.Logger, refusedEvents: newRefusedEvents(opts), refusedWebhooks: newRefusedWebhooks(opts),
		refusedEventRequests: newRefusedEventRequests()}
	own := []prometheus.Collector{s.refusedEvents, s.refusedWebhooks, s.refusedEventRequests}
	if n := opts.AbandonedCalls; n != nil {
		own = append(own, processGauge("opledger_executor_abandoned_calls",
			"Destination calls this process's executor abandoned that are still running: they ignored their context past the call limit and a short grace, and have not returned; each keeps its claim, its operation in_progress, until it does. Not back to 0: a destination whose calls never return.", n))
	}
	if n := opts.AbandonedLookups; n != nil {
		own = append(own, processGauge("opledger_reconciler_abandoned_lookups",
			"Lookups this process's reconciler abandoned, having waited their timeout and grace (a Go lookup that ignores its context), that are still running.", n))
	}
	s.metrics = metricsHandler(l, opts.Logger, opts.MetricsMaxAge, opts.Destinations, own...)
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		h := http.Handler(rt.handler)
		if rt.needs != public {
			// POST /v1/events counts its refusals, those before the body
			// is read too (opledger_event_requests_refused_total).
			var refused func(reason string)
			if rt.pattern == receiveEventPattern {
				refused = s.refuseEventRequest
			}
			h = s.authenticated(rt.handler, rt.needs, refused)
		}
		mux.Handle(rt.pattern, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { noRoute(mux, w, r) })
	return s.withRequestID(s.logged(mux)), nil
}

// noRoute answers a request no route took: 405 with Allow when the path
// has routes for other methods, 404 otherwise, both as problems. (With a
// catch-all pattern registered, ServeMux no longer tells the two apart.)
func noRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodPatch} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allowed = append(allowed, m)
			if m == http.MethodGet {
				allowed = append(allowed, http.MethodHead) // a GET route answers HEAD too
			}
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeProblem(w, r, http.StatusMethodNotAllowed, "method_not_allowed",
			r.Method+" is not allowed here; this route takes "+strings.Join(allowed, ", "), nil)
		return
	}
	detail := "no such route: " + r.Method + " " + shownPath(r)
	if shownPath(r) == "" {
		detail = "no such route for " + r.Method + " at this path (not repeated: a part of it is not in the key syntax)"
	}
	// A key, event id or step holding "/" written as is splits into
	// segments no route has.
	for _, prefix := range []string{"/v1/operations/", "/v1/workflows/", "/v1/events/"} {
		if strings.HasPrefix(r.URL.Path, prefix) {
			detail += `; a key or name holding "/" is written %2F in a path`
			break
		}
	}
	writeProblem(w, r, http.StatusNotFound, "not_found", detail, nil)
}

// route is one API route: its ServeMux pattern, its handler, and the
// token it needs.
type route struct {
	pattern string
	handler http.HandlerFunc
	needs   routeNeeds
}

// routeNeeds is what a route asks of the request's token.
type routeNeeds int

const (
	// withToken routes need a token of the tenant; one that writes (PUT,
	// POST) needs a token that may write (TokenInfo.CanWrite).
	withToken routeNeeds = iota
	// decision routes take an operator's decision (resolve, approve, a
	// workflow's cancel): they need a token that may decide
	// (TokenInfo.CanDecide).
	decision
	// public routes need no token.
	public
)

// Routes lists every route pattern the handler serves ("METHOD /path"),
// for the OpenAPI check and documentation.
func Routes() []string {
	var out []string
	for _, rt := range (&server{}).routes() {
		out = append(out, rt.pattern)
	}
	return out
}

// HeaderReplayed, "true" on an answer to POST …/resolve, …/approve or
// …/revise, says that the decision, approval or revision repeated the one
// that last moved the operation and recorded nothing
// (opledger.Ledger.Resolve, Approve, Revise and their workflow step
// forms): the operation is as that decision left it. On a claim's 200
// {replayed: true} it says the operation had succeeded: nothing to send.
// The proxy marks its saved answers with the same header.
const HeaderReplayed = "Idempotent-Replayed"

type ctxKey int

// ctxRequest holds the request's *requestState.
const ctxRequest ctxKey = 0

// requestState is what the middleware learns of a request, held in its
// context under ctxRequest, set by withRequestID: one value, so that the
// request is copied with a new context once, not at each step.
type requestState struct {
	id    string
	notes requestNotes
	// rec is the ResponseWriter logged gives the handlers.
	rec statusRecorder
	// token is the request's token, once authenticated.
	token *opledger.TokenInfo
}

// stateOf returns the request's state, or nil outside withRequestID.
func stateOf(ctx context.Context) *requestState {
	st, _ := ctx.Value(ctxRequest).(*requestState)
	return st
}

// requestNotes is what the handlers tell the request's log line (logged):
// the tenant of the request's token, once authenticated, and the type of
// the problem answered, if one was.
type requestNotes struct {
	tenant  string
	problem string
}

// notes returns the request's notes, or nil outside logged.
func notes(ctx context.Context) *requestNotes {
	if st := stateOf(ctx); st != nil {
		return &st.notes
	}
	return nil
}

func requestID(ctx context.Context) string {
	if st := stateOf(ctx); st != nil {
		return st.id
	}
	return ""
}

// withRequestID gives each request an id (the caller's X-Request-Id if it is
// sane) and echoes it in the response.
func (s *server) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" || len(id) > 64 || opledger.ValidateKey(id) != nil {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxRequest, &requestState{id: id})))
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// logged writes one log line per request: method, route pattern (never the
// raw path, which holds keys), status, duration, request id, and, when
// known, the tenant of the request's token (tenant names carry no
// personal data, as keys) and the type of the problem answered (such as
// mapping_failed), which says why a 4xx or 5xx was answered. It is at
// INFO, but for a probe's or a scrape's that succeeded (probeRoutes),
// at DEBUG.
func (s *server) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		st := stateOf(r.Context())
		if st == nil { // not under withRequestID
			st = &requestState{}
			r = r.WithContext(context.WithValue(r.Context(), ctxRequest, st))
		}
		rec := &st.rec
		*rec = statusRecorder{ResponseWriter: w, status: http.StatusOK}
		// The mux sets the route's pattern on the request it is given.
		next.ServeHTTP(rec, r)
		ctx := r.Context()
		level := slog.LevelInfo
		if probeRoutes[r.Pattern] && rec.status < 300 {
			// A probe or scrape every few seconds would bury the lines
			// that matter; one that fails stays at INFO.
			level = slog.LevelDebug
		}
		if !s.log.Enabled(ctx, level) {
			return
		}
		n := &st.notes
		attrs := [7]slog.Attr{slog.String("request_id", st.id), slog.String("method", r.Method),
			slog.String("route", r.Pattern), slog.Int("status", rec.status), slog.Int64("duration_ms", time.Since(start).Milliseconds())}
		k := 5
		if n.tenant != "" {
			attrs[k] = slog.String("tenant", n.tenant)
			k++
		}
		if n.problem != "" {
			attrs[k] = slog.String("problem", n.problem)
			k++
		}
		s.log.LogAttrs(ctx, level, "request", attrs[:k]...)
	})
}

// probeRoutes are the routes of liveness and readiness probes and of
// metrics scrapes, whose answers that succeed are logged at DEBUG.
var probeRoutes = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true}

// authenticated checks the bearer token and scopes the ledger to its
// tenant; a read-only token may only GET, and a route of a decision needs
// a token that may decide. It also bounds the request body. refused, when
// not nil, is told the problem type of each request it refuses as the
// request's fault (unauthorized, forbidden, invalid_input), not of one it
// cannot check (the store unavailable).
func (s *server) authenticated(next http.HandlerFunc, needs routeNeeds, refused func(reason string)) http.Handler {
	refuse := func(reason string) {
		if refused != nil {
			refused(reason)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme's name is case-insensitive (RFC 9110, section 11.1).
		// Two Authorization fields are not one credential: which one a
		// proxy in between would pass on is anyone's guess.
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if len(r.Header.Values("Authorization")) > 1 {
			refuse("unauthorized")
			w.Header().Set("WWW-Authenticate", `Bearer realm="opledger", error="invalid_request"`)
			writeProblem(w, r, http.StatusUnauthorized, "unauthorized", "send one Authorization header, not several", nil)
			return
		}
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			refuse("unauthorized")
			w.Header().Set("WWW-Authenticate", `Bearer realm="opledger"`)
			writeProblem(w, r, http.StatusUnauthorized, "unauthorized", "send Authorization: Bearer <token>", nil)
			return
		}
		tok, err := s.opts.Auth.Authenticate(r.Context(), token)
		if err != nil {
			if errors.Is(err, opledger.ErrUnauthorized) {
				refuse("unauthorized")
				w.Header().Set("WWW-Authenticate", `Bearer realm="opledger", error="invalid_token"`)
				writeProblem(w, r, http.StatusUnauthorized, "unauthorized", "the token is unknown or revoked", nil)
				return
			}
			s.writeError(w, r, err)
			return
		}
		if n := notes(r.Context()); n != nil {
			n.tenant = tok.Tenant
		}
		write := r.Method != http.MethodGet && r.Method != http.MethodHead
		if write && !tok.CanWrite() {
			// Every route that writes takes PUT or POST: a read-only
			// token is refused before its body is read.
			refuse("forbidden")
			writeProblem(w, r, http.StatusForbidden, "forbidden",
				"the token "+tok.ID+" is read-only: it may use the GET routes only", nil)
			return
		}
		if needs == decision && !tok.CanDecide() {
			refuse("forbidden")
			writeProblem(w, r, http.StatusForbidden, "forbidden",
				"the token "+tok.ID+" is a worker token: it may not take an operator's decision (resolve, approve) nor cancel a workflow; a read-write token may", nil)
			return
		}
		if r.URL.RawQuery != "" && write {
			// A write takes its fields in its body: a query parameter
			// (?lease_seconds=5) would be ignored unseen, and after a
			// PUT's key (/v1/operations/a?b) it would cut the key.
			if _, err := queryParams(r); err != nil {
				refuse(decodeKind(err))
				if de, ok := err.(*decodeError); ok {
					de.msg += "; a write takes its fields in its JSON body"
				}
				s.writeError(w, r, err)
				return
			}
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		}
		if st := stateOf(r.Context()); st != nil {
			st.token = tok
			next(w, r)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), ctxRequest, &requestState{token: tok})))
	})
}

// begin returns the ledger scoped to the request's tenant, taking its
// decisions as through the request's token, and, when body is not nil,
// decodes the request body into it. On failure it has written the problem
// response and returns false.
func (s *server) begin(w http.ResponseWriter, r *http.Request, body any) (*opledger.Ledger, bool) {
	var tok *opledger.TokenInfo
	if st := stateOf(r.Context()); st != nil {
		tok = st.token
	}
	if tok == nil {
		s.writeError(w, r, errors.New("request reached a route without its token"))
		return nil, false
	}
	l, err := s.ledger.WithTenant(tok.Tenant)
	if err == nil {
		l, err = l.WithCredential(tok.Credential())
	}
	if err == nil && body != nil {
		err = decode(r, s.opts.MaxJSONDepth, body)
	}
	if err != nil {
		s.writeError(w, r, err)
		return nil, false
	}
	return l, true
}

// writeRepeatable writes v as writeJSON does, marked Idempotent-Replayed
// when the request repeated one already recorded and recorded nothing.
func (s *server) writeRepeatable(w http.ResponseWriter, r *http.Request, status int, v any, replayed bool) {
	if replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	s.writeJSON(w, r, status, v)
}

// writeJSON answers status with v as JSON. v is encoded before anything
// is sent (writeEncoded).
func (s *server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	b, err := json.Marshal(v)
	s.writeEncoded(w, r, status, b, err)
}

// writeEncoded answers status with b, an answer encoded as JSON, or, when
// encoding it failed (err: a stored payload damaged into text that is no
// JSON), logs that internal failure and answers 500 as writeError answers
// one, never the status with an empty body.
func (s *server) writeEncoded(w http.ResponseWriter, r *http.Request, status int, b []byte, err error) {
	if err != nil {
		w.Header().Del(HeaderReplayed)
		s.writeError(w, r, fmt.Errorf("the answer could not be encoded: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

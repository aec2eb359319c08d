// Package proxy is opledger's Idempotency-Key proxy: an HTTP reverse proxy
// that protects APIs without idempotency support, with no change to the
// automation calling them or to the API.
//
// Towards the caller it applies the IETF "The Idempotency-Key HTTP Header
// Field" draft (draft-ietf-httpapi-idempotency-key-header): a protected
// request (POST and PATCH by default) must carry an Idempotency-Key; the
// first one is recorded in the ledger, forwarded once, and its answer saved;
// a repeat with the same key and the same method, path and body gets the
// saved answer byte for byte with "Idempotent-Replayed: true"; the same key
// with another request is refused with 422, and a repeat while the first is
// still in flight with 409 and Retry-After.
//
// Towards the upstream it applies the ledger's uncertainty handling: a
// response lost after the request was written makes the operation
// uncertain (the caller gets 502 or 504), and the reconciler then applies
// the upstream's declared lookup or idempotency key, or holds the operation
// for a person. A request is never forwarded a second time without such a
// protection. Answers that decide the request (2xx and 4xx rejections) are
// replayed; 429 and 503 are passed through and a later repeat may forward
// again.
//
// Keys are scoped per upstream name and per caller credential (a SHA-256
// of the Authorization header or a configured one): two accounts using the
// same key never meet, and a retry whose credential changed (a refreshed
// access token) is a new request, forwarded again. Proxies sharing a
// store must give different upstreams different names; a saved answer
// that came from another API under the same name is never replayed. The
// ledger records each upstream's tenant and credential header (its key
// scope, opledger.Ledger.PinKeyScope): another value would give every
// earlier request another key, so it is refused (Run does not start)
// unless Config.AcceptScopeChange names the upstream.
//
// Paths are forwarded as received, percent-escapes included, and the
// fingerprint covers them in that form. A path with a ".." segment (as
// received or percent-encoded, also as "..;params" or "..%00"), a
// protected request whose path or query is not UTF-8, and a protected
// method spelled in another case are refused with 400. Operation keys are
// digests, so neither the caller's key nor the credential header is
// stored or logged in clear; the path, query and body (which may carry
// credentials or personal data) are stored for lookups and the
// fingerprint, and masked wherever the ledger shows an operation. The
// forwarding headers (X-Forwarded-*, Forwarded) are always the proxy's
// own, never the caller's.
//
// Allowed imports: opledger and its public packages, internal/configfile,
// internal/readerr, internal/redact, the standard library, a YAML
// decoder, golang.org/x/sys/unix (a connection's TCP_INFO, on Linux).
package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/reconciler"
)

// Header names of the protocol.
const (
	// HeaderIdempotencyKey carries the caller's key.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayed marks a saved answer sent again.
	HeaderReplayed = httpapi.HeaderReplayed
	// HeaderOperation names the ledger operation behind an answer to a
	// protected request (its key, "proxy:<upstream>:<digest>", in the
	// proxy's tenant), for opledger ops show: every answer once the
	// request's key was read, replays and refusals included.
	HeaderOperation = "Opledger-Operation"
	// HeaderState tells the ledger state of the operation behind an answer
	// that is not final (an upstream 5xx), a retryable answer (429, 503)
	// that used up the upstream's retry policy (failed), or a replayed
	// reconciliation.
	HeaderState = "Opledger-State"
	// HeaderBodyOmitted marks a replay whose body was too large to save.
	HeaderBodyOmitted = "Opledger-Body-Omitted"
)

// MaxIdleConnsPerUpstream is how many idle connections the default
// transport keeps to each upstream. net/http's default is 2: with more
// concurrent callers than that, every request beyond the second closes its
// connection after the answer and the next one opens a new one (a TCP
// connect, and a TLS handshake for https), so the proxy's throughput would
// be bounded by connection setup rather than by the ledger or the upstream.
const MaxIdleConnsPerUpstream = 64

// MaxKeyLength is the longest Idempotency-Key value accepted.
const MaxKeyLength = 255

// Action is the action of every operation the proxy records.
const Action = "http.request"

// Config configures a Proxy. Zero values take the documented defaults;
// negative durations and counts are refused by New.
type Config struct {
	// Upstreams are the APIs behind the proxy. At least one.
	Upstreams []Upstream
	// Logger receives one line per protected request and the reconciler's
	// decisions; never the callers' keys, bodies, paths or credentials
	// (operations are named by their digest keys). Default slog.Default().
	Logger *slog.Logger
	// Transport sends the forwarded requests and lookups of every
	// upstream. Default: for each upstream a clone of
	// http.DefaultTransport of its own, keeping MaxIdleConnsPerUpstream
	// idle connections, so that a 421 from one upstream, which closes the
	// idle connections of the transport that sent the request, leaves the
	// others' open.
	Transport http.RoundTripper
	// Worker names the proxy in attempts and the timeline. Default
	// "proxy@<host>:<pid>".
	Worker string
	// ReconcileInterval is how often uncertain operations are examined and
	// expired leases settled by Run. 0 means 5 s; negative is refused.
	ReconcileInterval time.Duration
	// CompactInterval is how often Run applies retention (Ledger.Compact):
	// saved answers are kept for the ledger's Retention, then reduced to
	// tombstones. 0 means opledger.DefaultCompactInterval (1 h); negative
	// is refused.
	CompactInterval time.Duration
	// InFlightRetryAfter is the Retry-After, in seconds, of a 409 for a
	// request still in flight or not yet settled. 0 means 1; negative is
	// refused. A claim older than its upstream's timeout, whose forward
	// has ended without its outcome recorded (its proxy stopped), gets
	// the seconds until its lease ends instead, if more.
	InFlightRetryAfter int
	// AcceptScopeChange names the upstreams whose key settings (the
	// proxy's tenant, the upstream's credential_header) may differ from
	// those recorded in the ledger with their operations: the new ones
	// are recorded, and every earlier request of these upstreams is then
	// taken as new. Without it such an upstream's protected requests are
	// refused, and Run does not start. Each name must be an upstream's.
	AcceptScopeChange []string
}

// Proxy is an http.Handler in front of the configured upstreams. It is safe
// for concurrent use.
type Proxy struct {
	ledger     *opledger.Ledger
	routes     []*route
	dests      *destination.Set
	reconciler *reconciler.Reconciler
	log        *slog.Logger
	cfg        Config
	// accept holds the names of Config.AcceptScopeChange.
	accept map[string]bool
}

// New checks cfg and returns a proxy recording in l, which is required.
// Open l with Options.DestinationRetryPolicies set to
// RetryPolicies(cfg.Upstreams), so that retryable answers follow the
// upstreams' policies.
func New(l *opledger.Ledger, cfg Config) (*Proxy, error) {
	if l == nil {
		return nil, errors.New("proxy: a ledger is required: New was given a nil *opledger.Ledger")
	}
	if len(cfg.Upstreams) == 0 {
		return nil, errNoUpstream
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Worker == "" {
		// Which process, on which machine, made an attempt: several
		// proxies may share one store.
		host, _ := os.Hostname()
		cfg.Worker = "proxy@" + host + ":" + strconv.Itoa(os.Getpid())
	}
	// 0 is "not set" and takes the default; a negative value is a mistake,
	// never silently replaced.
	switch {
	case cfg.ReconcileInterval < 0:
		return nil, fmt.Errorf("proxy: the reconcile interval is %s: it must be positive (0 means the default, 5s)", cfg.ReconcileInterval)
	case cfg.CompactInterval < 0:
		return nil, fmt.Errorf("proxy: the compact interval is %s: it must be positive (0 means the default, %s)", cfg.CompactInterval, opledger.DefaultCompactInterval)
	case cfg.InFlightRetryAfter < 0:
		return nil, fmt.Errorf("proxy: InFlightRetryAfter is %d: it must be positive (0 means the default, 1)", cfg.InFlightRetryAfter)
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = 5 * time.Second
	}
	if cfg.CompactInterval == 0 {
		cfg.CompactInterval = opledger.DefaultCompactInterval
	}
	if cfg.InFlightRetryAfter == 0 {
		cfg.InFlightRetryAfter = 1
	}
	transportFor := func() http.RoundTripper { return cfg.Transport }
	if cfg.Transport == nil {
		// One transport per upstream: an upstream's 421 closes the idle
		// connections of its client (see destination.SendHTTP), and must
		// not close the other upstreams'.
		transportFor = func() http.RoundTripper {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConnsPerHost = MaxIdleConnsPerUpstream
			tr.MaxIdleConns = max(tr.MaxIdleConns, MaxIdleConnsPerUpstream)
			return tr
		}
	}
	routes, err := buildRoutes(cfg.Upstreams, transportFor)
	if err != nil {
		return nil, err
	}
	ds := make([]destination.Destination, len(routes))
	for i, r := range routes {
		ds[i] = r.dest
	}
	set, err := destination.NewSet(ds...)
	if err != nil {
		return nil, err
	}
	accept := map[string]bool{}
	for _, name := range cfg.AcceptScopeChange {
		if !slices.ContainsFunc(routes, func(r *route) bool { return r.Name == name }) {
			return nil, fmt.Errorf("proxy: the scope change to accept names upstream %q, which is not configured", name)
		}
		accept[name] = true
	}
	p := &Proxy{ledger: l, routes: routes, dests: set, cfg: cfg, log: cfg.Logger.With("component", "proxy"), accept: accept}
	// Only the proxy's own tenant: its lookups carry the upstreams'
	// credentials, and another tenant sharing the store (through an
	// opledger serve) could record an operation naming a proxy:
	// destination to have them looked up for it.
	p.reconciler, err = reconciler.New(l, reconciler.Config{Destinations: set, Interval: cfg.ReconcileInterval, Logger: cfg.Logger, Tenant: l.Tenant()})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// RetryPolicies returns the retry policy of each upstream by destination
// name, for opledger.Options.DestinationRetryPolicies.
func RetryPolicies(upstreams []Upstream) (map[string]opledger.RetryPolicy, error) {
	routes, err := buildRoutes(upstreams, netHTTPTransport)
	if err != nil {
		return nil, err
	}
	out := make(map[string]opledger.RetryPolicy, len(routes))
	for _, r := range routes {
		out[destinationName(r.Name)] = r.policy
		_ = r.dest.Close()
	}
	return out, nil
}

// netHTTPTransport gives routes that are built to be checked, not to
// send, net/http's default transport.
func netHTTPTransport() http.RoundTripper { return nil }

// buildRoutes builds the upstreams' routes, each sending through the
// transport transportFor returns for it (nil: net/http's default).
func buildRoutes(upstreams []Upstream, transportFor func() http.RoundTripper) ([]*route, error) {
	var routes []*route
	names := map[string]bool{}
	prefixes := map[string]*route{} // prefix, as routed → the upstream that has it
	for _, u := range upstreams {
		r, err := u.build(transportFor())
		if err != nil {
			return nil, err
		}
		if names[r.Name] {
			return nil, fmt.Errorf("upstream %s: the name is already used by another upstream: each needs its own", r.Name)
		}
		// Compared as routed: "/crm/" and "/crm" route the same paths,
		// and the longer would take every request of the other.
		routed := strings.Join(r.prefix, "/")
		if other, used := prefixes[routed]; used {
			if other.Prefix == r.Prefix {
				return nil, fmt.Errorf("upstream %s: prefix %s is already used by upstream %s", r.Name, r.Prefix, other.Name)
			}
			return nil, fmt.Errorf("upstream %s: prefix %s routes the same paths as upstream %s's prefix %s: with or without the trailing slash, it is one prefix", r.Name, r.Prefix, other.Name, other.Prefix)
		}
		names[r.Name], prefixes[routed] = true, r
		routes = append(routes, r)
	}
	// Longest prefix first.
	sort.SliceStable(routes, func(i, j int) bool { return len(routes[i].Prefix) > len(routes[j].Prefix) })
	return routes, nil
}

// Close releases the upstreams' idle connections.
func (p *Proxy) Close() error {
	for _, rt := range p.routes {
		rt.client.CloseIdleConnections()
	}
	return p.dests.Close()
}

// ReconcileOnce runs one pass of the reconciler over the uncertain
// operations that are due (Run does it every ReconcileInterval).
func (p *Proxy) ReconcileOnce(ctx context.Context) (reconciler.Pass, error) {
	return p.reconciler.RunOnce(ctx)
}

// ServeHTTP routes the request to its upstream: protected methods through
// the ledger, the others straight through, but CONNECT, which is refused
// with 405 on every route (the proxy does not tunnel).
// The path is routed and forwarded in its escaped form, as received:
// /files/a%2Fb reaches the upstream as /files/a%2Fb, not /files/a/b.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		// An upstream that is a forward proxy itself would open a tunnel
		// through this one, to anywhere, unrecorded.
		w.Header().Set("Allow", allowedMethods)
		writeProblem(w, r, http.StatusMethodNotAllowed, "method_not_allowed",
			"the proxy does not tunnel: CONNECT is refused on every route; nothing was forwarded", nil)
		return
	}
	rt, rest := p.route(escapedAsReceived(r.URL))
	if rt == nil {
		writeProblem(w, r, http.StatusNotFound, "no_upstream", "no upstream is configured for this path", nil)
		return
	}
	if hasDotDot(rest) {
		writeProblem(w, r, http.StatusBadRequest, "invalid_input",
			"the path has a .. segment (as received or percent-encoded, also followed by ;parameters or a NUL): it would leave the upstream's base path, so it is not forwarded", nil)
		return
	}
	if h, m := methodOverride(r); h != "" {
		writeProblem(w, r, http.StatusBadRequest, "invalid_input",
			"the "+h+" header asks for the method "+m+" instead of "+r.Method+": the proxy protects a request by its own method, and an upstream that honoured the header could act unprotected. Send the method itself; nothing was forwarded", nil)
		return
	}
	for _, h := range pathOverrideHeaders {
		if _, ok := r.Header[h]; ok {
			writeProblem(w, r, http.StatusBadRequest, "invalid_input",
				"the "+h+" header asks for another path than the request's: an upstream that honoured it would act on a path the proxy did not route or protect. Send the path itself; nothing was forwarded", nil)
			return
		}
	}
	if !rt.protected[r.Method] {
		if upper := strings.ToUpper(r.Method); upper != r.Method && rt.protected[upper] {
			// Methods are case-sensitive (RFC 9110 section 9.1): "post" is
			// not POST to the proxy, but an upstream may take it for one,
			// and it would pass unprotected.
			writeProblem(w, r, http.StatusBadRequest, "invalid_input",
				"the method "+upper+" must be sent in upper case: methods are case-sensitive, and this spelling would pass the proxy without its protection. Nothing was forwarded", nil)
			return
		}
		p.passThrough(rt, rest, w, r)
		return
	}
	p.protect(rt, rest, w, r)
}

// allowedMethods is the Allow header of the 405 that refuses CONNECT: the
// methods of RFC 9110 and PATCH, which the proxy forwards (a route's
// protected ones through the ledger).
const allowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"

// methodOverrideHeaders are the headers by which frameworks (Google's
// APIs, Rails, Laravel, Express's method-override, ASP.NET) let a request
// stand for another method.
var methodOverrideHeaders = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// pathOverrideHeaders are the headers by which some frameworks (Symfony,
// Laminas, IIS's URL rewrite) let a request stand for another path: an
// upstream that honoured one would act on a path the proxy did not
// route, protect or record.
var pathOverrideHeaders = []string{"X-Original-Url", "X-Rewrite-Url"}

// methodOverride returns the first method-override header of r that names
// a method other than r's own, and the method it names; "" when there is
// none. Such a request is refused: a GET asking to be taken for a POST
// would pass the proxy unprotected, and a POST taken for another method
// would be recorded under a fingerprint that does not say what it did.
// An empty value names no method (no framework takes one for a method)
// and is passed, and so is r's own method in another case ("post" on a
// POST): the frameworks that honour the header upper-case its value.
func methodOverride(r *http.Request) (header, method string) {
	for _, h := range methodOverrideHeaders {
		for _, v := range r.Header.Values(h) {
			if m := strings.TrimSpace(v); m != "" && !strings.EqualFold(m, r.Method) {
				return h, m
			}
		}
	}
	return "", ""
}

// hasDotDot reports whether the escaped path escPath has a ".." segment,
// as received or once percent-decoded ("%2e%2e", ".%2E"), separated by
// slashes or backslashes (some servers take either, and "%2F" for "/"):
// an upstream that resolves it would serve a path outside the route's
// base path. A segment counts as ".." once everything from its first ';'
// or NUL byte is removed: servlet containers (Tomcat, Jetty, Spring)
// strip path parameters ("..;", "..;x=1", "..%3B") before they resolve
// the path, and some servers end a path at a NUL ("..%00").
func hasDotDot(escPath string) bool {
	p, err := url.PathUnescape(escPath)
	if err != nil {
		p = escPath
	}
	for _, seg := range strings.FieldsFunc(escPath+"/"+p, func(c rune) bool { return c == '/' || c == '\\' }) {
		if i := strings.IndexAny(seg, ";\x00"); i >= 0 {
			seg = seg[:i]
		}
		if seg == ".." {
			return true
		}
	}
	return false
}

// route returns the upstream of an escaped path and the escaped rest of
// the path after its prefix.
func (p *Proxy) route(escPath string) (*route, string) {
	for _, r := range p.routes {
		if rest, ok := r.split(escPath); ok {
			return r, rest
		}
	}
	return nil, ""
}

// passThrough forwards a request without the ledger; rest is the escaped
// path after the route's prefix. The route's timeout bounds the wait for
// the upstream's status and headers, counted from the moment the request
// has been written; while its body is streamed (as the caller sends it,
// for as long as that takes), the timeout bounds the time the upstream
// takes to take each part of it (watchUpload), so that an upstream that
// stops reading cannot hold the proxy. The answer's body is then relayed
// as it arrives, however long it lasts (a download, a stream of events).
func (p *Proxy) passThrough(rt *route, rest string, w http.ResponseWriter, r *http.Request) {
	ctx, clock := startClock(r.Context(), rt.timeout)
	defer clock.stop()
	clock.pause() // until the request has been written
	out := r.WithContext(ctx)
	var upload *uploadWatch
	if r.Body != nil && r.Body != http.NoBody {
		upload = watchUpload(r.Body, rt.timeout, func() { clock.cancel(errUpstreamNotReading) })
		defer upload.stop()
		out.Body = upload
	}
	written := func() {
		if upload != nil {
			upload.stop()
		}
	}
	// Whether the request may have reached the upstream, by the rule of
	// a protected request's SendHTTP: a failed TLS handshake sent nothing.
	var sent destination.RequestTrace
	ctx = httptrace.WithClientTrace(ctx, sent.ClientTrace())
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		written()
		clock.resume()
	}})
	out = out.WithContext(ctx)
	rp := &httputil.ReverseProxy{
		// Its own errors (an answer's body cut off while relayed) go to
		// the proxy's log, in its format, not to the standard logger.
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = rt.target(rest, pr.In.URL.RawQuery)
			pr.Out.Host = ""
			// The caller's Idempotency-Key goes on as sent: the proxy
			// does not protect this method, and an upstream that honours
			// the key keeps its own protection.
			setXForwarded(pr.Out, pr.In)
		},
		Transport: rt.client.Transport,
		ModifyResponse: func(*http.Response) error {
			// For good: the answer has come (the transport may still
			// report the request written after it, from a full-duplex
			// upstream that answered before reading it all).
			written()
			clock.freeze()
			return context.Cause(ctx)
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			p.passThroughFailed(rt, w, r, err, context.Cause(ctx), sent.MayHaveReached(rt.client, err))
		},
	}
	rp.ServeHTTP(w, out)
}

// errUpstreamNotReading ends a passed-through request whose body the
// upstream took no part of for the route's timeout.
var errUpstreamNotReading = errors.New("the upstream took no more of the request")

// uploadWatch is a passed-through request's body as the transport reads
// it to send it on: between two reads (while the transport writes what it
// read to the upstream) a timer runs, and calls stalled once limit has
// passed without the next read. The time the caller takes to send the
// body (a read in progress) does not count.
type uploadWatch struct {
	body  io.ReadCloser
	limit time.Duration
	mu    sync.Mutex
	timer *time.Timer
	done  bool // stopped for good
}

// watchUpload returns body watched, its timer not yet running.
func watchUpload(body io.ReadCloser, limit time.Duration, stalled func()) *uploadWatch {
	u := &uploadWatch{body: body, limit: limit}
	u.timer = time.AfterFunc(limit, stalled)
	u.timer.Stop()
	return u
}

func (u *uploadWatch) Read(b []byte) (int, error) {
	u.mu.Lock()
	u.timer.Stop()
	u.mu.Unlock()
	n, err := u.body.Read(b)
	if err == nil {
		u.mu.Lock()
		if !u.done {
			u.timer.Reset(u.limit)
		}
		u.mu.Unlock()
	}
	return n, err
}

func (u *uploadWatch) Close() error {
	u.stop()
	return u.body.Close()
}

// stop stops the timer for good: the body has been written, or the
// upstream has answered.
func (u *uploadWatch) stop() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.done = true
	u.timer.Stop()
}

// unprotectedNote ends the answer to a passed-through request that got
// no answer from the upstream.
const unprotectedNote = "The request was passed through unprotected (without an Idempotency-Key, or by a method the proxy does not protect): nothing was recorded"

// passThroughFailed answers a passed-through request that got no answer
// from the upstream: as for a protected one, a failure to connect (reached
// false: no connection was made for it, or the upstream refused its TLS
// handshake) is told apart from a connection lost, an answer not given
// within the route's timeout, or a body the upstream stopped taking for
// that long (cause says which ended it), after the request or part of it
// was sent, when the upstream may have acted.
func (p *Proxy) passThroughFailed(rt *route, w http.ResponseWriter, r *http.Request, err, cause error, reached bool) {
	if r.Context().Err() != nil {
		p.log.Info("pass-through ended: the caller went away", "upstream", rt.Name, "method", r.Method)
		return
	}
	timedOut, stalled := errors.Is(cause, context.DeadlineExceeded), errors.Is(cause, errUpstreamNotReading)
	if !reached {
		p.log.Warn("pass-through failed: the upstream could not be reached", "upstream", rt.Name, "method", r.Method, "error", opledger.ErrorText(err))
		writeProblem(w, r, http.StatusBadGateway, "upstream_unreachable",
			"the upstream could not be reached; nothing was sent, so sending the request again is safe. "+unprotectedNote, nil)
		return
	}
	status, what := http.StatusBadGateway, "the connection to the upstream broke after the request was sent"
	switch {
	case stalled:
		status, what = http.StatusGatewayTimeout, "the upstream took no more of the request for "+rt.timeout.String()+" while it was being sent"
	case timedOut:
		status, what = http.StatusGatewayTimeout, "the upstream did not answer within "+rt.timeout.String()+" after the request was sent"
	}
	p.log.Warn("pass-through failed: no answer from the upstream", "upstream", rt.Name, "method", r.Method,
		"timeout", timedOut, "stalled_upload", stalled, "error", opledger.ErrorText(err))
	writeProblem(w, r, status, "upstream_response_lost",
		what+", so it may or may not have acted. "+unprotectedNote+
			", so the proxy cannot tell, and would forward it again: check at the upstream before you send it again, or send it with an Idempotency-Key", nil)
}

// scopeDigest is the SHA-256 of the caller's credential, or "anonymous".
func (rt *route) scopeDigest(r *http.Request) string {
	cred := r.Header.Values(rt.credHdr)
	if len(cred) == 0 {
		return "anonymous"
	}
	sum := sha256.Sum256([]byte(strings.Join(cred, "\n")))
	return hex.EncodeToString(sum[:])
}

// operationKey is the ledger key of a caller's Idempotency-Key: scoped by
// upstream and credential, and a digest, so that neither the caller's key
// (which may carry personal data) nor the credential is stored.
func (rt *route) operationKey(scope, callerKey string) string {
	h := sha256.New()
	h.Write([]byte("opledger-proxy\x00"))
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(callerKey))
	return "proxy:" + rt.Name + ":" + hex.EncodeToString(h.Sum(nil)[:24])
}

// parseKey reads the Idempotency-Key header, given as its field lines.
//
// The draft makes it an Item Structured Header (RFC 9651) whose value is
// a String: "abc", in which \" and \\ are the only escapes. Parameters
// after the closing quote ("abc";p=1) are checked and ignored, as a
// recipient ignores parameters it does not know. Many clients send the
// key unquoted: a value that does not start with a quote is taken whole
// as the key (abc;p=1 is the key "abc;p=1", as it always was), and cannot
// hold a quote or a backslash. "abc" and abc are the same key.
//
// A key is one item, not a list. HTTP reads two field lines and one line
// joined by a comma as the same list (RFC 9110, section 5.3), so both are
// refused alike: a comma outside quotes is refused, and a key that holds
// a comma must be quoted ("a,b").
//
// The key must be 1 to MaxKeyLength bytes of printable ASCII (after
// unescaping). Each error says what is wrong, for the caller to read;
// none repeats the key, which may carry personal data.
func parseKey(values []string) (string, error) {
	switch {
	case len(values) == 0:
		return "", errors.New("the request has no Idempotency-Key header")
	case len(values) > 1:
		return "", fmt.Errorf("the Idempotency-Key header was sent in %d field lines, which HTTP reads as a list of keys: send one key, in one header line", len(values))
	}
	v := strings.TrimSpace(values[0])
	if strings.HasPrefix(v, `"`) {
		return parseQuotedKey(v)
	}
	if err := checkKeyLength(v); err != nil {
		return "", err
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == ',':
			return "", errKeyList
		case c == '"' || c == '\\':
			return "", errors.New(`an unquoted Idempotency-Key cannot hold a quote (") or a backslash (\): send the key as a quoted string, with each of them escaped by a backslash (\" and \\)`)
		case c < 0x20 || c > 0x7e:
			return "", errKeyNotPrintable(c)
		}
	}
	return v, nil
}

// errKeyList refuses a field value that holds a list of keys.
var errKeyList = errors.New(`the Idempotency-Key holds a comma outside quotes, which HTTP reads as a list of keys: send one key; a key that contains a comma must be sent quoted ("a,b")`)

// errKeyNotPrintable refuses a key that holds the byte c.
func errKeyNotPrintable(c byte) error {
	return fmt.Errorf("the Idempotency-Key must be printable ASCII; it holds the byte 0x%02x", c)
}

// checkKeyLength refuses an empty key or one over MaxKeyLength bytes.
func checkKeyLength(key string) error {
	if key == "" {
		return errors.New("the Idempotency-Key header is empty")
	}
	if len(key) > MaxKeyLength {
		return fmt.Errorf("the Idempotency-Key is longer than %d bytes", MaxKeyLength)
	}
	return nil
}

// parseQuotedKey reads v, which starts with a quote, as an sf-string and
// its parameters (RFC 9651, sections 3.3.3 and 3.1.2), which it ignores.
func parseQuotedKey(v string) (string, error) {
	var b strings.Builder
	end := -1
	for i := 1; i < len(v) && end < 0; i++ {
		switch c := v[i]; {
		case c == '"':
			end = i
		case c == '\\':
			if i+1 == len(v) || v[i+1] != '"' && v[i+1] != '\\' {
				return "", errors.New(`in a quoted Idempotency-Key a backslash may only escape a quote (\") or a backslash (\\)`)
			}
			i++
			b.WriteByte(v[i])
		case c < 0x20 || c > 0x7e:
			return "", errKeyNotPrintable(c)
		default:
			b.WriteByte(c)
		}
	}
	if end < 0 {
		return "", errors.New("the quoted Idempotency-Key has no closing quote")
	}
	key := b.String()
	if err := checkKeyLength(key); err != nil {
		return "", err
	}
	rest := v[end+1:]
	if strings.HasPrefix(rest, ";") {
		rest = rest[len(keyParameters.FindString(rest)):]
		if rest != "" && rest[0] != ' ' && rest[0] != '\t' && rest[0] != ',' {
			return "", errors.New("a parameter of the Idempotency-Key is malformed: parameters are ;name or ;name=value, with a lowercase name and a structured-field value (a number, \"string\", token, :base64:, ?0 or ?1); they are ignored")
		}
	}
	rest = strings.TrimLeft(rest, " \t")
	switch {
	case rest == "":
		return key, nil
	case rest[0] == ',':
		return "", errKeyList
	default:
		return "", errors.New("after the closing quote of the Idempotency-Key only parameters (;name=value, right after the quote) may follow")
	}
}

// keyParameters matches the parameters at the start of a string (RFC
// 9651, section 3.1.2): a name, and a value of any bare item type.
var keyParameters = func() *regexp.Regexp {
	const (
		key     = `[a-z*][a-z0-9_.*-]*`
		number  = `-?(?:[0-9]{1,15}|[0-9]{1,12}\.[0-9]{1,3})`
		str     = `"(?:[ !#-\[\]-~]|\\["\\])*"`
		token   = `[A-Za-z*][!#$%&'*+.^_|~0-9A-Za-z:/` + "`" + `-]*`
		binary  = `:[A-Za-z0-9+/=]*:`
		boolean = `\?[01]`
		date    = `@-?[0-9]{1,15}`
		display = `%"(?:[ !#$&-~]|%[0-9a-f]{2})*"`
		bare    = `(?:` + number + `|` + str + `|` + token + `|` + binary + `|` + boolean + `|` + date + `|` + display + `)`
	)
	re := regexp.MustCompile(`^(?:;[ ]*` + key + `(?:=` + bare + `)?)*`)
	re.Longest()
	return re
}()

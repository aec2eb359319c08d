package destination

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger"
)

// HTTPPolicy tunes how SendHTTP and ClassifyStatus read a destination's
// answers.
type HTTPPolicy struct {
	// ExistsStatus is the status with which a destination that enforces a
	// unique external reference refuses a duplicate create (usually 409).
	// That answer means "already exists": it is uncertain and matches
	// ErrExists. Zero means the destination has no unique reference, and a
	// 409 is rejected like any other refusal.
	ExistsStatus int
	// UncertainStatuses are statuses that mean "may have happened" for
	// this destination (a gateway that answers 503 after the backend
	// acted): an answer with one of them is uncertain, whatever the
	// status means otherwise. ExistsStatus takes precedence.
	UncertainStatuses []int
	// Now is the clock used for a Retry-After date when the response has
	// no Date header. Default time.Now.
	Now func() time.Time
}

// StatusError is a destination's answer with a status other than 2xx.
type StatusError struct {
	// Method and Host of the request; never the path or query, which may
	// carry payload data.
	Method, Host string
	// StatusCode and Status ("422 Unprocessable Entity") of the answer.
	StatusCode int
	Status     string
	// RetryAfter is the parsed Retry-After header, zero if absent.
	RetryAfter time.Duration
	// Exists: the status is the destination's "already exists" conflict.
	Exists bool
}

// Error describes the error.
func (e *StatusError) Error() string {
	msg := e.Method + " " + e.Host + ": " + e.Status
	if e.RetryAfter > 0 {
		msg += " (retry after " + e.RetryAfter.String() + ")"
	}
	if e.Exists {
		msg += ": " + ErrExists.Error()
	}
	return msg
}

// Is matches ErrExists for the destination's conflict status.
func (e *StatusError) Is(target error) bool { return e.Exists && target == ErrExists }

// SendError is a request that got no answer.
type SendError struct {
	// Method and Host of the request; never the path or query.
	Method, Host string
	// Written: the request, or a part of it, may have been handed to the
	// network (a connection was obtained for it), so the destination may
	// have acted on it.
	Written bool
	// Err is the transport's error, without the URL.
	Err error
}

// Error describes the error.
func (e *SendError) Error() string {
	what := "not sent"
	if e.Written {
		what = "sent, no answer"
	}
	return e.Method + " " + e.Host + ": " + what + ": " + e.Err.Error()
}

// Unwrap returns the transport's error.
func (e *SendError) Unwrap() error { return e.Err }

// SendHTTP sends req with client and classifies the result for the ledger:
//
//   - a 2xx answer returns the response and a nil error;
//   - any other answer returns the response (body open) together with the
//     classified *StatusError of ClassifyStatus;
//   - no answer returns a *SendError classified by whether the request was
//     written: retryable when it provably never left (connection refused,
//     DNS failure, no connection at all, a TLS handshake the server
//     refused, also one that refuses the client's certificate with TLS
//     1.3 after the request was written, an HTTP/2 connection that
//     closed before it carried any request), uncertain when it may have
//     reached the destination (a timeout, reset or cancellation once a
//     connection was obtained, even one that broke while the request was
//     being written: a server may act on the headers it read, and even
//     answer, before the body has arrived).
//
// The caller closes resp.Body whenever resp is not nil. Whether the request
// was written is read from net/http/httptrace (GotConn): once net/http has
// a connection for it, writing may have started. A client whose Transport
// is not net/http's own (*http.Transport) may not report its connections:
// with it, a failure counts as written unless it is a failed dial, an
// unresolved name or a refused TLS handshake.
// SendHTTP also makes every request non-replayable, so that net/http never
// silently sends it a second time on a fresh connection after it may have
// reached the destination: every send is an attempt on record. (A TRACE is
// left as net/http makes it.) A request without a body that net/http would
// deem replayable gets an empty one it cannot rewind: a GET, HEAD, DELETE
// or OPTIONS still goes out with no body; a POST, PUT, PATCH or other
// method goes out with an empty chunked body ("Transfer-Encoding:
// chunked") instead of "Content-Length: 0" when net/http would resend it:
// when it carries an Idempotency-Key or X-Idempotency-Key header, even an
// empty one, and whenever it may go out over HTTP/2 (an https URL, or a
// transport that may speak HTTP/2 in cleartext), where net/http resends
// any request without a body whose stream the server resets, even with
// PROTOCOL_ERROR after it acted; over HTTP/2 the empty body costs only an
// empty DATA frame. A request with a body keeps its Content-Length.
// A redirect is never followed, whatever client's CheckRedirect says: a
// 3xx answer is returned as it is (uncertain), as clients made by this
// package (NewClient) return it, since the answer of the request that
// followed it (a POST answered 302, followed by a GET) would pass for
// this one's. After a 421 answer, closing
// resp.Body also closes client's idle connections, the one that answered
// among them, so that the retry opens a new connection: net/http would
// otherwise reuse that one. An HTTP/2 connection still carrying other
// requests is not idle and stays open, and a retry may land on it again.
func SendHTTP(client *http.Client, req *http.Request, p HTTPPolicy) (*http.Response, error) {
	tr := &writeTrace{}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), tr.clientTrace()))
	// net/http resends a request on a reused connection that died after
	// the request was written when it deems the request replayable: a
	// body it can rewind (GetBody), or none at all (nil or http.NoBody),
	// for GET, HEAD, OPTIONS and TRACE and for any method with an
	// Idempotency-Key or X-Idempotency-Key header, even an empty one.
	// Over HTTP/2 it resends any request without a body, whatever its
	// method, when the server refuses its stream or resets it with
	// PROTOCOL_ERROR, which a server (a proxy in front of the
	// destination) may do after it acted. A body it cannot rewind makes
	// it never do so; a request that never reached the connection
	// (nothing written) may still be sent on another one.
	if (req.Body == nil || req.Body == http.NoBody) && req.Method != http.MethodTrace &&
		(methodLacksBody(req.Method) || hasHeader(req.Header, "Idempotency-Key") || hasHeader(req.Header, "X-Idempotency-Key") ||
			mayUseHTTP2(client, req)) {
		req.Body = io.NopCloser(strings.NewReader(""))
		req.ContentLength = 0
	}
	req.GetBody = nil
	noRedirect := *client
	noRedirect.CheckRedirect = useLastResponse
	resp, err := noRedirect.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry payload data
		}
		se := &SendError{Method: req.Method, Host: req.URL.Host, Written: tr.mayHaveReached(tracesConnections(client), err), Err: err}
		if se.Written {
			return nil, opledger.Uncertain(se)
		}
		return nil, opledger.Retryable(se, 0)
	}
	if err := ClassifyStatus(resp, p); err != nil {
		if resp.StatusCode == http.StatusMisdirectedRequest {
			resp.Body = &closeIdleBody{ReadCloser: resp.Body, client: client}
		}
		return resp, err
	}
	return resp, nil
}

// NewClient returns a client for calls that have side effects: a 3xx
// answer is returned as it is, an answer to record, never followed by a
// second request whose answer could pass for the first one's. A nil
// transport is a clone of net/http's default one, so that the client's
// connections are its own.
func NewClient(transport http.RoundTripper) *http.Client {
	if transport == nil {
		transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	return &http.Client{Transport: transport, CheckRedirect: useLastResponse}
}

// useLastResponse is a CheckRedirect that follows no redirect: the 3xx
// answer is the client's answer.
func useLastResponse(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// closeIdleBody is the body of a 421 answer. Closing it closes the
// client's idle connections too: once the body is closed, the connection
// that answered is idle (unless it carries other requests), and net/http
// would otherwise send the retry on it (HTTP/1.1 keep-alive or HTTP/2),
// to the server that just said it cannot answer for the request's
// authority.
type closeIdleBody struct {
	io.ReadCloser
	client *http.Client
}

// Close closes the body, then the client's idle connections.
func (b *closeIdleBody) Close() error {
	err := b.ReadCloser.Close()
	b.client.CloseIdleConnections()
	return err
}

// ClassifyStatus classifies a destination's answer by its status: nil for
// 2xx, otherwise a *StatusError marked as
//
//   - uncertain for a status of p.UncertainStatuses, whatever it means
//     otherwise: the destination declared that it may have acted;
//   - uncertain for p.ExistsStatus (matching ErrExists), for 500, 502, 504
//     and any other 5xx or unexpected status: the destination may have
//     acted;
//   - retryable for 429, 503, 408, 425 and 421 (Misdirected Request: the
//     server that got the request cannot answer for its authority, RFC
//     9110 section 15.5.20, and a retry over another connection may
//     reach one that can), with the Retry-After header (seconds or an
//     HTTP date) if any: the destination did not act;
//   - rejected for the other 4xx (400, 401, 403, 404, 409, 422, ...) and
//     for 501 and 505: refused before any effect, repair the cause first.
func ClassifyStatus(resp *http.Response, p HTTPPolicy) error {
	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		return nil
	}
	host := ""
	method := ""
	if resp.Request != nil {
		method = resp.Request.Method
		if resp.Request.URL != nil {
			host = resp.Request.URL.Host
		}
	}
	status := resp.Status
	if status == "" {
		status = strconv.Itoa(code) + " " + http.StatusText(code)
	}
	se := &StatusError{Method: method, Host: host, StatusCode: code, Status: status}
	switch {
	case p.ExistsStatus != 0 && code == p.ExistsStatus:
		se.Exists = true
		return opledger.Uncertain(se)
	case slices.Contains(p.UncertainStatuses, code):
		// Declared by the destination: it may have acted.
		return opledger.Uncertain(se)
	case retryableStatus(code):
		now := time.Now
		if p.Now != nil {
			now = p.Now
		}
		se.RetryAfter = ParseRetryAfter(resp.Header, now())
		return opledger.Retryable(se, se.RetryAfter)
	case code == http.StatusNotImplemented, code == http.StatusHTTPVersionNotSupported:
		return opledger.Rejected(se)
	case code >= 400 && code <= 499:
		return opledger.Rejected(se)
	}
	// 500, 502, 504, other 5xx, and 1xx or 3xx as a final answer.
	return opledger.Uncertain(se)
}

// retryableStatus reports whether code says "try again later": the
// destination did not act (429, 503, 408, 425, 421). No such status can
// mean "this record exists" (a unique reference's conflict status).
func retryableStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable,
		http.StatusRequestTimeout, http.StatusTooEarly, http.StatusMisdirectedRequest:
		return true
	}
	return false
}

// retryStatusConflict says why a unique reference's conflict status
// code cannot be one that says "try again later", or "".
func retryStatusConflict(code int) string {
	if !retryableStatus(code) {
		return ""
	}
	return strconv.Itoa(code) + ` means "try again later" (the destination did nothing), never "the record exists": ` +
		"a rate limit or a timeout would hold the operation instead of retrying it; use the status the destination refuses a duplicate with, usually 409"
}

// ParseRetryAfter reads a Retry-After header (RFC 9110 section 10.2.3): a
// number of seconds, or an HTTP date. A date is measured from the
// response's Date header when there is one (so the two clocks involved are
// both the destination's), otherwise from now. Missing, malformed or past
// values give zero.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(opledger.MaxRetryAfter/time.Second) {
			return opledger.MaxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date
	}
	d := at.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(d, opledger.MaxRetryAfter)
}

// RequestTrace tells whether a request that failed may have reached its
// destination, by the rule SendHTTP applies (a connection obtained for
// it, but for the refusals that say nothing was read), for a request sent
// by other means than SendHTTP: a reverse proxy's. Put ClientTrace on the
// request's context before it is sent; then MayHaveReached answers for
// the error it failed with. A handshake that failed (a certificate not
// trusted) or a dial that did not connect sent nothing, which the error
// alone does not always say.
type RequestTrace struct{ w writeTrace }

// ClientTrace returns the hooks that record the connections net/http
// obtains for the request.
func (t *RequestTrace) ClientTrace() *httptrace.ClientTrace { return t.w.clientTrace() }

// MayHaveReached reports whether the request, sent through client's
// transport, may have reached the destination before it failed with err.
func (t *RequestTrace) MayHaveReached(client *http.Client, err error) bool {
	return t.w.mayHaveReached(tracesConnections(client), err)
}

// writeTrace records how far a request got: whether net/http obtained a
// connection for it (it may try more than one).
type writeTrace struct {
	conns atomic.Int32 // connections obtained: writing may start on each
}

func (w *writeTrace) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { w.conns.Add(1) },
	}
}

// mayHaveReached reports whether the destination may have received a
// request that failed with err. Without a connection nothing left. With
// one, the request may have reached it, even if writing it failed part
// way: a failed write says that the body did not arrive whole, not that
// nothing did, and a server may act on the headers it read (an upload
// that creates its record first, an endpoint that ignores the body) and
// answer before it reads the body, which HTTP allows; net/http then
// reports the failed write or the answer, whichever it sees first. A
// TLS handshake the server refused (refusedHandshake), an HTTP/2 stream
// the server refused or will not process (unprocessedStream) and an
// HTTP/2 connection that closed before it carried any request
// (unusedConnection) are the exceptions: the server says it did nothing,
// or nothing of the request was written. When the transport is
// not known to report its connections (traced false: a RoundTripper of
// the caller's, which may not pass the request's trace on), seeing none
// proves nothing, and only an error that happens before any connection
// (a name that does not resolve, a refused or failed dial) or one of
// those exceptions says that nothing left.
func (w *writeTrace) mayHaveReached(traced bool, err error) bool {
	if refusedHandshake(err) || unprocessedStream(err) || unusedConnection(err) {
		return false
	}
	return w.conns.Load() > 0 || !traced && !beforeConnection(err)
}

// unprocessedStreamErr matches the errors of net/http's HTTP/2 transport
// that say the server did not process the request: it refused its stream
// (RST_STREAM with REFUSED_STREAM, "closed prior to any processing", RFC
// 9113 section 8.7), or sent GOAWAY naming a last stream before it (it
// will not process it, section 6.8). net/http resends such a request
// itself when it can rewind the body; SendHTTP's requests it gives up as
// "cannot retry err [...]", and it reports these errors as text only.
// The whole text must match, so that no text of the server's (GOAWAY
// debug data) passes for one; should net/http word them otherwise, the
// failure stays uncertain.
var unprocessedStreamErr = regexp.MustCompile(`^(?:http2: Transport: cannot retry err \[(?:` +
	`stream error: stream ID \d+; REFUSED_STREAM; received from peer|` +
	`http2: Transport received Server's graceful shutdown GOAWAY)` +
	`\] after Request\.Body was written; define Request\.GetBody to avoid this error|` +
	`http2: Transport received GOAWAY from server ErrCode:(?:[A-Z_]+|unknown error code 0x[0-9a-f]+))$`)

// unprocessedStream reports whether err says that an HTTP/2 server did
// not process the request (unprocessedStreamErr).
func unprocessedStream(err error) bool { return unprocessedStreamErr.MatchString(err.Error()) }

// unusedConnectionErr is the text of the error net/http's HTTP/2
// transport returns for a request that was to be the first on a new
// connection that closed before any stream was opened on it (with TLS
// 1.3, for one, when the server refuses the client's certificate after
// the client's side of the handshake has ended): no request's headers
// were written on that connection, this one's neither, and net/http does
// not send it on another one. net/http reports it as text only. The
// whole text must match; should net/http word it otherwise, the failure
// stays uncertain.
const unusedConnectionErr = "http2: client conn could not be established"

// unusedConnection reports whether err says that the HTTP/2 connection
// meant for the request closed before carrying any (unusedConnectionErr).
func unusedConnection(err error) bool { return err.Error() == unusedConnectionErr }

// handshakeAlerts are the TLS alerts a server sends only to refuse a
// handshake: it did not accept the client's certificate (or got none),
// or the handshake failed.
var handshakeAlerts = []tls.AlertError{40, 42, 43, 44, 45, 46, 48, 49, 51, 116}

// refusedHandshake reports whether err is a TLS alert from the server
// that refused the handshake. With TLS 1.3 the client's handshake ends
// before the server has checked the client's certificate, and net/http
// writes the request at once: the refusal arrives after the request was
// written, but a server that refused the handshake never read it (the
// request is encrypted with keys the server only accepts once the
// handshake is complete). crypto/tls reports a received alert as a
// *net.OpError "remote error" whose Err spells the alert as
// tls.AlertError does.
func refusedHandshake(err error) bool {
	var ae tls.AlertError
	if errors.As(err, &ae) && slices.Contains(handshakeAlerts, ae) {
		return true
	}
	var opErr *net.OpError
	for e := err; errors.As(e, &opErr); e = opErr.Err {
		if opErr.Op != "remote error" || opErr.Err == nil {
			continue
		}
		for _, a := range handshakeAlerts {
			if opErr.Err.Error() == a.Error() {
				return true
			}
		}
	}
	return false
}

// tracesConnections reports whether client's transport is net/http's own,
// which calls the request's httptrace hooks for every connection it uses.
func tracesConnections(client *http.Client) bool {
	switch client.Transport.(type) {
	case nil, *http.Transport:
		return true
	}
	return false
}

// beforeConnection reports whether err is one that happens before a
// connection exists: the destination's name did not resolve, or dialing
// it failed (refused, unreachable).
func beforeConnection(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	return errors.As(err, &dnsErr) || errors.As(err, &opErr) && opErr.Op == "dial"
}

// methodLacksBody lists the methods net/http sends an empty body with as
// no body at all (it probes the body first), so that an empty, unrewindable
// body changes nothing on the wire.
func methodLacksBody(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// mayUseHTTP2 reports whether req may go out over HTTP/2: over TLS,
// where the server may pick it, or in cleartext with a transport that is
// not net/http's own or is set to speak HTTP/2 without TLS
// (Protocols.UnencryptedHTTP2). Only a cleartext request on net/http's
// own transport is known to go out over HTTP/1.
func mayUseHTTP2(client *http.Client, req *http.Request) bool {
	if req.URL == nil || !strings.EqualFold(req.URL.Scheme, "http") {
		return true
	}
	rt := client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	t, ok := rt.(*http.Transport)
	return !ok || t.Protocols != nil && t.Protocols.UnencryptedHTTP2()
}

// hasHeader reports whether h has the header name, in canonical form,
// whatever its value: net/http deems a request with an empty
// Idempotency-Key replayable too.
func hasHeader(h http.Header, name string) bool {
	_, ok := h[name]
	return ok
}

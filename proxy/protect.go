package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/knownfp"
	"github.com/opledger/opledger/internal/maskonly"
	"github.com/opledger/opledger/internal/readerr"
)

// request is the payload of a proxied operation: what the fingerprint
// covers. It holds no header but those the route compares, never a
// credential header (see Upstream.CompareHeaders); the path and query may
// hold a credential (/bot<token>/sendMessage,
// ?api_key=), and are sensitive fields like the body.
type request struct {
	Method string `json:"method"`
	// Path is the path as received: see fingerprintPath.
	Path  string `json:"path"`
	Query string `json:"query,omitempty"`
	// BodySHA256 makes the fingerprint cover the body byte for byte.
	BodySHA256 string `json:"body_sha256"`
	// Body is the request body when it is JSON, for lookup templates.
	Body json.RawMessage `json:"body,omitempty"`
	// BodyBytes is the body's length.
	BodyBytes int `json:"body_bytes"`
	// Headers are the values, in order, of the route's CompareHeaders
	// the request carries, by canonical name. Absent when it carries none,
	// so that routes without them keep their fingerprints.
	Headers map[string][]string `json:"headers,omitempty"`
}

// sensitiveFields are stored but never shown in the API, console or logs:
// the body, the query and the compared headers may carry personal data,
// and the path and the query a credential (APIs such as Telegram's carry
// a token in the path). They are masked only where an operation is
// shown: lookups and the fingerprint read the stored payload as it is.
// They are masked in the saved answer too (see Operation.MarshalJSON), whose body is at the same
// path; its Set-Cookie header is a credential (its header_bytes are
// masked whole: they may hold one, and are unreadable base64 anyway), and
// so is the upstream's identity, whose base path may hold the credential
// too; the values of a header that repeats a secret part of the request
// are shown only with those parts masked (header_masked, see
// maskedHeader). They are no part of the fingerprint, so operations
// recorded with fewer keep theirs.
var sensitiveFields = []string{"body", "query", "path", "headers", "header.Set-Cookie", "header_bytes", "upstream", "header_masked.values"}

// saved is the upstream answer kept as the operation's response and
// replayed byte for byte.
type saved struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	// HeaderBytes holds, base64-encoded, the headers with a value that
	// is not UTF-8: a JSON string would turn its bytes into U+FFFD. Such
	// a header keeps all its values here, in order, and none in Header.
	HeaderBytes map[string][][]byte `json:"header_bytes,omitempty"`
	// HeaderMasked holds the headers, of those with UTF-8 values, that
	// repeat a secret part of the request (see maskEchoes): each keeps
	// all its values here, in order, and none in Header. Answers saved
	// before it was kept have none.
	HeaderMasked []maskedHeader `json:"header_masked,omitempty"`
	Body         []byte         `json:"body"`
	BodyOmitted  bool           `json:"body_omitted,omitempty"`
	// Upstream is the identity of the API that gave the answer (host and
	// base path, see identity). It is outside the fingerprint, so keys and
	// fingerprints stay as they were; a proxy that finds another upstream
	// here refuses to replay the answer (see errOtherUpstream). Answers
	// saved before it was recorded have none and are replayed.
	Upstream string `json:"upstream,omitempty"`
}

// reconciled is the answer to a repeat of an operation whose own answer
// was lost and that the reconciler (or an operator) confirmed.
type reconciled struct {
	State          opledger.State `json:"state"`
	DestinationRef string         `json:"destination_ref"`
	Detail         string         `json:"detail"`
}

// protect handles a request of a protected method; rest is the escaped
// path after the route's prefix.
func (p *Proxy) protect(rt *route, rest string, w http.ResponseWriter, r *http.Request) {
	values := r.Header.Values(HeaderIdempotencyKey)
	if len(values) == 0 {
		if rt.AllowMissingKey {
			p.log.Info("no Idempotency-Key: passed through unprotected", "upstream", rt.Name, "method", r.Method)
			p.passThrough(rt, rest, w, r)
			return
		}
		writeProblem(w, r, http.StatusBadRequest, "idempotency_key_required",
			"a "+r.Method+" through this proxy needs an Idempotency-Key header: send the same key when you retry the same request", nil)
		return
	}
	callerKey, err := parseKey(values)
	if err != nil {
		writeProblem(w, r, http.StatusBadRequest, "invalid_idempotency_key", err.Error(), nil)
		return
	}
	key := rt.operationKey(rt.scopeDigest(r), callerKey)
	// One logger with all three: each With copies the handler.
	log := p.log.With("upstream", rt.Name, "method", r.Method, "operation", key)
	// Every answer from here on names the operation, refusals of the
	// request included, so that whoever holds a 502, a 409, a 413 or a
	// replay can find it in the ledger (if anything was recorded under
	// its key).
	w.Header().Set(HeaderOperation, key)
	if !utf8.ValidString(fingerprintPath(r.URL)) || !utf8.ValidString(r.URL.RawQuery) {
		// The payload is JSON text: invalid bytes would be recorded as
		// U+FFFD, and two different requests with the same key would have
		// the same fingerprint (a replay instead of 422).
		writeProblem(w, r, http.StatusBadRequest, "invalid_input",
			"the request's path or query holds bytes that are not UTF-8: percent-encode them (%FF); nothing was recorded or forwarded", nil)
		return
	}
	compared := comparedHeaders(rt, r)
	for _, name := range rt.compared {
		for _, v := range compared[name] {
			if !utf8.ValidString(v) {
				// As for the path: recorded as U+FFFD, two values would
				// compare equal.
				writeProblem(w, r, http.StatusBadRequest, "invalid_input",
					"the request's "+name+" header (compared by this route) holds bytes that are not UTF-8; nothing was recorded or forwarded", nil)
				return
			}
		}
	}
	body, err := readBody(w, r, rt)
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeProblem(w, r, http.StatusRequestEntityTooLarge, "payload_too_large",
				"the request body is larger than "+strconv.FormatInt(rt.MaxBodyBytes, 10)+" bytes", nil)
		case isTimeout(err):
			// The connection cannot carry another request: its body was
			// not read to its end.
			w.Header().Set("Connection", "close")
			writeProblem(w, r, http.StatusRequestTimeout, "request_timeout",
				"the request body did not arrive within "+rt.timeout.String()+" (the upstream's timeout); nothing was recorded or forwarded", nil)
		default:
			writeProblem(w, r, http.StatusBadRequest, "invalid_input", "the request body could not be read", nil)
		}
		return
	}
	dest := destinationName(rt.Name)
	payload, fp, bodyKept, err := requestPayload(r, compared, body, dest)
	if err != nil {
		p.internal(w, r, log, err)
		return
	}
	in := opledger.Intent{Key: key, Action: Action, Destination: dest, Payload: payload, Owner: rt.Owner,
		SensitiveFields: sensitiveFields}
	// The claim carries the dispatch mark: forward sends at once, so
	// from the claim on an interrupted request is uncertain, never re-sent
	// unchecked. It runs to its end even if the caller goes away, as
	// forward does: a claim committed but reported as cancelled would leave
	// a request marked dispatched that was never sent.
	// A protected retry whose window closes before the forward could
	// end (the route's timeout) is held by the claim instead.
	if err := p.pinKeyScope(r.Context(), rt, true); err != nil {
		p.keyScopeRefused(w, r, err)
		return
	}
	claimCtx := context.WithoutCancel(r.Context())
	if fp != "" {
		claimCtx = knownfp.With(claimCtx, in.Action, in.Destination, in.Payload, 1, fp)
	}
	if extra := unstoredContent(r, body, bodyKept); extra != nil {
		claimCtx = maskonly.With(claimCtx, key, extra)
	}
	claim, err := p.ledger.Claim(claimCtx, key, opledger.ClaimOptions{Intent: &in, Worker: p.cfg.Worker,
		Lease: rt.lease(), Dispatch: true, CallTimeout: rt.timeout})
	if err != nil {
		p.refused(rt, w, r, log, err)
		return
	}
	p.forward(rt, rest, w, r, log, claim, body)
}

// readBody reads a protected request's body, up to the route's
// MaxBodyBytes and within the route's timeout: a caller that announces a
// body and sends it slowly or not at all must not hold the handler (and
// a shutdown) forever. Once the whole body is read the read deadline is
// lifted, so that it does not hold for the rest of the request or the
// connection's next one; after an error it stays, so that nothing more
// is waited for on a connection that is closed after the answer. A
// ResponseWriter without deadlines (http.ErrNotSupported) reads without a
// bound. A body whose Content-Length is over the limit is refused unread.
func readBody(w http.ResponseWriter, r *http.Request, rt *route) ([]byte, error) {
	if r.ContentLength > rt.MaxBodyBytes {
		// Refused before the body is asked for: a client that sent
		// "Expect: 100-continue" is not told to send it (net/http sends
		// 100 Continue at the body's first read), and the connection,
		// whose body is left unread, is closed after the answer.
		return nil, &http.MaxBytesError{Limit: rt.MaxBodyBytes}
	}
	rc := http.NewResponseController(w)
	bounded := rc.SetReadDeadline(time.Now().Add(rt.timeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rt.MaxBodyBytes))
	if bounded && err == nil {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, err
}

// comparedHeaders are the values of rt's CompareHeaders in r as they are
// forwarded (a header the caller names in Connection is not), by
// canonical name; nil when it carries none.
func comparedHeaders(rt *route, r *http.Request) map[string][]string {
	if len(rt.compared) == 0 {
		return nil
	}
	forwarded := r.Header.Clone()
	dropHopByHop(forwarded)
	var out map[string][]string
	for _, name := range rt.compared {
		if vs := forwarded.Values(name); len(vs) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[name] = vs
		}
	}
	return out
}

// requestPayload builds the operation's payload from a request, with the
// digest of its body, and the payload's fingerprint for destination (""
// when it cannot be computed: the claim then refuses the payload as it
// would have). The fingerprint is handed to the claim (knownfp), which
// then does not canonicalize the payload a second time. bodyKept says
// whether the payload holds the body itself.
func requestPayload(r *http.Request, compared map[string][]string, body []byte, destination string) (payload json.RawMessage, fp string, bodyKept bool, err error) {
	sum := sha256.Sum256(body)
	req := request{Method: r.Method, Path: fingerprintPath(r.URL), Query: r.URL.RawQuery,
		BodySHA256: hex.EncodeToString(sum[:]), BodyBytes: len(body), Headers: compared}
	// A JSON body is kept for lookup templates when the fingerprint can
	// canonicalize it; the digest above covers the body either way.
	if len(body) > 0 && json.Valid(body) {
		req.Body = body
		payload, err := json.Marshal(req)
		if err != nil {
			return nil, "", false, err
		}
		if fp, err := opledger.Fingerprint(Action, destination, payload, 1); err == nil {
			return payload, fp, true, nil
		}
		// Only the body can keep the payload from being canonicalized:
		// the rest is strings checked to be UTF-8, a digest and a length.
		// A body that can be canonicalized on its own is kept, as it
		// always was, and the claim reports why the payload cannot.
		if _, err := opledger.Fingerprint(Action, "body", body, 1); err == nil {
			return payload, "", true, nil
		}
		req.Body = nil
	}
	payload, err = json.Marshal(req)
	if err != nil {
		return nil, "", false, err
	}
	fp, err = opledger.Fingerprint(Action, destination, payload, 1)
	if err != nil {
		return payload, "", false, nil
	}
	return payload, fp, false, nil
}

// fingerprintPath is the path recorded in the operation's payload, and so
// covered by its fingerprint. A path received with percent-escapes is
// recorded in its escaped form, the form forwarded, so that /files/a%2Fb
// and /files/a/b are different requests. A path received without any
// percent-escape is recorded, as before escaped paths were kept, as
// r.URL.Path (then the same text as received): the fingerprints of such
// requests did not change, and a retry of one recorded by an earlier
// version is still recognised as the same request. (A retry, across that
// upgrade, of a request whose path had escapes gets 422: refused, never
// forwarded twice.) The two forms cannot meet: a path received without
// escapes holds no '%', an escaped one always does.
func fingerprintPath(u *url.URL) string {
	received := u.RawPath // set whenever the path was not received in Go's own escaping
	if received == "" {
		received = u.EscapedPath()
	}
	if !strings.Contains(received, "%") {
		return u.Path
	}
	return escapedAsReceived(u)
}

// escapedAsReceived is u's path in its escaped form, as received: every
// percent-escape is kept, and a byte a path may not hold unescaped (|, {,
// }, ^, `, ", a space, a byte beyond ASCII) is escaped. Go's own
// EscapedPath drops a received form holding such a byte and escapes the
// decoded path again instead, which turns %2F into a slash:
// /files/a%2Fb|v1 would be forwarded, and recorded, as /files/a/b%7Cv1.
func escapedAsReceived(u *url.URL) string {
	raw := u.RawPath // set whenever the path was not received in Go's own escaping
	if raw == "" {
		return u.EscapedPath()
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '%' || c == '/' || strings.IndexByte("!$&'()*+,;=:@[]", c) >= 0 || url.PathEscape(string(c)) == string(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// errOtherUpstream: the saved answer came from another API than this
// upstream's: see saved.Upstream.
var errOtherUpstream = errors.New("the saved answer came from another upstream")

// refused answers a request the ledger did not let through: a replay, a
// mismatch, or a state that forbids a new forward.
func (p *Proxy) refused(rt *route, w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var (
		me *opledger.MismatchError
		se *opledger.StateError
	)
	switch {
	case errors.As(err, &me):
		log.Info("refused: same key, other request")
		compared := "method, path, query or body"
		if len(rt.compared) > 0 {
			compared = "method, path, query, body or header " + strings.Join(rt.compared, ", ")
		}
		writeProblem(w, r, http.StatusUnprocessableEntity, "fingerprint_mismatch",
			"this Idempotency-Key was used for a different request ("+compared+"); the first request is kept, nothing was forwarded. Use a new key for a new request",
			&httpapi.Problem{State: me.State})
	case errors.As(err, &se):
		op := se.Operation
		switch {
		case op != nil && (op.State == opledger.StateSucceeded ||
			op.State == opledger.StateFailed && op.FailureKind == opledger.FailureRejected) && len(op.Response) > 0:
			if err := replay(w, r, op, rt); err != nil {
				if errors.Is(err, errOtherUpstream) {
					p.otherUpstream(w, r, log, rt, op)
					return
				}
				p.internal(w, r, log, err)
				return
			}
			log.Info("replayed", "state", op.State)
		case op != nil && op.State == opledger.StateSucceeded:
			log.Info("replayed a reconciled result")
			writeReconciled(w, op)
		case se.State == opledger.StateInProgress:
			w.Header().Set("Retry-After", strconv.Itoa(p.inFlightAfter(r.Context(), rt, op)))
			writeProblem(w, r, http.StatusConflict, "in_progress",
				"the first request with this Idempotency-Key is being forwarded, or the proxy forwarding it stopped before it could say how it ended "+
					"(then it is settled when that claim's lease of "+rt.lease().String()+" runs out); retry later", &httpapi.Problem{State: se.State})
		case errors.Is(err, opledger.ErrNotDue):
			w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter(r.Context(), op)))
			writeProblem(w, r, http.StatusConflict, "not_due",
				"this request waits before it is forwarded again (the upstream asked for a pause, or could not be reached and the upstream's retry policy spaces the attempts); retry after Retry-After",
				&httpapi.Problem{State: se.State})
		default:
			if se.State == opledger.StateUncertain {
				w.Header().Set("Retry-After", strconv.Itoa(p.checkAfter(r.Context(), op)))
			}
			writeProblem(w, r, http.StatusConflict, "invalid_state", stateDetail(rt, se.State, op), &httpapi.Problem{State: se.State})
		}
	case errors.Is(err, opledger.ErrInvalidInput):
		writeProblem(w, r, http.StatusBadRequest, "invalid_input", err.Error(), nil)
	default:
		p.internal(w, r, log, err)
	}
}

// retryAfter is how many seconds remain before op is due again (at
// least 1), or InFlightRetryAfter when that cannot be told.
func (p *Proxy) retryAfter(ctx context.Context, op *opledger.Operation) int {
	if op != nil && op.NotBefore != nil {
		if now, err := p.ledger.Now(ctx); err == nil {
			return httpapi.RetryAfterSeconds(now, *op.NotBefore)
		}
	}
	return p.cfg.InFlightRetryAfter
}

// inFlightAfter is a Retry-After for a repeat of an operation in
// progress: InFlightRetryAfter while its forward may still be running
// (claimed less than the route's timeout ago, or its lease extended less
// than an extension's interval ago, as a relay of a large answer extends
// it), and once that is past, the seconds until its lease runs out: the
// proxy that claimed it stopped before it could record the end, and the
// repeat can be answered only once the lease is settled.
func (p *Proxy) inFlightAfter(ctx context.Context, rt *route, op *opledger.Operation) int {
	if op == nil || op.LeaseExpiresAt == nil {
		return p.cfg.InFlightRetryAfter
	}
	// The lease was taken or last extended at its end less the lease;
	// a proxy still forwarding extends it again within the interval (a
	// couple of seconds allowed for the write).
	live := max(rt.timeout, leaseRenewal(rt.lease())) + 2*time.Second
	now, err := p.ledger.Now(ctx)
	if err != nil || now.Before(op.LeaseExpiresAt.Add(-rt.lease()).Add(live)) {
		return p.cfg.InFlightRetryAfter
	}
	return max(p.cfg.InFlightRetryAfter, httpapi.RetryAfterSeconds(now, *op.LeaseExpiresAt))
}

// checkAfter is a Retry-After for a repeat of an uncertain operation: the
// reconciler's next pass after the operation's next check (NotBefore,
// set when a lookup failed and the reconciler backs off).
func (p *Proxy) checkAfter(ctx context.Context, op *opledger.Operation) int {
	n := int(p.cfg.ReconcileInterval.Round(time.Second)/time.Second) + 1
	if op != nil && op.NotBefore != nil {
		if now, err := p.ledger.Now(ctx); err == nil && op.NotBefore.After(now) {
			n += httpapi.RetryAfterSeconds(now, *op.NotBefore)
		}
	}
	return n
}

// stateDetail explains a state that forbids forwarding a repeat to rt; op
// is the operation, when the refusal carries it.
func stateDetail(rt *route, s opledger.State, op *opledger.Operation) string {
	switch s {
	case opledger.StateUncertain:
		const what = "the upstream may or may not have acted on the first request with this Idempotency-Key (its answer was lost, timed out, or was a 5xx that does not say); "
		if rt.Lookup == nil && rt.Idempotency == nil && rt.UniqueReference == nil {
			return what + "this upstream declares no lookup, idempotency key or unique reference, so the reconciler will hold it for a person (opledger ops list --state held). Nothing is forwarded again"
		}
		return what + "the reconciler is finding out. Nothing is forwarded again until it knows; retry later"
	case opledger.StateHeld:
		return "whether the upstream acted on the first request with this Idempotency-Key cannot be decided automatically; the operation waits for a person (opledger ops list --state held). Nothing is forwarded again"
	case opledger.StateFailed:
		why := "retries exhausted or cancelled"
		if op != nil {
			switch op.FailureKind {
			case opledger.FailureRejected:
				// Its answer is replayed, unless retention compacted it.
				why = "the upstream refused it with a 4xx answer, no longer kept"
			case opledger.FailureExhausted:
				why = "its attempts were used up"
			case opledger.FailureCancelled:
				why = "an operator cancelled it"
			}
		}
		return "the first request with this Idempotency-Key failed and will not be forwarded again (" + why + "); use a new key"
	}
	return "the operation behind this Idempotency-Key is " + string(s)
}

// otherUpstream refuses to replay an answer saved by a proxy forwarding to
// another API under the same upstream name: two proxies sharing a store
// with the same name (both --upstream, named "upstream" by default), or
// this upstream's url changed. Nothing is forwarded.
func (p *Proxy) otherUpstream(w http.ResponseWriter, r *http.Request, log *slog.Logger, rt *route, op *opledger.Operation) {
	var s saved
	_ = json.Unmarshal(op.Response, &s)
	log.Error("refused: the saved answer came from another upstream under the same name; give each upstream of a shared store its own name",
		"saved_by", loggedIdentity(s.Upstream), "this_upstream", loggedIdentity(rt.identity))
	writeProblem(w, r, http.StatusInternalServerError, "upstream_conflict",
		"the request recorded under this Idempotency-Key was answered by another API than this proxy's upstream "+
			"(a proxy sharing this ledger uses the same upstream name for another URL, or the upstream's url was changed); "+
			"its answer is not replayed and nothing was forwarded. The proxy's operator must give each upstream its own name",
		&httpapi.Problem{State: op.State})
}

// loggedIdentity is an upstream identity for a log line: its host, and
// a digest of its base path, which may hold a credential (a bot token).
func loggedIdentity(id string) string {
	host, path, ok := strings.Cut(id, "/")
	if !ok {
		return host
	}
	sum := sha256.Sum256([]byte(path))
	return host + "/(path sha256 " + hex.EncodeToString(sum[:6]) + ")"
}

// forward sends the claimed request to the upstream and records the
// outcome. It finishes even if the caller goes away: a request that may
// have reached the upstream must have its answer recorded. rest is the
// escaped path after the route's prefix.
func (p *Proxy) forward(rt *route, rest string, w http.ResponseWriter, r *http.Request, log *slog.Logger, claim *opledger.Claim, body []byte) {
	ctx := context.WithoutCancel(r.Context())
	// The time spent waiting for the upstream is bounded by the route's
	// timeout; time spent relaying a large answer to the caller is not
	// (see upstreamClock and relay).
	callCtx, clock := startClock(ctx, rt.timeout)
	defer clock.stop()
	out, err := http.NewRequestWithContext(callCtx, r.Method, rt.target(rest, r.URL.RawQuery).String(), bytes.NewReader(body))
	if err != nil {
		// Nothing was sent: give the attempt back as retryable.
		if _, ok := p.report(ctx, w, r, log, claim, opledger.Report{Outcome: opledger.OutcomeRetryable,
			Error: "build the upstream request: " + err.Error()}, false); ok {
			writeProblem(w, r, http.StatusInternalServerError, "internal", "the request could not be forwarded; nothing was sent", nil)
		}
		return
	}
	forwardHeaders(out, r)
	if rt.idemHdr != "" {
		out.Header.Set(rt.idemHdr, claim.IdempotencyKey)
	}
	resp, sendErr := destination.SendHTTP(rt.client, out, destination.HTTPPolicy{ExistsStatus: existsStatus(rt), UncertainStatuses: rt.UncertainStatuses})
	if resp == nil {
		p.lost(ctx, w, r, log, claim, sendErr)
		return
	}
	// From here on the upstream answered: a failure to record the outcome
	// must not tell the caller that nothing was forwarded.
	defer resp.Body.Close()
	// One byte more than the limit tells an answer over it; at the
	// largest limit there is none more to read (the sum would wrap
	// around to a limit that reads nothing).
	answer, readErr := io.ReadAll(io.LimitReader(resp.Body, rt.MaxResponseBytes+min(1, math.MaxInt64-rt.MaxResponseBytes)))
	// The clock runs again only while the rest of a large answer is
	// awaited (clock.reader): recording the outcome, which comes first
	// for an answer that is not a 2xx, is the proxy's own work.
	clock.pause()
	if readErr != nil {
		p.lost(ctx, w, r, log, claim, opledger.Uncertain(&destination.SendError{Method: out.Method, Host: out.URL.Host, Written: true, Err: readErr}))
		return
	}
	s := &saved{Status: resp.StatusCode, Body: answer, Upstream: rt.identity}
	s.Header, s.HeaderBytes = responseHeaders(resp.Header)
	s.maskEchoes(echoSecrets(rt, r))
	oversized := int64(len(answer)) > rt.MaxResponseBytes
	if oversized {
		s.Body, s.BodyOmitted = nil, true
	}
	outcome, retryAfter := opledger.OutcomeSucceeded, time.Duration(0)
	if sendErr != nil {
		outcome, retryAfter = opledger.OutcomeOf(sendErr)
	}
	if outcome == opledger.OutcomeRejected && resp.StatusCode == http.StatusUnauthorized && !claim.Protected &&
		rt.credHdr != DefaultCredentialHeader {
		// The upstream did not take the caller's credential, so it did
		// nothing: not a decision to replay for ever to a scope that
		// outlives the credential (credential_header: an account's
		// header, while the access token is refreshed). The caller
		// sends the request again with a fresh token. Scoped by the
		// whole Authorization header, a fresh token is another key
		// anyway, and the 401 is decided as any 4xx is.
		outcome = opledger.OutcomeRetryable
	}
	if oversized && outcome == opledger.OutcomeSucceeded {
		p.forwardLarge(ctx, rt, w, r, log, claim, out, s, answer, resp.Body, clock)
		return
	}
	rep := opledger.Report{Outcome: outcome, RetryAfter: retryAfter}
	switch outcome {
	case opledger.OutcomeSucceeded, opledger.OutcomeRejected:
		if rep.Response, err = json.Marshal(s); err != nil {
			p.unrecorded(w, r, log, err)
			return
		}
		if outcome == opledger.OutcomeSucceeded {
			rep.DestinationRef = refOf(rt, bytes.NewReader(answer), claim)
		} else {
			rep.Error = opledger.ErrorText(sendErr)
		}
	default:
		rep.Error = opledger.ErrorText(sendErr)
	}
	op, ok := p.report(ctx, w, r, log, claim, rep, true)
	if !ok {
		return
	}
	log.Info("forwarded", "status", resp.StatusCode, "outcome", outcome, "state", op.State, "protected", claim.Protected)
	if outcome == opledger.OutcomeUncertain || op.State == opledger.StateHeld || op.State == opledger.StateUncertain ||
		outcome == opledger.OutcomeRetryable && op.State != opledger.StatePending {
		// Not decided: the upstream may have acted (a 4xx to a protected
		// retry of an uncertain request is held, not failed; a 429 to it
		// leaves the first request uncertain). A caller must not take the
		// answer for the last word. Nor a retryable answer (429, 503)
		// that used up the upstream's retry policy for its Retry-After's
		// leave to repeat: the operation is failed, and a repeat is
		// refused (409, state failed).
		w.Header().Set(HeaderState, string(op.State))
	}
	if outcome == opledger.OutcomeRetryable && op.State == opledger.StatePending && op.NotBefore != nil {
		if now, err := p.ledger.Now(ctx); err == nil && op.NotBefore.After(now) {
			// The retry policy may space the attempts beyond the
			// upstream's Retry-After (or give one where it gave none): a
			// repeat before then is refused (not_due), so say when.
			// Whole seconds both: an upstream's wait as long is passed
			// on as it was sent (an HTTP date stays one).
			if wait := httpapi.RetryAfterSeconds(now, *op.NotBefore); wait > int((retryAfter+time.Second-1)/time.Second) {
				s.setHeader("Retry-After", strconv.Itoa(wait))
			}
		}
	}
	if !oversized {
		writeAnswer(w, r, s, answer, rt.timeout)
		return
	}
	// An answer too large to save, not a 2xx: its outcome is recorded;
	// it is passed on as it arrives, and broken off rather than ended as
	// if complete when either side fails.
	s.addHeaders(w)
	w.WriteHeader(s.Status)
	rl := newRelay(w, r, rt.timeout)
	_, copyErr := io.Copy(rl, io.MultiReader(bytes.NewReader(answer), clock.reader(resp.Body)))
	if err := rl.finish(); copyErr != nil || err != nil {
		log.Warn("the answer broke off on its way to the caller; breaking off the caller's answer",
			"upstream_error", errText(copyErr), "caller_error", errText(err))
		panic(http.ErrAbortHandler)
	}
}

// errText is err's text, or "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// forwardLarge finishes a forward whose 2xx answer is larger than
// MaxResponseBytes: head is its first bytes, already read, body the rest.
// The answer is passed to the caller as it arrives (see relay), and its
// reference read from the whole of it on the way (ScanRef holds neither);
// only then is the outcome recorded, with the status and headers as the
// saved answer, not the body. The upstream's 2xx decides the outcome: a
// caller that stops taking the answer (it went away, or took nothing for
// the route's timeout) does not make the operation uncertain, and the
// upstream's answer is still read to its end for the reference. If the
// upstream's body breaks off (then the operation is uncertain, as for a
// smaller answer), the ledger cannot record the outcome (then it stays
// in_progress and becomes uncertain when its lease ends) or the caller
// did not take the whole answer, the connection to the caller is broken
// off, so that no caller takes a partial or unrecorded answer for a
// complete one.
func (p *Proxy) forwardLarge(ctx context.Context, rt *route, w http.ResponseWriter, r *http.Request, log *slog.Logger, claim *opledger.Claim,
	out *http.Request, s *saved, head []byte, body io.Reader, clock *upstreamClock) {
	// A slow caller may take longer than the lease: it is extended while
	// the answer is relayed, so that the operation stays in progress (a
	// repeat gets 409) and never turns uncertain under a forward that is
	// still running.
	stopLease := p.keepLease(ctx, log, claim, rt.lease())
	defer stopLease()
	s.addHeaders(w)
	w.WriteHeader(s.Status)
	up := &readerr.Reader{R: clock.reader(body)}
	rl := newRelay(w, r, rt.timeout)
	in := io.TeeReader(io.MultiReader(bytes.NewReader(head), up), rl)
	ref := refOf(rt, in, claim)
	_, _ = io.Copy(io.Discard, in) // whatever follows the document, or the rest of what is not JSON
	relayErr := rl.finish()
	stopLease()
	rep := opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: ref}
	if up.Err != nil {
		lost := opledger.Uncertain(&destination.SendError{Method: out.Method, Host: out.URL.Host, Written: true, Err: up.Err})
		rep = opledger.Report{Outcome: opledger.OutcomeUncertain, Error: opledger.ErrorText(lost)}
	} else {
		var err error
		if rep.Response, err = json.Marshal(s); err != nil {
			log.Error("could not record the outcome; breaking off the answer", "error", err)
			panic(http.ErrAbortHandler)
		}
	}
	op, err := p.ledger.Report(ctx, claim.Operation.Key, claim.AttemptID, claim.FencingToken, rep)
	var stale *opledger.StaleError
	if errors.As(err, &stale) {
		op, err = stale.Operation, nil
	}
	if err != nil {
		log.Error("could not record the outcome; breaking off the answer", "error", err)
		panic(http.ErrAbortHandler)
	}
	log.Info("forwarded", "status", s.Status, "outcome", rep.Outcome, "state", op.State, "protected", claim.Protected,
		"body_omitted", true, "relayed", relayErr == nil)
	if relayErr != nil {
		log.Warn("the caller did not take the whole answer; its connection is broken off", "error", relayErr)
	}
	if up.Err != nil || relayErr != nil {
		panic(http.ErrAbortHandler)
	}
}

// leaseRenewal is how often keepLease extends a lease: every third of it,
// unless a test set leaseRenewalForTests.
func leaseRenewal(lease time.Duration) time.Duration {
	if d := leaseRenewalForTests.Load(); d > 0 {
		return time.Duration(d)
	}
	return lease / 3
}

// leaseRenewalForTests, when set, is leaseRenewal's interval.
var leaseRenewalForTests atomic.Int64

// keepLease extends claim's lease to lease from now, at once and then
// every leaseRenewal, until the returned stop (which may be called again)
// is called. It gives up once the ledger refuses (the lease ran out
// meanwhile: the operation is uncertain, and the report that follows is
// kept as a late one).
func (p *Proxy) keepLease(ctx context.Context, log *slog.Logger, claim *opledger.Claim, lease time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(leaseRenewal(lease))
		defer tick.Stop()
		for first := true; ; first = false {
			if !first { // the first extension at once: the wait for the upstream used part of the lease
				select {
				case <-done:
					return
				case <-tick.C:
				}
			}
			if _, err := p.ledger.ExtendLease(ctx, claim.Operation.Key, claim.AttemptID, claim.FencingToken, lease); err != nil {
				log.Warn("could not extend the lease while relaying a large answer", "error", err)
				var stale *opledger.StaleError
				if errors.As(err, &stale) {
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// upstreamClock bounds the time spent waiting for the upstream to a
// route's timeout: it cancels its context, with context.DeadlineExceeded
// as the cause (what net/http then returns), once that much time has
// passed outside pauses. It runs from the start of the forward until the
// answer's first bytes are read; an answer relayed as it arrives is then
// read through reader, which runs the clock only while it waits for the
// upstream, so that neither a slow caller nor the proxy's own work uses
// up the upstream's time.
type upstreamClock struct {
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  *time.Timer
	left   time.Duration // what remained at since; 0 once run out
	since  time.Time     // when it last started
	paused bool
	// frozen: paused for good (freeze); resume does nothing.
	frozen bool
}

// startClock returns a context of ctx that the clock cancels once d has
// passed outside pauses.
func startClock(ctx context.Context, d time.Duration) (context.Context, *upstreamClock) {
	ctx, cancel := context.WithCancelCause(ctx)
	c := &upstreamClock{cancel: cancel, left: d, since: time.Now()}
	c.timer = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, c
}

// pause stops the clock until resume.
func (c *upstreamClock) pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		return
	}
	c.paused = true
	if !c.timer.Stop() {
		c.left = 0 // it has run out
		return
	}
	// At least 1ns, so that resume restarts a clock that was about to run
	// out, rather than taking it for one that has.
	c.left = max(c.left-time.Since(c.since), 1)
}

// freeze stops the clock for good: a resume after it does nothing.
func (c *upstreamClock) freeze() {
	c.pause()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
}

// resume restarts a paused clock with the time that was left.
func (c *upstreamClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused || c.frozen {
		return
	}
	c.paused = false
	if c.left > 0 { // else it has run out: the context is cancelled
		c.since = time.Now()
		c.timer.Reset(c.left)
	}
}

// reader returns r read with the clock running, and paused between
// reads.
func (c *upstreamClock) reader(r io.Reader) io.Reader { return &clockedReader{r: r, c: c} }

type clockedReader struct {
	r io.Reader
	c *upstreamClock
}

func (cr *clockedReader) Read(b []byte) (int, error) {
	cr.c.resume()
	defer cr.c.pause()
	return cr.r.Read(b)
}

// stop stops the clock and cancels its context.
func (c *upstreamClock) stop() {
	c.timer.Stop()
	c.cancel(context.Canceled)
}

// relay writes an answer to the caller as it arrives. A caller that
// takes nothing of it for the route's timeout cannot hold the handler
// forever: each write has a write deadline of the timeout, moved on
// whenever the caller acknowledges more of the answer (see progress), so
// that a caller reading steadily, however slowly, is never cut off while
// a write waits on a kernel send buffer of megabytes. After a failed
// write it keeps the error and discards the rest: a caller that went
// away must not stop the proxy from reading the upstream's answer to its
// end. Its Write never fails.
type relay struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	err     error
	// conn is the caller's connection (ConnContext), nil when not known
	// or its progress cannot be read: each write then has the timeout.
	conn    net.Conn
	ctx     context.Context
	watch   *progress
	written int64 // bytes given to Write so far
}

// watchFrom is how much of an answer a relay writes before it watches the
// caller's progress: less fits the kernel's first send buffer, and is
// written without waiting on a steady caller.
const watchFrom = 256 << 10

func newRelay(w http.ResponseWriter, r *http.Request, timeout time.Duration) *relay {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if r.ProtoMajor != 1 {
		// An HTTP/2 connection carries other streams: its deadline is not
		// this answer's to move (each stream's write deadline is its own).
		c = nil
	}
	return &relay{w: w, rc: http.NewResponseController(w), timeout: timeout, conn: c, ctx: r.Context()}
}

func (r *relay) Write(b []byte) (int, error) {
	if r.err == nil {
		// Not every ResponseWriter supports deadlines (ErrNotSupported);
		// net/http's servers do.
		_ = r.rc.SetWriteDeadline(time.Now().Add(r.timeout))
		if r.written += int64(len(b)); r.watch == nil && r.conn != nil && r.written > watchFrom {
			r.watch = watchProgress(r.ctx, r.conn, r.timeout)
		}
		if _, err := r.w.Write(b); err != nil {
			r.err = err
		}
	}
	return len(b), nil
}

// finish sends what the ResponseWriter still buffers, within the same
// deadline, then lifts the deadline (it would otherwise hold for the
// connection's next request). It returns the first error of the relay.
func (r *relay) finish() error {
	if r.err == nil {
		_ = r.rc.SetWriteDeadline(time.Now().Add(r.timeout))
		if err := r.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			r.err = err
		}
	}
	r.watch.stop() // before the deadline is lifted, which it would set again
	if r.err == nil {
		_ = r.rc.SetWriteDeadline(time.Time{})
	}
	return r.err
}

// refOf is the effect's reference: read from the answer at the upstream's
// Ref as it streams by (ScanRef, which keeps nothing else of it, so a
// saved answer and one too large to save are read the same way), or the
// attempt id when the answer has none the ledger can store (ScanRef
// returns none longer than the ledger's limit, with a NUL byte or not
// UTF-8; the ledger would refuse the whole report for it).
func refOf(rt *route, answer io.Reader, claim *opledger.Claim) string {
	if ref, ok := rt.dest.ScanRef(answer); ok {
		return ref
	}
	return "attempt:" + claim.AttemptID
}

func existsStatus(rt *route) int {
	if c := rt.dest.Capabilities().UniqueReference; c != nil {
		return c.ConflictStatus
	}
	return 0
}

// lost records a request that got no answer and tells the caller.
func (p *Proxy) lost(ctx context.Context, w http.ResponseWriter, r *http.Request, log *slog.Logger, claim *opledger.Claim, sendErr error) {
	outcome, retryAfter := opledger.OutcomeOf(sendErr)
	op, ok := p.report(ctx, w, r, log, claim, opledger.Report{Outcome: outcome, RetryAfter: retryAfter, Error: opledger.ErrorText(sendErr)},
		outcome == opledger.OutcomeUncertain)
	if !ok {
		return
	}
	log.Info("no answer from the upstream", "outcome", outcome, "state", op.State, "timeout", isTimeout(sendErr))
	if outcome != opledger.OutcomeUncertain {
		if op.State == opledger.StatePending && op.NotBefore != nil {
			if now, err := p.ledger.Now(ctx); err == nil && op.NotBefore.After(now) {
				// The retry policy spaces the attempts: a repeat before
				// then is refused (not_due), so say when.
				w.Header().Set("Retry-After", strconv.Itoa(httpapi.RetryAfterSeconds(now, *op.NotBefore)))
			}
		}
		writeProblem(w, r, http.StatusBadGateway, "upstream_unreachable", unreachableDetail(op.State),
			&httpapi.Problem{State: op.State})
		return
	}
	status, what := http.StatusBadGateway, "the connection to the upstream broke"
	if isTimeout(sendErr) {
		status, what = http.StatusGatewayTimeout, "the upstream did not answer in time"
	}
	w.Header().Set(HeaderState, string(op.State))
	writeProblem(w, r, status, "upstream_response_lost",
		what+" after the request was sent, so it may or may not have acted. The operation is "+string(op.State)+
			": the reconciler will look it up or hold it for a person. A retry with the same Idempotency-Key and the same credential gets the result once it is known; "+
			"it is never forwarded again unprotected. Keys are scoped per credential: a retry with another credential (such as a refreshed access token) is a new request, and is forwarded",
		&httpapi.Problem{State: op.State})
}

// unreachableDetail explains an upstream that could not be reached, by
// the state the operation is now in.
func unreachableDetail(s opledger.State) string {
	const what = "the upstream could not be reached; nothing was sent. "
	switch s {
	case opledger.StatePending:
		return what + "Retrying with the same Idempotency-Key is safe: it is forwarded again"
	case opledger.StateFailed:
		return what + "The operation has failed (its retries are exhausted, or its deadline has passed) and is not forwarded again; use a new Idempotency-Key"
	}
	return what + "The operation is " + string(s)
}

// report records the attempt's outcome. On failure it answers 500 and
// returns false; forwarded tells whether the request may have reached the
// upstream, for that answer.
func (p *Proxy) report(ctx context.Context, w http.ResponseWriter, r *http.Request, log *slog.Logger, claim *opledger.Claim,
	rep opledger.Report, forwarded bool) (*opledger.Operation, bool) {
	op, err := p.ledger.Report(ctx, claim.Operation.Key, claim.AttemptID, claim.FencingToken, rep)
	if err != nil {
		var stale *opledger.StaleError
		if errors.As(err, &stale) {
			op = stale.Operation
		} else if forwarded {
			p.unrecorded(w, r, log, err)
			return nil, false
		} else {
			p.internal(w, r, log, err)
			return nil, false
		}
	}
	return op, true
}

// unrecorded answers 500 for a request that was forwarded (the upstream
// may have acted) but whose outcome the ledger could not record.
func (p *Proxy) unrecorded(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	log.Error("could not record the outcome of a forwarded request", "error", err)
	writeProblem(w, r, http.StatusInternalServerError, "internal",
		"the request was forwarded to the upstream, which may have acted on it, but the ledger could not record the outcome; "+
			"its answer is not passed on. The operation becomes uncertain when its lease ends and is never forwarded again unchecked: "+
			"retry later with the same Idempotency-Key and the same credential", nil)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// internal answers 500 for a ledger failure before anything was
// forwarded, logged without details of the request; 503 for a store
// that is busy (another process's lock), full or unreachable (the
// PostgreSQL server down, or the network to it), which a retry of the
// same request may get past, or that a newer release has migrated.
func (p *Proxy) internal(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	switch {
	case errors.Is(err, opledger.ErrStoreBusy):
		log.Warn("request refused: the ledger is busy", "error", err)
		w.Header().Set("Retry-After", httpapi.StoreBusyRetryAfter)
		writeProblem(w, r, http.StatusServiceUnavailable, "store_busy",
			"the ledger is busy with another process's write; nothing was forwarded: retry later with the same Idempotency-Key", nil)
		return
	case errors.Is(err, opledger.ErrStoreUnavailable):
		log.Warn("request refused: the ledger's database could not be reached", "error", err)
		w.Header().Set("Retry-After", httpapi.StoreUnavailableRetryAfter)
		writeProblem(w, r, http.StatusServiceUnavailable, "unavailable",
			"the ledger's database could not be reached; nothing was forwarded: retry later with the same Idempotency-Key", nil)
		return
	case errors.Is(err, opledger.ErrStoreFull):
		log.Error("request refused: the ledger's disk is full", "error", err)
		writeProblem(w, r, http.StatusServiceUnavailable, "store_full",
			"the ledger's disk is full; nothing was forwarded", nil)
		return
	case errors.Is(err, opledger.ErrSchemaNewer):
		log.Error("request refused: a newer release has migrated the ledger", "error", err)
		writeProblem(w, r, http.StatusServiceUnavailable, "schema_newer",
			"a newer release of opledger has migrated the ledger, and this proxy records nothing more; nothing was forwarded: "+
				"send the request to a proxy of the newer release, with the same Idempotency-Key", nil)
		return
	}
	log.Error("request failed", "error", err)
	writeProblem(w, r, http.StatusInternalServerError, "internal",
		"the ledger could not record the request; nothing was forwarded unless the log says otherwise", nil)
}

// replay writes a saved answer again, unless it came from another API
// than rt's upstream (errOtherUpstream).
func replay(w http.ResponseWriter, r *http.Request, op *opledger.Operation, rt *route) error {
	var s saved
	if err := json.Unmarshal(op.Response, &s); err != nil {
		return errors.New("the saved response of " + op.Key + " is not a proxy response")
	}
	if s.Upstream != "" && s.Upstream != rt.identity {
		return errOtherUpstream
	}
	w.Header().Set(HeaderReplayed, "true")
	if s.BodyOmitted {
		w.Header().Set(HeaderBodyOmitted, "true")
	}
	writeAnswer(w, r, &s, s.Body, rt.timeout)
	return nil
}

// writeReconciled answers a repeat of a succeeded operation whose original
// answer the ledger does not have: confirmed by a lookup or an operator, or
// compacted by retention.
func writeReconciled(w http.ResponseWriter, op *opledger.Operation) {
	detail := "the upstream's answer to the first request did not settle it (the answer was lost, or said that the record exists already); the effect was confirmed, by a lookup at the upstream or by an operator, under this reference"
	if op.Tombstoned {
		detail = "the upstream's original response has passed the ledger's retention period; the effect is recorded under this reference"
	}
	w.Header().Set(HeaderReplayed, "true")
	w.Header().Set(HeaderState, string(op.State))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(reconciled{State: op.State, DestinationRef: op.DestinationRef, Detail: detail})
}

// addHeaders adds the headers of a saved or forwarded answer to w's,
// but for the proxy's own (ownHeaders): an upstream's Idempotent-Replayed
// (its replay of a re-forward under its idempotency key) would stand
// beside, or for, the proxy's. An answer without a Content-Type goes
// without one: net/http would otherwise guess one from the body.
func (s *saved) addHeaders(w http.ResponseWriter) {
	add := func(k, v string) {
		if !slices.Contains(ownHeaders, http.CanonicalHeaderKey(k)) {
			w.Header().Add(k, v)
		}
	}
	for k, vs := range s.Header {
		for _, v := range vs {
			add(k, v)
		}
	}
	for k, vs := range s.HeaderBytes {
		for _, v := range vs {
			add(k, string(v))
		}
	}
	for _, h := range s.HeaderMasked {
		for _, v := range h.Values {
			add(h.Name, v)
		}
	}
	if _, ok := w.Header()["Content-Type"]; !ok {
		w.Header()["Content-Type"] = nil
	}
}

// setHeader gives an answer not saved the header name with the one
// value v, in place of the upstream's values of it.
func (s *saved) setHeader(name, v string) {
	name = http.CanonicalHeaderKey(name)
	delete(s.HeaderBytes, name)
	s.HeaderMasked = slices.DeleteFunc(s.HeaderMasked, func(h maskedHeader) bool { return http.CanonicalHeaderKey(h.Name) == name })
	if s.Header == nil {
		s.Header = http.Header{}
	}
	s.Header[name] = []string{v}
}

// ownHeaders are the headers of the proxy's protocol: on an answer to a
// protected request only the proxy sets them.
var ownHeaders = []string{HeaderReplayed, HeaderOperation, HeaderState, HeaderBodyOmitted}

// writeAnswer writes an upstream answer held whole: s's status and
// headers, and body.
func writeAnswer(w http.ResponseWriter, r *http.Request, s *saved, body []byte, timeout time.Duration) {
	s.addHeaders(w)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(s.Status)
	// The outcome is recorded already; a caller that takes nothing for
	// the route's timeout must not hold the handler forever.
	rl := newRelay(w, r, timeout)
	_, _ = rl.Write(body)
	_ = rl.finish()
}

// hopByHop are the headers that concern one connection (RFC 9110 section
// 7.6.1), never forwarded or saved.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// dropHopByHop removes hop-by-hop headers, including those named by
// Connection.
func dropHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range bytes.Split([]byte(v), []byte(",")) {
			h.Del(string(bytes.TrimSpace(name)))
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// forwardHeaders sets out's headers to the caller's headers of in as sent
// upstream: everything but hop-by-hop headers, the caller's
// Idempotency-Key (which is the proxy's, and may carry personal data),
// Accept-Encoding and Expect. Authorization passes untouched. The forwarding headers
// are set exactly as for a request passed through (see setXForwarded).
// None of these headers enters the operation's payload or fingerprint.
func forwardHeaders(out, in *http.Request) {
	h := in.Header.Clone()
	dropHopByHop(h)
	h.Del(HeaderIdempotencyKey)
	// The transport then asks for gzip itself and decodes the answer: the
	// reference is read from, and the answer saved and replayed as, the
	// decoded body.
	h.Del("Accept-Encoding")
	// The proxy has read the whole body, and answered the caller's
	// "Expect: 100-continue" itself (net/http sends the 100 as the body
	// is read): passed on, it would only make the transport wait for the
	// upstream's 100, and an upstream that takes no expectations answers
	// 417, which would be saved and replayed as the request's decision.
	h.Del("Expect")
	out.Header = h
	setXForwarded(out, in)
}

// forwardingHeaders are the headers by which a caller could claim another
// client address, host, port or scheme (the standard ones, and those
// load balancers and CDNs write, which upstream frameworks read for the
// client's address); never passed on as the caller sent them.
var forwardingHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
	"X-Forwarded-Port", "X-Forwarded-Scheme", "X-Forwarded-Ssl", "X-Real-Ip", "True-Client-Ip", "Client-Ip",
	"X-Client-Ip", "X-Cluster-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip"}

// setXForwarded replaces whatever forwarding headers the caller sent with
// the proxy's own, exactly as httputil.ReverseProxy with Rewrite and
// ProxyRequest.SetXForwarded do for a request passed through: Forwarded
// is dropped, X-Forwarded-For is the address of the caller's connection,
// X-Forwarded-Host the request's Host and X-Forwarded-Proto http or https.
// A caller cannot forge its address on a protected request.
func setXForwarded(out, in *http.Request) {
	for _, name := range forwardingHeaders {
		out.Header.Del(name)
	}
	(&httputil.ProxyRequest{In: in, Out: out}).SetXForwarded()
}

// responseHeaders are the upstream's headers as saved and replayed:
// those whose values are all UTF-8, and apart, as bytes, those with a
// value that is not (see saved.HeaderBytes).
func responseHeaders(in http.Header) (http.Header, map[string][][]byte) {
	h := in.Clone()
	dropHopByHop(h)
	h.Del("Content-Length")
	var raw map[string][][]byte
	for k, vs := range h {
		if !slices.ContainsFunc(vs, func(v string) bool { return !utf8.ValidString(v) }) {
			continue
		}
		if raw == nil {
			raw = map[string][][]byte{}
		}
		for _, v := range vs {
			raw[k] = append(raw[k], []byte(v))
		}
		delete(h, k)
	}
	return h, raw
}

// writeProblem writes a problem with httpapi's stable types.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, kind, detail string, p *httpapi.Problem) {
	httpapi.WriteProblem(w, r, status, kind, detail, p)
}

// Package client is a small Go client for the opledger HTTP API. The CLI
// and the tests use it; automations written in Go can too.
//
// Errors from the API come back as *Error, which carries the RFC 9457
// problem and matches the opledger sentinels with errors.Is
// (opledger.ErrFingerprintMismatch, opledger.ErrInProgress, ...). Any
// answer outside 2xx is an *Error, also one from a proxy or load balancer
// in front of the server, and a 301, 302 or 303 to a write, which the
// http.Client would follow with a GET without the body (nothing is
// written): its Retry-After (Error.RetryAfter) and
// X-Request-Id (Error.RequestID) are kept, so that a caller can honour the
// back-off it asks for. Keys, attempt ids and names a path needs are
// checked before anything is sent: a malformed key matches
// opledger.ErrInvalidKey, an empty attempt id, and an event's source or id
// or a step's name that is empty or outside the key syntax,
// opledger.ErrInvalidInput.
//
// A program moved from the library to the client keeps what it relied
// on of the library's errors where the problem carries it:
// opledger.OperationOf gives the operation a refusal concerns (Error's
// Operation), and errors.As finds in an *Error the *opledger.StateError
// or *opledger.StaleError the library would have returned (Error.As);
// a *ReplayError is the *opledger.StateError of a claim of a succeeded
// operation.
//
// A Client made by New with a nil *http.Client gives up on a request after
// 30 seconds. Response bodies are read up to MaxResponseBytes (64 MiB); a
// larger one is an error, never cut short and decoded.
package client

// Allowed imports: opledger, httpapi (for the problem type),
// internal/opjson (to encode as the API does), internal/textcut, the
// standard library.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/opjson"
	"github.com/opledger/opledger/internal/textcut"
)

// Client calls one opledger server with one token.
type Client struct {
	base  string
	token string
	http  *http.Client
	// baseErr is why base cannot be used (checkBaseURL), returned by
	// every call before anything is sent.
	baseErr error
}

// New returns a client for the server at baseURL (e.g.
// "http://127.0.0.1:8080", or with the path prefix a reverse proxy serves
// the API under) using the bearer token. A nil httpClient means
// one with a 30 s timeout that keeps up to 64 idle connections to the
// server, so that many goroutines can share one Client.
//
// A baseURL the client cannot use as given (without http:// or https://,
// without a host, with a port out of range, a user, a query or a
// fragment) makes every call fail, before anything is sent, with an error
// matching opledger.ErrInvalidInput that says what is wrong without
// quoting it (a URL may hold a password).
func New(baseURL, token string, httpClient *http.Client) *Client {
	if httpClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		httpClient = &http.Client{Timeout: 30 * time.Second, Transport: tr}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: httpClient, baseErr: checkBaseURL(baseURL)}
}

// checkBaseURL refuses a base URL that names no server the client can
// reach as given (BaseURLProblem): without it, a missing scheme failed
// each call with net/url's "first path segment in URL cannot contain
// colon", a query made every path part of the query, and a user was
// silently replaced by the bearer token.
func checkBaseURL(base string) error {
	if problem := BaseURLProblem(base); problem != "" {
		return fmt.Errorf("%w: client.New needs a base URL of the form http:// or https:// and a host, such as http://127.0.0.1:8080: %s",
			opledger.ErrInvalidInput, problem)
	}
	return nil
}

// BaseURLProblem says why base cannot be the base URL of a Client (New),
// or of the CLI's --server: it is not a URL, its scheme is not http or
// https, it names no host, its port is not from 1 to 65535, or it carries
// a user, a query or a fragment, which the client would not use as
// given. It returns "" for a base the client can use. Its words repeat no
// part of base, which may hold a password.
func BaseURLProblem(base string) string {
	if !strings.Contains(base, "://") {
		return "it has no http:// or https:// before the host"
	}
	u, err := url.Parse(base)
	switch {
	case err != nil:
		// Not the parser's words: they quote part of the value, which
		// may be part of a password (http://admin:pa/ss@host).
		return "it cannot be parsed as a URL (a host, then an optional :port; an IPv6 host in [ ])"
	case u.Scheme != "http" && u.Scheme != "https":
		return "its scheme is " + u.Scheme + ", not http or https"
	case u.Hostname() == "":
		return "it names no host"
	case u.User != nil:
		return "it must not carry a user or password (the API token is given apart from it)"
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(base, "#"):
		return "it must not carry a query or fragment"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "its port " + strconv.Quote(p) + " is not a number from 1 to 65535"
		}
	}
	return ""
}

// Close closes the connections the client keeps open to the server
// between calls (with a nil httpClient in New, each Client has its own);
// a program that makes a Client per task closes it when the task ends.
// Calls in flight are not interrupted, and a call after Close opens a new
// connection.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// MaxResponseBytes is the largest response body the client reads. A
// successful answer past it is an error; an error answer past it keeps
// its start (Error.Problem.Detail).
const MaxResponseBytes = 64 << 20

// maxDetailBytes bounds the Detail taken from an answer that is not a
// problem (an HTML page from a load balancer, say).
const maxDetailBytes = 512

// Error is an answer outside 2xx: a problem the API answered with, or
// whatever a proxy or load balancer in front of it sent.
//
// It stands for the library's error where its problem carries what that
// error holds, so that code written against the library works on it:
// errors.Is matches the sentinels (Is), opledger.OperationOf returns the
// operation of a refusal that carries one (Operation), and errors.As
// finds a *opledger.StateError, a *opledger.StaleError or a
// *opledger.MismatchError (As). The other typed errors of the library
// are not found in it: a *opledger.RuleError (mapping_failed: the
// rule and field are in Problem.Detail only), and the errors of Do and
// workflows (*opledger.AttemptError, *opledger.ReportError,
// *opledger.StepError), which no request of the client returns. A
// malformed key is refused before anything is sent with the library's
// own *opledger.KeyError.
type Error struct {
	// Status is the answer's HTTP status code.
	Status int
	// Problem is the RFC 9457 problem the API sent. For an answer that is
	// not a problem with a type (from something in front of the API), it
	// holds only Detail: the start of the body, at most 512 bytes of
	// valid UTF-8 (and "…" when cut); for an HTML page, "an HTML page,
	// not an answer of the opledger API: " and its title (without one,
	// its text without tags), cut the same way.
	Problem httpapi.Problem
	// RetryAfter is the answer's Retry-After header as a delay: its
	// seconds, or its HTTP date less the answer's Date (less the time it
	// arrived, without a Date). Zero when the header is absent, malformed
	// or in the past.
	RetryAfter time.Duration
	// RequestID is the answer's X-Request-Id header, or the problem's
	// request_id without one: what the server's log is searched for.
	RequestID string
	// dispatched is set by Release on its invalid_state refusal of an
	// attempt still in progress: the attempt was dispatched
	// (opledger.ErrAlreadyDispatched).
	dispatched bool
	// call, key, attemptID and token describe the request refused, as
	// the library names them in its errors (As): call is what was
	// attempted ("claim", "dispatch", "approve", a decision's kind, ...),
	// set by the methods whose library counterpart refuses with a
	// *opledger.StateError or *opledger.StaleError, with the key; the
	// attempt and the fencing token sent are set by those that send them.
	call, key, attemptID string
	token                int64
	// eventPayload is set by ReceiveEvent on its payload_too_large
	// refusal of an event whose payload, as sent, is past
	// opledger.MaxEventPayload: the library refuses that payload too
	// (opledger.ErrEventPayloadTooLarge), whichever of the server's
	// limits (its body limit or the event payload limit) refused it.
	eventPayload bool
}

// Error describes the error.
func (e *Error) Error() string {
	msg := fmt.Sprintf("%s (HTTP %d)", e.Kind(), e.Status)
	if e.Kind() == "" {
		msg = fmt.Sprintf("HTTP %d", e.Status)
	}
	if e.Problem.Detail != "" {
		msg += ": " + e.Problem.Detail
	}
	return msg
}

// Operation returns the operation the refusal concerns, as the API
// showed it in the problem (masked at its sensitive fields, as every
// answer shows it), or nil: the API gives it with the refusals of which
// the library's opledger.OperationOf returns it (in_progress, not_due,
// invalid_state, stale_fencing_token, stale_finding, stale_decision),
// and opledger.OperationOf returns it for an *Error too. A problem from
// something in front of the API has none.
func (e *Error) Operation() *opledger.Operation { return e.Problem.Operation }

// As makes errors.As find in e the library's error its problem stands
// for, where the problem carries what that error holds (see Error):
//
//   - *opledger.StateError, for an invalid_state, in_progress or not_due
//     problem that carries the operation, refusing Claim, Dispatch,
//     Release, ExtendLease, Report, Reconcile, Approve, Revise or
//     Resolve: Op is what the library calls the request ("claim",
//     "dispatch", "release", "extend the lease of", "report",
//     "reconcile", "approve", "revise", or the decision's kind), Key the
//     key, State and Operation the problem's. Not for the refusals the
//     library makes without one (Release after the dispatch,
//     opledger.ErrAlreadyDispatched; Resolve's authorize_retry of the
//     failed step a workflow was cancelled at), nor for the workflow
//     methods.
//
//   - *opledger.StaleError, for a stale_fencing_token problem refusing
//     Dispatch, Release, ExtendLease or Report: Key, AttemptID and
//     FencingToken as sent; Current and Operation from the problem's
//     operation; Recorded false (a report the server kept as evidence
//     is no error: ReportResult.StaleReport). AttemptToken, the token
//     the attempt was issued, is the problem's attempt_token; from a
//     server that does not send it, the operation's when the attempt is
//     its current one (Operation.CurrentAttemptID), else 0.
//
//   - *opledger.MismatchError, for a fingerprint_mismatch problem that
//     carries its mismatch (a server before it sent none), whatever the
//     call: from the problem's mismatch and state.
//
// The operation is as the API shows it, masked at its sensitive fields.
// The error built so describes itself from its fields: Problem.Detail
// has the server's own words, which may say more.
func (e *Error) As(target any) bool {
	if t, ok := target.(**opledger.MismatchError); ok {
		m := e.Problem.Mismatch
		if e.Kind() != "fingerprint_mismatch" || m == nil {
			return false
		}
		*t = &opledger.MismatchError{Key: m.Key, Stored: m.StoredFingerprint, Given: m.GivenFingerprint, State: e.Problem.State,
			Tombstoned: m.Tombstoned, StoredVersion: m.StoredVersion, GivenVersion: m.GivenVersion, RevisedTo: m.RevisedTo}
		return true
	}
	op := e.Problem.Operation
	if op == nil || e.call == "" {
		return false
	}
	switch t := target.(type) {
	case **opledger.StateError:
		switch e.Kind() {
		case "invalid_state", "in_progress", "not_due":
		default:
			return false
		}
		if e.dispatched || e.call == string(opledger.DecisionAuthorizeRetry) && op.State == opledger.StateFailed && !op.Tombstoned {
			// Refusals the library makes without a *StateError: a
			// release after the dispatch, and a retry of the failed step
			// a workflow was cancelled at (failed is a state
			// authorize_retry applies to).
			return false
		}
		*t = &opledger.StateError{Op: e.call, Key: e.key, State: op.State, Operation: op}
		return true
	case **opledger.StaleError:
		if e.Kind() != "stale_fencing_token" || e.attemptID == "" {
			return false
		}
		stale := &opledger.StaleError{Key: e.key, AttemptID: e.attemptID, FencingToken: e.token, Current: op.FencingToken, Operation: op,
			AttemptToken: e.Problem.AttemptToken}
		if stale.AttemptToken == 0 && op.CurrentAttemptID == e.attemptID {
			// A server before attempt_token: the operation's token is its
			// current attempt's.
			stale.AttemptToken = op.FencingToken
		}
		*t = stale
		return true
	}
	return false
}

// refused notes on err, if it is an *Error, the request it refused as
// the library describes it in its errors (Error.As): what was attempted,
// the key, and the attempt and fencing token sent ("" and 0 for none).
func refused(err error, call, key, attemptID string, token int64) error {
	if e, ok := errors.AsType[*Error](err); ok {
		e.call, e.key, e.attemptID, e.token = call, key, attemptID, token
	}
	return err
}

// Kind is the stable suffix of the problem type, e.g. "in_progress".
func (e *Error) Kind() string { return strings.TrimPrefix(e.Problem.Type, httpapi.ProblemTypeBase) }

// Is matches the opledger sentinel errors by problem kind, and by the
// problem's state as *opledger.StateError does: an invalid_state problem
// whose state is succeeded matches opledger.ErrAlreadySucceeded, one
// whose state is in_progress opledger.ErrInProgress (and, from Release,
// opledger.ErrAlreadyDispatched). A reason_required problem matches
// opledger.ErrReasonRequired and opledger.ErrInvalidInput, as the
// library's error does. A payload_too_large problem matches
// opledger.ErrInvalidInput, and, from ReceiveEvent for an event whose
// payload is past opledger.MaxEventPayload,
// opledger.ErrEventPayloadTooLarge. A request the store could not take
// matches opledger.ErrStoreBusy (store_busy: send it again),
// opledger.ErrStoreUnavailable (unavailable: the database could not be
// reached; send it again), opledger.ErrStoreFull or
// opledger.ErrSchemaNewer, as the ledger's own error does.
func (e *Error) Is(target error) bool {
	switch e.Kind() {
	case "fingerprint_mismatch":
		return target == opledger.ErrFingerprintMismatch
	case "in_progress":
		return target == opledger.ErrInProgress || target == opledger.ErrInvalidState
	case "not_due":
		return target == opledger.ErrNotDue || target == opledger.ErrInvalidState
	case "invalid_state":
		switch target {
		case opledger.ErrInvalidState:
			return true
		case opledger.ErrAlreadySucceeded:
			return e.Problem.State == opledger.StateSucceeded
		case opledger.ErrInProgress:
			return e.Problem.State == opledger.StateInProgress
		case opledger.ErrAlreadyDispatched:
			return e.dispatched
		}
		return false
	case "stale_fencing_token":
		return target == opledger.ErrStaleFencingToken
	case "stale_finding":
		return target == opledger.ErrStaleFinding
	case "stale_decision":
		return target == opledger.ErrStaleDecision
	case "not_found":
		return target == opledger.ErrNotFound
	case "invalid_key":
		return target == opledger.ErrInvalidKey
	case "invalid_input", "invalid_json", "mapping_failed":
		// mapping_failed: a rule could not map the event (a
		// *opledger.RuleError in the library, which matches it too).
		return target == opledger.ErrInvalidInput
	case "destination_not_served":
		return target == opledger.ErrDestinationNotServed || target == opledger.ErrInvalidInput
	case "payload_too_large":
		// Past the server's body limit, or an event payload past
		// MaxEventPayload (from ReceiveEvent): input it refuses.
		return target == opledger.ErrInvalidInput || target == opledger.ErrEventPayloadTooLarge && e.eventPayload
	case "reason_required":
		// A missing field, as in the library, where ErrReasonRequired
		// matches ErrInvalidInput too.
		return target == opledger.ErrReasonRequired || target == opledger.ErrInvalidInput
	case "unauthorized":
		return target == opledger.ErrUnauthorized
	case "forbidden":
		return target == opledger.ErrForbidden
	case "store_busy":
		return target == opledger.ErrStoreBusy
	case "store_full":
		return target == opledger.ErrStoreFull
	case "unavailable":
		return target == opledger.ErrStoreUnavailable
	case "schema_newer":
		return target == opledger.ErrSchemaNewer
	}
	return false
}

// do sends a request with an optional JSON body and decodes a JSON answer
// into out, which must then be a JSON object. It returns the status code
// and the answer's headers.
// Any status outside 2xx is an *Error.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (int, http.Header, error) {
	if c.baseErr != nil {
		return 0, nil, c.baseErr
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			// Only a value given as JSON text (a payload, a response) can
			// fail to encode: bad input, refused before anything is sent,
			// as the ledger refuses it.
			if me := (*json.MarshalerError)(nil); errors.As(err, &me) {
				err = me.Unwrap()
			}
			return 0, nil, fmt.Errorf("%w: a value given as JSON (a payload or response) is not valid JSON: %v", opledger.ErrInvalidInput, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return 0, nil, &noAnswerError{method: method, path: path, base: c.base, err: ue}
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	if sent := resp.Request; sent != nil && sent.Method != method && sent.Response != nil {
		// A 301, 302 or 303 to a write, which the http.Client followed
		// with a GET without the body: that GET's answer is another
		// route's (a PUT's, the operation as recorded; a POST
		// /v1/events', a page of events), and nothing was written. The
		// redirect is the answer.
		e := newError(sent.Response, nil, time.Now())
		e.Problem.Detail = fmt.Sprintf("the %s was redirected to %s, which the HTTP client follows with a %s without the body: nothing was written (give the client the address the API answers at)",
			method, sent.URL.Redacted(), sent.Method)
		return sent.Response.StatusCode, sent.Response.Header, e
	}
	// One byte past the limit tells a body at the limit from a longer one.
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return resp.StatusCode, resp.Header, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A 3xx the http.Client did not follow is no answer either.
		return resp.StatusCode, resp.Header, newError(resp, c.withoutToken(data), time.Now())
	}
	if len(data) > MaxResponseBytes {
		return resp.StatusCode, resp.Header, fmt.Errorf("%s %s: response larger than %d bytes", method, path, MaxResponseBytes)
	}
	if out != nil {
		// null (or nothing) would decode into out as nothing at all.
		if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '{' {
			return resp.StatusCode, resp.Header, fmt.Errorf("decode %s %s response: got %s, not a JSON object", method, path, describeBody(c.withoutToken(trimmed)))
		}
		if t, ok := out.(*answerText); ok {
			*t = data // decoded by the caller, once (answerText)
		} else if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, resp.Header, answerError(method, path, err)
		}
	}
	return resp.StatusCode, resp.Header, nil
}

// minMaskedToken is the shortest token withoutToken masks: a shorter
// one would mask letters of ordinary words.
const minMaskedToken = 4

// withoutToken is body with the client's token masked wherever it is
// written as sent: the part of an answer an error quotes (Error's
// Detail, describeBody) may be another server's, one that echoes the
// request it got, Authorization header included, and such errors are
// printed and logged.
func (c *Client) withoutToken(body []byte) []byte {
	if len(c.token) < minMaskedToken || !bytes.Contains(body, []byte(c.token)) {
		return body
	}
	return bytes.ReplaceAll(body, []byte(c.token), []byte("[token]"))
}

// answerError is do's error for an answer that did not decode.
func answerError(method, path string, err error) error {
	return &decodeError{prefix: "decode " + method + " " + path + " response", err: err}
}

// decodeError is an answer that did not decode into what was asked: its
// text is the decoder's cut to maxDetailBytes, as the decoder quotes a
// number it cannot hold whole, and another server's number may be most
// of MaxResponseBytes long. It unwraps to the decoder's error.
type decodeError struct {
	prefix string
	err    error
}

func (e *decodeError) Error() string { return e.prefix + ": " + detail([]byte(e.err.Error())) }

func (e *decodeError) Unwrap() error { return e.err }

// answerText, given to do as out, receives the answer, a JSON object by
// its first byte, as it came, not yet checked to be JSON: its caller
// decodes it once into what the status says it is, where decoding into a
// json.RawMessage first would read it twice. A *json.SyntaxError of
// that decoding is do's error (answerError), as it would have been.
type answerText []byte

// decode decodes the answer t to method path into v; what names v
// in the error of an answer that is JSON but does not decode into it.
func (t answerText) decode(method, path, what string, v any) error {
	err := json.Unmarshal(t, v)
	if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
		return answerError(method, path, err)
	}
	if err != nil {
		return &decodeError{prefix: what, err: err}
	}
	return nil
}

// noAnswerError is a request that got no answer: the server could not be
// reached, or the connection failed. It unwraps to the *url.Error, so that
// what it wraps (a refused dial, a context's end) is still found.
type noAnswerError struct {
	method, path, base string
	err                *url.Error
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("%s %s: no answer from the server at %s: %v", e.method, e.path, e.base, e.err.Err)
}

func (e *noAnswerError) Unwrap() error { return e.err }

// describeBody names what a body that is not a JSON object holds.
func describeBody(b []byte) string {
	switch {
	case len(b) == 0:
		return "an empty body"
	case bytes.Equal(b, []byte("null")):
		return "null"
	}
	return "a body starting " + strconv.Quote(detail(b[:min(len(b), 16)]))
}

// newError makes the *Error of an answer outside 2xx that arrived at now.
func newError(resp *http.Response, body []byte, now time.Time) *Error {
	e := &Error{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header, now), RequestID: resp.Header.Get("X-Request-Id")}
	var p httpapi.Problem
	if err := json.Unmarshal(body, &p); err == nil && p.Type != "" {
		e.Problem = p
	} else {
		// Not the API's problem: something in front of it answered.
		e.Problem.Detail = detail(body)
		if page, ok := htmlText(resp.Header.Get("Content-Type"), body); ok {
			e.Problem.Detail = detail([]byte("an HTML page, " + ErrNotTheAPI.Error() + ": " + page))
		}
	}
	if e.RequestID == "" {
		e.RequestID = e.Problem.RequestID
	}
	return e
}

var (
	htmlTitle = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title>`)
	htmlSkip  = regexp.MustCompile(`(?is)<(script|style|head)[^>]*>.*?</(script|style|head)>|<!--.*?-->`)
	htmlTag   = regexp.MustCompile(`(?s)<[^>]*>`)
)

// htmlText is what an HTML page answered in place of the API says, for
// a person: its title, or without one its text, tags and runs of white
// space left out. ok is false for a body that is no HTML page (by its
// Content-Type, or, without one, by its start).
func htmlText(contentType string, body []byte) (text string, ok bool) {
	mt, _, _ := mime.ParseMediaType(contentType)
	start := strings.ToLower(string(bytes.TrimSpace(body[:min(len(body), 64)])))
	if mt != "text/html" && !(contentType == "" && (strings.HasPrefix(start, "<!doctype html") || strings.HasPrefix(start, "<html"))) {
		return "", false
	}
	page := string(body)
	if m := htmlTitle.FindStringSubmatch(page); m != nil && strings.TrimSpace(m[1]) != "" {
		page = m[1]
	} else {
		page = htmlTag.ReplaceAllString(htmlSkip.ReplaceAllString(page, " "), " ")
	}
	return strings.Join(strings.Fields(html.UnescapeString(page)), " "), true
}

// detail is the start of a body as text: valid UTF-8 (invalid bytes
// replaced by U+FFFD), at most maxDetailBytes, cut at a character boundary
// and then ended by "…".
func detail(body []byte) string {
	s := strings.ToValidUTF8(string(bytes.TrimSpace(body)), "\uFFFD")
	if len(s) <= maxDetailBytes {
		return s
	}
	return textcut.Prefix(s, maxDetailBytes) + "…"
}

// retryAfter reads a Retry-After header (RFC 9110, section 10.2.3): delay
// seconds, or an HTTP date taken relative to the answer's Date header
// (the answering clock) or, without one, to now. It is zero when the
// header is absent or malformed, or its date has passed.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, math.MaxInt64/int64(time.Second))) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date
	}
	return max(at.Sub(now), 0)
}

// invalidInput is a refusal before sending, matching opledger.ErrInvalidInput.
func invalidInput(msg string) error { return fmt.Errorf("%w: %s", opledger.ErrInvalidInput, msg) }

// checkAttempt refuses, before anything is sent, a key that is not one
// (opledger.ErrInvalidKey) and an empty attempt id (ErrInvalidInput): in a
// path they would answer a misleading 404 "no such route".
func checkAttempt(key, attemptID string) error {
	if err := opledger.ValidateKey(key); err != nil {
		return err
	}
	if attemptID == "" {
		return invalidInput("attempt id is empty")
	}
	return nil
}

// checkName refuses, before anything is sent, a name a path needs (an
// event's source or id, a workflow's step) that is empty or outside the
// key syntax, as the ledger refuses it (opledger.ErrInvalidInput), and
// without repeating it: sent, it would travel in the URL, through the
// access log of anything in front of the server, though it may be
// personal data (an e-mail address).
func checkName(what, name string) error {
	if name == "" {
		return invalidInput(what + " is empty")
	}
	if err := opledger.ValidateKey(name); err != nil {
		return invalidInput(what + " is not in the key syntax: " + strings.TrimPrefix(err.Error(), "invalid key: "))
	}
	return nil
}

// checkStep is checkName for a workflow's step, whose name holds no '/'
// either (it ends the step's key, <workflow>/<step>).
func checkStep(step string) error {
	if err := checkName("step name", step); err != nil {
		return err
	}
	if strings.Contains(step, "/") {
		return invalidInput("step name must not contain '/'")
	}
	return nil
}

func opPath(key string, rest ...string) string {
	p := "/v1/operations/" + url.PathEscape(key)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// Intent is the body of a record request (the key goes in the path).
// Its fields are opledger.Intent's.
type Intent struct {
	// Action names the change, e.g. "crm.create_inquiry".
	Action string `json:"action"`
	// Destination names the external system, e.g. "crm".
	Destination string `json:"destination"`
	// Payload is the content, any JSON value.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Version of the content; 0 means 1.
	Version int64 `json:"version,omitempty"`
	// Owner is who decides when automation cannot, e.g. "ops-team".
	Owner string `json:"owner,omitempty"`
	// SourceEvent is the event that produced the intent, if any.
	SourceEvent string `json:"source_event,omitempty"`
	// RequiresApproval records the operation as awaiting_approval.
	RequiresApproval bool `json:"requires_approval,omitempty"`
	// SensitiveFields are dotted paths into the payload whose values are
	// stored but never shown (opledger.Intent.SensitiveFields).
	SensitiveFields []string `json:"sensitive_fields,omitempty"`
}

// Record records an intent under key; created is false for a repeat.
func (c *Client) Record(ctx context.Context, key string, in Intent) (op *opledger.Operation, created bool, err error) {
	if err := opledger.ValidateKey(key); err != nil {
		return nil, false, err
	}
	op = new(opledger.Operation)
	status, _, err := c.do(ctx, http.MethodPut, opPath(key), in, op)
	if err != nil {
		return nil, false, err
	}
	return op, status == http.StatusCreated, nil
}

// OperationDetail is an operation with its attempts and timeline.
type OperationDetail struct {
	opledger.Operation
	// Attempts are the operation's attempts, oldest first.
	Attempts []opledger.Attempt `json:"attempts"`
	// Timeline is every transition of the operation, oldest first.
	Timeline []opledger.TimelineEntry `json:"timeline"`
}

// MarshalJSON encodes the detail as the API sends it: the operation's
// fields as opledger.Operation encodes them (payload and response masked
// at its sensitive fields), then attempts and timeline. Without it the
// embedded Operation's MarshalJSON would encode the operation alone.
func (d OperationDetail) MarshalJSON() ([]byte, error) {
	return opjson.WithFields(&d.Operation, map[string]any{"attempts": d.Attempts, "timeline": d.Timeline})
}

// Get returns an operation with its attempts and timeline.
func (c *Client) Get(ctx context.Context, key string) (*OperationDetail, error) {
	if err := opledger.ValidateKey(key); err != nil {
		return nil, err
	}
	var d OperationDetail
	if _, _, err := c.do(ctx, http.MethodGet, opPath(key), nil, &d); err != nil {
		return nil, err
	}
	if d.Key != key {
		return nil, otherAnswer(http.MethodGet, opPath(key), "the operation asked for")
	}
	return &d, nil
}

// List returns a page of operations, filtered and in the order o asks
// for: newest first, or the held ones by review time
// (opledger.OrderReview). A state that is not one of opledger.StateNames
// cannot be sent over the API: it is refused (opledger.ErrInvalidInput)
// before anything is sent, never silently dropped. A negative Limit is
// sent, and refused by the server (opledger.ErrInvalidInput) as the
// library refuses it; so it is by ListEvents and ListWorkflows.
func (c *Client) List(ctx context.Context, o opledger.ListOptions) (*opledger.Page, error) {
	q := url.Values{}
	var states []string
	for _, s := range o.States {
		if !s.Valid() {
			// The API takes the states as one comma-separated list: one
			// that is empty or holds a comma would be read as others.
			return nil, invalidInput(fmt.Sprintf("ListOptions.States: unknown state %.40q (states: %s)", s, opledger.StateNames()))
		}
		states = append(states, string(s))
	}
	if len(states) > 0 {
		q.Set("state", strings.Join(states, ","))
	}
	for k, v := range map[string]string{"owner": o.Owner, "destination": o.Destination, "order": string(o.Order), "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit != 0 { // a negative one too: the server refuses it, as the library does
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.DuplicateEffects {
		q.Set("duplicate_effects", "true")
	}
	if o.ExceptCancelled {
		q.Set("except_cancelled", "true")
	}
	var page opledger.Page
	if err := c.getList(ctx, "/v1/operations", q, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// getList reads one page of the list at path, with the query q, into
// page.
func (c *Client) getList(ctx context.Context, path string, q url.Values, page any) error {
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var answer answerText
	if _, _, err := c.do(ctx, http.MethodGet, path, nil, &answer); err != nil {
		return err
	}
	// Every page of the API has its items, [] when there are none: an
	// object without them is another server's, not an empty page.
	var items struct {
		Items json.RawMessage `json:"items"`
	}
	if err := answer.decode(http.MethodGet, path, "list page", &items); err != nil {
		return err
	}
	if items.Items == nil {
		return otherAnswer(http.MethodGet, path, "a page of a list (it has no items)")
	}
	return answer.decode(http.MethodGet, path, "list page", page)
}

// otherAnswer is the error of a 2xx answer that is a JSON object but not
// the one the API gives to method path (what it is not): another
// server's, at a wrong address (a proxy's that forwards the request to
// its upstream, another service's), never to be taken for an empty
// answer of the API.
func otherAnswer(method, path, what string) error {
	return fmt.Errorf("%s %s: the answer is not %s: %w", method, path, what, ErrNotTheAPI)
}

// ErrNotTheAPI is matched (errors.Is) by the error of a 2xx answer that
// is not what the route answers: a JSON object of another service at the
// client's base URL (a mistyped address, a proxy forwarding the request
// to its upstream), never taken for an empty answer of the API. Its text
// is also in the Problem.Detail of an *Error whose answer was an HTML
// page.
var ErrNotTheAPI = errors.New("not an answer of the opledger API")

// ClaimRequest is the body of a claim.
type ClaimRequest struct {
	// Worker names the claimant in the attempt and the timeline.
	Worker string `json:"worker,omitempty"`
	// LeaseSeconds is how long the claim holds; 0 means the server's
	// default lease.
	LeaseSeconds float64 `json:"lease_seconds,omitempty"`
	// Intent records the operation first when the key is new.
	Intent *Intent `json:"intent,omitempty"`
	// Dispatch marks the attempt dispatched in the claim's own write
	// (opledger.ClaimOptions.Dispatch), for a caller that starts the
	// external call as soon as the claim returns: one request and one
	// durable write fewer than Claim then Dispatch.
	Dispatch bool `json:"dispatch,omitempty"`
}

// ReplayError carries the saved result of an operation that already
// succeeded; nothing must be sent. It matches opledger.ErrAlreadySucceeded
// and opledger.ErrInvalidState, as the library's *opledger.StateError for
// a succeeded operation does.
type ReplayError struct {
	// Operation is the succeeded operation, with its destination
	// reference and saved response.
	Operation *opledger.Operation
}

// Error describes the error.
func (e *ReplayError) Error() string {
	if e.Operation == nil {
		return "operation already succeeded"
	}
	return "operation " + e.Operation.Key + " already succeeded with ref " + e.Operation.DestinationRef
}

// Is matches opledger.ErrAlreadySucceeded and opledger.ErrInvalidState.
func (e *ReplayError) Is(target error) bool {
	return target == opledger.ErrAlreadySucceeded || target == opledger.ErrInvalidState
}

// As makes errors.As find in e the *opledger.StateError the library's
// Claim returns for a succeeded operation (Op "claim", its key, state
// and Operation), and so opledger.OperationOf return its Operation.
func (e *ReplayError) As(target any) bool {
	t, ok := target.(**opledger.StateError)
	if !ok || e.Operation == nil {
		return false
	}
	*t = &opledger.StateError{Op: "claim", Key: e.Operation.Key, State: e.Operation.State, Operation: e.Operation}
	return true
}

// Claim claims an operation. A succeeded operation gives a *ReplayError
// with the saved result. The claim's Operation carries the real payload,
// sensitive fields included, since the claimant is about to send it
// (json.Marshal of it masks them again).
func (c *Client) Claim(ctx context.Context, key string, r ClaimRequest) (*opledger.Claim, error) {
	if err := opledger.ValidateKey(key); err != nil {
		return nil, err
	}
	var raw answerText
	path := opPath(key, "claim")
	status, _, err := c.do(ctx, http.MethodPost, path, r, &raw)
	if err != nil {
		return nil, refused(err, "claim", key, "", 0)
	}
	if status == http.StatusOK {
		var replay struct {
			Replayed  bool                `json:"replayed"`
			Operation *opledger.Operation `json:"operation"`
		}
		if err := raw.decode(http.MethodPost, path, "decode replay", &replay); err != nil {
			return nil, err
		}
		// Anything else answering 200 is not the API's replay, and no
		// saved result says that nothing must be sent.
		if !replay.Replayed || replay.Operation == nil {
			return nil, errors.New(`decode replay: a 200 answer to a claim needs "replayed": true and the operation`)
		}
		return nil, &ReplayError{Operation: replay.Operation}
	}
	var cl opledger.Claim
	if err := raw.decode(http.MethodPost, path, "decode claim", &cl); err != nil {
		return nil, err
	}
	return &cl, nil
}

// Dispatch marks the recovery point of an attempt.
func (c *Client) Dispatch(ctx context.Context, key, attemptID string, token int64) (*opledger.Operation, error) {
	if err := checkAttempt(key, attemptID); err != nil {
		return nil, err
	}
	var op opledger.Operation
	if _, _, err := c.do(ctx, http.MethodPost, opPath(key, "attempts", attemptID, "dispatch"),
		map[string]int64{"fencing_token": token}, &op); err != nil {
		return nil, refused(err, "dispatch", key, attemptID, token)
	}
	return &op, nil
}

// Release gives back a claim that was never dispatched, as
// opledger.Ledger.Release does: the operation is due again at once, and
// nothing was sent. reason, which may be empty, goes to the timeline. A
// dispatched attempt is refused (its call may have reached the
// destination: report its outcome), matching opledger.ErrAlreadyDispatched
// as the library's refusal does, and so is one that no longer holds the
// operation (opledger.ErrStaleFencingToken).
func (c *Client) Release(ctx context.Context, key, attemptID string, token int64, reason string) (*opledger.Operation, error) {
	if err := checkAttempt(key, attemptID); err != nil {
		return nil, err
	}
	var op opledger.Operation
	if _, _, err := c.do(ctx, http.MethodPost, opPath(key, "attempts", attemptID, "release"),
		struct {
			FencingToken int64  `json:"fencing_token"`
			Reason       string `json:"reason,omitempty"`
		}{token, reason}, &op); err != nil {
		// The API refuses a release of the attempt that still holds the
		// operation, in progress, only for its dispatch.
		if e := (*Error)(nil); errors.As(err, &e) && e.Kind() == "invalid_state" && e.Problem.State == opledger.StateInProgress {
			e.dispatched = true
		}
		return nil, refused(err, "release", key, attemptID, token)
	}
	return &op, nil
}

// ExtendLease lengthens the lease of a claim still held: it then ends
// lease after now, by the store's clock (see opledger.Ledger.ExtendLease).
// A stale token or a lease already over is refused: stop, another worker
// may hold the operation.
func (c *Client) ExtendLease(ctx context.Context, key, attemptID string, token int64, lease time.Duration) (*opledger.Operation, error) {
	if err := checkAttempt(key, attemptID); err != nil {
		return nil, err
	}
	var op opledger.Operation
	if _, _, err := c.do(ctx, http.MethodPost, opPath(key, "attempts", attemptID, "lease"),
		map[string]any{"fencing_token": token, "lease_seconds": lease.Seconds()}, &op); err != nil {
		return nil, refused(err, "extend the lease of", key, attemptID, token)
	}
	return &op, nil
}

// Report is the body of an outcome report.
type Report struct {
	// FencingToken is the claim's; a stale one moves nothing.
	FencingToken int64 `json:"fencing_token"`
	// Outcome is what the attempt found.
	Outcome opledger.Outcome `json:"outcome"`
	// DestinationRef is the destination's reference of the effect,
	// required with opledger.OutcomeSucceeded.
	DestinationRef string `json:"destination_ref,omitempty"`
	// Response is the destination's answer to save, any JSON value.
	Response json.RawMessage `json:"response,omitempty"`
	// Error says what went wrong, without secrets.
	Error string `json:"error,omitempty"`
	// RetryAfterSeconds is the destination's Retry-After for a retryable
	// outcome.
	RetryAfterSeconds float64 `json:"retry_after_seconds,omitempty"`
}

// ReportFrom is the body that reports r, an outcome of claim's attempt
// (opledger.ReportOf builds one from a call's result and error, as Do
// and the executor record it), with claim's fencing token. Its error
// text is r's masked for claim's operation (opledger.Report.MaskedFor):
// the values of its sensitive fields are masked before the text is cut
// to the 1,000 bytes the ledger keeps, as the ledger masks a report made
// in its own process. The API carries the cut text only: sent as
// ReportOf cut it, a value across the cut would reach the server in
// part, where it can no longer be recognised and masked.
func ReportFrom(claim *opledger.Claim, r opledger.Report) Report {
	r = r.MaskedFor(claim.Operation)
	return Report{FencingToken: claim.FencingToken, Outcome: r.Outcome, DestinationRef: r.DestinationRef,
		Response: r.Response, Error: r.Error, RetryAfterSeconds: r.RetryAfter.Seconds()}
}

// ReportResult is the operation after a report, and whether the report
// was stale (kept as evidence only).
type ReportResult struct {
	opledger.Operation
	// StaleReport is true when the attempt no longer held the operation:
	// the report was kept as evidence and moved nothing.
	StaleReport bool `json:"stale_report"`
}

// MarshalJSON encodes the result as the API sends it: the operation's
// fields as opledger.Operation encodes them (payload and response masked
// at its sensitive fields), then stale_report. Without it the embedded
// Operation's MarshalJSON would encode the operation alone.
func (r ReportResult) MarshalJSON() ([]byte, error) {
	return opjson.WithFields(&r.Operation, map[string]any{"stale_report": r.StaleReport})
}

// Report reports an attempt's outcome. A report from an attempt that no
// longer holds the operation (its lease ran out, it gave the claim back,
// another attempt holds it now), sent with its own fencing token, is not
// an error, unlike Ledger.Report's *StaleError: the server keeps it as
// evidence and answers with ReportResult.StaleReport true, and a late
// success still settles the operation; check StaleReport before taking
// the answer for the attempt's own. A token that is not the attempt's own
// is refused (matching opledger.ErrStaleFencingToken), nothing recorded.
func (c *Client) Report(ctx context.Context, key, attemptID string, r Report) (*ReportResult, error) {
	if err := checkAttempt(key, attemptID); err != nil {
		return nil, err
	}
	var res ReportResult
	if _, _, err := c.do(ctx, http.MethodPost, opPath(key, "attempts", attemptID, "outcome"), r, &res); err != nil {
		return nil, refused(err, "report", key, attemptID, r.FencingToken)
	}
	return &res, nil
}

// Finding is the body of a reconcile request: what a lookup at the
// destination found (opledger.Finding).
type Finding struct {
	// Found is true when the destination has a record of the effect.
	Found bool `json:"found"`
	// Matches is true when the record found has the operation's content.
	Matches bool `json:"matches"`
	// DestinationRef is the reference of the record found.
	DestinationRef string `json:"destination_ref,omitempty"`
	// Authoritative is true when an absent record means no effect.
	Authoritative bool `json:"authoritative"`
	// Evidence says what the lookup saw, for the timeline.
	Evidence string `json:"evidence,omitempty"`
	// VisibilityDelaySeconds is how long the destination may take to show
	// a record; absence counts only after it.
	VisibilityDelaySeconds float64 `json:"visibility_delay_seconds,omitempty"`
	// ProtectionRetentionSeconds is how long the destination keeps its
	// idempotency keys: within it, a retry is protected.
	ProtectionRetentionSeconds float64 `json:"protection_retention_seconds,omitempty"`
	// AttemptCount is the operation's attempt_count the lookup was made
	// for; the server refuses the finding (409 stale_finding, matching
	// opledger.ErrStaleFinding) if another attempt was made since.
	AttemptCount int `json:"attempt_count,omitempty"`
	// LookedAt is when the lookup began; absence counts only for a lookup
	// begun after the visibility delay.
	LookedAt *time.Time `json:"looked_at,omitempty"`
}

// Reconcile applies a lookup result to an uncertain operation. As with
// opledger.Ledger.Reconcile, decided reports whether the finding moved
// the operation on (the server's "decided"), false when it was only
// recorded: the operation stays uncertain within the visibility delay,
// or someone else decided it while the lookup ran and the record found
// is noted on its timeline.
func (c *Client) Reconcile(ctx context.Context, key string, f Finding) (op *opledger.Operation, decided bool, err error) {
	if err := opledger.ValidateKey(key); err != nil {
		return nil, false, err
	}
	var res struct {
		opledger.Operation
		Decided bool `json:"decided"`
	}
	if _, _, err := c.do(ctx, http.MethodPost, opPath(key, "reconcile"), f, &res); err != nil {
		return nil, false, refused(err, "reconcile", key, "", 0)
	}
	return &res.Operation, res.Decided, nil
}

// Approve approves exactly one version and fingerprint. As with
// opledger.Ledger.Approve, an approval that repeats the one that last
// moved the operation records nothing and is answered with replayed true
// (the server's Idempotent-Replayed header).
func (c *Client) Approve(ctx context.Context, key string, a opledger.Approval) (op *opledger.Operation, replayed bool, err error) {
	return c.decide(ctx, key, "approve", "approve", a)
}

// Revise replaces the content of a never-dispatched operation. The
// payload is required, json.RawMessage("null") for none: an empty one is
// refused (opledger.ErrInvalidInput) before anything is sent, rather than
// sent as null and taken for "no payload".
//
// As with opledger.Ledger.Revise, a revision that repeats the one that
// last moved the operation records nothing and is answered with replayed
// true.
func (c *Client) Revise(ctx context.Context, key string, r opledger.Revision) (op *opledger.Operation, replayed bool, err error) {
	if len(r.Payload) == 0 {
		return nil, false, invalidInput("revise needs the new payload (JSON null for none)")
	}
	return c.decide(ctx, key, "revise", "revise", r)
}

// Resolve records an operator decision; the reason is required. As with
// opledger.Ledger.Resolve, a decision that repeats the one that last moved
// the operation records nothing and is answered with replayed true (the
// server's Idempotent-Replayed header): a caller that lost an answer may
// send the same decision again.
func (c *Client) Resolve(ctx context.Context, key string, d opledger.Decision) (op *opledger.Operation, replayed bool, err error) {
	return c.decide(ctx, key, "resolve", string(d.Kind), d)
}

// decide sends a person's decision about key (action is resolve,
// approve or revise; call what the library calls it in its errors: the
// action, or a decision's kind) and reads whether the server answered
// it as a replay.
func (c *Client) decide(ctx context.Context, key, action, call string, body any) (*opledger.Operation, bool, error) {
	if err := opledger.ValidateKey(key); err != nil {
		return nil, false, err
	}
	var op opledger.Operation
	_, h, err := c.do(ctx, http.MethodPost, opPath(key, action), body, &op)
	if err != nil {
		return nil, false, refused(err, call, key, "", 0)
	}
	return &op, h.Get(httpapi.HeaderReplayed) == "true", nil
}

// Stats is GET /v1/stats: the tenant's operation figures and its event
// figures. It encodes with encoding/json as the API sends it.
type Stats struct {
	opledger.Stats
	// Events are the tenant's event figures: events by status,
	// deliveries and duplicate deliveries.
	Events opledger.EventStats `json:"events"`
}

// Stats returns the tenant's figures.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var st Stats
	if _, _, err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &st); err != nil {
		return nil, err
	}
	if st.OperationsByState == nil {
		return nil, otherAnswer(http.MethodGet, "/v1/stats", "the tenant's figures (it has no operations_by_state)")
	}
	return &st, nil
}

// ReceiveEvent posts an inbound event; duplicate is true for a repeated
// delivery (nothing created). An event whose payload is larger than
// opledger.MaxEventPayload is refused (413 payload_too_large) with an
// error matching opledger.ErrEventPayloadTooLarge, as the library's own
// refusal does; a body past a lower limit of the server's with a payload
// within MaxEventPayload matches opledger.ErrInvalidInput only.
func (c *Client) ReceiveEvent(ctx context.Context, ev opledger.Event) (*opledger.EventResult, error) {
	var res opledger.EventResult
	if _, _, err := c.do(ctx, http.MethodPost, "/v1/events", ev, &res); err != nil {
		if e, ok := errors.AsType[*Error](err); ok && e.Kind() == "payload_too_large" {
			// The payload as it was sent (compacted, as the server
			// measures it); the problem does not say which limit refused.
			sent, merr := json.Marshal(ev.Payload)
			e.eventPayload = merr == nil && len(sent) > opledger.MaxEventPayload
		}
		return nil, err
	}
	return &res, nil
}

// ListEvents returns a page of events, newest first.
func (c *Client) ListEvents(ctx context.Context, o opledger.EventListOptions) (*opledger.EventPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"source": o.Source, "status": string(o.Status), "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit != 0 { // a negative one too: the server refuses it, as the library does
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var page opledger.EventPage
	if err := c.getList(ctx, "/v1/events", q, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// GetEvent returns an event with its deliveries and operations.
func (c *Client) GetEvent(ctx context.Context, source, eventID string) (*opledger.EventDetail, error) {
	if err := checkName("event source", source); err != nil {
		return nil, err
	}
	if err := checkName("event id", eventID); err != nil {
		return nil, err
	}
	var d opledger.EventDetail
	path := "/v1/events/" + url.PathEscape(source) + "/" + url.PathEscape(eventID)
	if _, _, err := c.do(ctx, http.MethodGet, path, nil, &d); err != nil {
		return nil, err
	}
	if d.Event == nil || d.Event.Source != source || d.Event.EventID != eventID {
		return nil, otherAnswer(http.MethodGet, path, "the event asked for")
	}
	return &d, nil
}

func workflowPath(key string, rest ...string) string {
	p := "/v1/workflows/" + url.PathEscape(key)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// PutWorkflow records a workflow under key; created is false for a repeat
// with the same steps. Other steps under the same key are refused
// (opledger.ErrFingerprintMismatch).
func (c *Client) PutWorkflow(ctx context.Context, key string, spec opledger.WorkflowSpec) (w *opledger.Workflow, created bool, err error) {
	if err := opledger.ValidateKey(key); err != nil {
		return nil, false, err
	}
	w = new(opledger.Workflow)
	status, _, err := c.do(ctx, http.MethodPut, workflowPath(key), spec, w)
	if err != nil {
		return nil, false, err
	}
	return w, status == http.StatusCreated, nil
}

// GetWorkflow returns a workflow with the state of each step.
func (c *Client) GetWorkflow(ctx context.Context, key string) (*opledger.Workflow, error) {
	w, err := c.workflow(ctx, http.MethodGet, key, nil)
	if err == nil && w.Key != key {
		return nil, otherAnswer(http.MethodGet, workflowPath(key), "the workflow asked for")
	}
	return w, err
}

// ListWorkflows returns a page of the tenant's workflows in key order,
// each with its status and steps, as opledger.Ledger.ListWorkflows. A
// prefix outside the key syntax is refused before anything is sent
// (opledger.ErrInvalidKey), as a key is.
func (c *Client) ListWorkflows(ctx context.Context, o opledger.WorkflowListOptions) (*opledger.WorkflowPage, error) {
	if o.Prefix != "" {
		// The start of a key is a key itself: one outside the syntax is
		// refused before it travels in the URL, as a key is.
		if err := opledger.ValidateKey(o.Prefix); err != nil {
			return nil, fmt.Errorf("prefix: %w", err)
		}
	}
	q := url.Values{}
	for k, v := range map[string]string{"prefix": o.Prefix, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit != 0 { // a negative one too: the server refuses it, as the library does
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Open {
		q.Set("open", "true")
	}
	var page opledger.WorkflowPage
	if err := c.getList(ctx, "/v1/workflows", q, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// StuckWorkflows returns up to limit (1 to
// opledger.MaxWorkflowListLimit) of the tenant's workflows that cannot go
// on by themselves, as opledger.Ledger.StuckWorkflows.
func (c *Client) StuckWorkflows(ctx context.Context, limit int) ([]*opledger.Workflow, error) {
	q := url.Values{"stuck": {"true"}, "limit": {strconv.Itoa(limit)}}
	var page opledger.WorkflowPage
	if err := c.getList(ctx, "/v1/workflows", q, &page); err != nil {
		return nil, err
	}
	return page.Items, nil
}

// ResumeWorkflow advances a workflow now: steps that succeeded are
// skipped, and the next step is recorded once the one before it has
// succeeded.
func (c *Client) ResumeWorkflow(ctx context.Context, key string) (*opledger.Workflow, error) {
	return c.workflow(ctx, http.MethodPost, key, nil, "resume")
}

// ApproveWorkflowStep approves exactly one version and fingerprint of a
// workflow's step. As with opledger.Ledger.ApproveWorkflowStep, an
// approval given already is answered with replayed true.
func (c *Client) ApproveWorkflowStep(ctx context.Context, key, step string, a opledger.Approval) (w *opledger.Workflow, replayed bool, err error) {
	if err := checkStep(step); err != nil {
		return nil, false, err
	}
	w, h, err := c.workflowAnswer(ctx, http.MethodPost, key, a, "steps", step, "approve")
	if err != nil {
		return nil, false, err
	}
	return w, h.Get(httpapi.HeaderReplayed) == "true", nil
}

// ReviseWorkflowStep gives a step not yet dispatched new content. As with
// Revise, the payload is required (json.RawMessage("null") for none).
func (c *Client) ReviseWorkflowStep(ctx context.Context, key, step string, r opledger.Revision) (w *opledger.Workflow, replayed bool, err error) {
	if err := checkStep(step); err != nil {
		return nil, false, err
	}
	if len(r.Payload) == 0 {
		return nil, false, invalidInput("revise needs the new payload (JSON null for none)")
	}
	w, h, err := c.workflowAnswer(ctx, http.MethodPost, key, r, "steps", step, "revise")
	if err != nil {
		return nil, false, err
	}
	return w, h.Get(httpapi.HeaderReplayed) == "true", nil
}

// CancelWorkflow gives up on a workflow whose current step has no
// operation (a stuck one) or whose current step's operation failed. As
// with opledger.Ledger.CancelWorkflow, the reason is required and the same
// decision again is answered with replayed true.
func (c *Client) CancelWorkflow(ctx context.Context, key string, d opledger.WorkflowCancel) (w *opledger.Workflow, replayed bool, err error) {
	w, h, err := c.workflowAnswer(ctx, http.MethodPost, key, d, "cancel")
	if err != nil {
		return nil, false, err
	}
	return w, h.Get(httpapi.HeaderReplayed) == "true", nil
}

// workflow sends a request about the workflow key and decodes the
// workflow it answers with.
func (c *Client) workflow(ctx context.Context, method, key string, body any, rest ...string) (*opledger.Workflow, error) {
	w, _, err := c.workflowAnswer(ctx, method, key, body, rest...)
	return w, err
}

// workflowAnswer is workflow, with the answer's headers.
func (c *Client) workflowAnswer(ctx context.Context, method, key string, body any, rest ...string) (*opledger.Workflow, http.Header, error) {
	if err := opledger.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	var w opledger.Workflow
	_, h, err := c.do(ctx, method, workflowPath(key, rest...), body, &w)
	if err != nil {
		return nil, nil, err
	}
	return &w, h, nil
}

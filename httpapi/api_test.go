package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// observer is a slog handler that records which status each route
// answered, and with which problem type, so a test can check every
// documented status was produced and every problem type produced is
// documented.
type observer struct {
	mu   sync.Mutex
	seen map[string]bool // "METHOD /pattern STATUS"
	// kinds are the problem types answered: "METHOD /pattern STATUS KIND".
	kinds map[string]bool
}

func (o *observer) Enabled(context.Context, slog.Level) bool { return true }
func (o *observer) WithAttrs([]slog.Attr) slog.Handler       { return o }
func (o *observer) WithGroup(string) slog.Handler            { return o }
func (o *observer) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "request" {
		return nil
	}
	var route, problem string
	var status int64
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "route":
			route = a.Value.String()
		case "status":
			status = a.Value.Int64()
		case "problem":
			problem = a.Value.String()
		}
		return true
	})
	o.mu.Lock()
	o.seen[route+" "+strconv.FormatInt(status, 10)] = true
	if problem != "" {
		if o.kinds == nil {
			o.kinds = map[string]bool{}
		}
		o.kinds[route+" "+strconv.FormatInt(status, 10)+" "+problem] = true
	}
	o.mu.Unlock()
	return nil
}

// offsetClock moves the ledger's time forward without sleeping.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) advance(d time.Duration)   { c.d.Add(int64(d)) }
func (c *offsetClock) now(t time.Time) time.Time { return t.Add(time.Duration(c.d.Load())) }

type apiBundle struct {
	url        string
	ledger     *opledger.Ledger
	acme       *client.Client
	other      *client.Client
	token      string
	otherToken string
	// readToken is a read-only token of acme's.
	readToken string
	clock     *offsetClock
	obs       *observer
}

// startAPI runs a real server on a loopback port over a fresh store.
func startAPI(t *testing.T, dsn string, obs *observer) *apiBundle {
	t.Helper()
	return startAPIWith(t, dsn, obs, httpapi.Options{})
}

// startAPIWith is startAPI with API options (rules, webhooks).
func startAPIWith(t *testing.T, dsn string, obs *observer, api httpapi.Options) *apiBundle {
	t.Helper()
	ctx := context.Background()
	clock := &offsetClock{}
	l, err := opledger.Open(ctx, dsn, opledger.Options{Clock: clock.now, Lease: 10 * time.Second,
		RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, MaxDelay: time.Minute}})
	require.NoError(t, err)
	acmeLedger, err := l.WithTenant("acme")
	require.NoError(t, err)
	acmeToken, _, err := acmeLedger.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	readToken, _, err := acmeLedger.CreateToken(ctx, "dashboard", opledger.ReadOnly)
	require.NoError(t, err)
	otherLedger, err := l.WithTenant("other")
	require.NoError(t, err)
	otherToken, _, err := otherLedger.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)

	var log *slog.Logger
	if obs != nil {
		log = slog.New(obs)
	} else {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := testrig.Serve(t, l, server.Config{Logger: log, SweepInterval: time.Hour, API: api})
	return &apiBundle{url: srv.URL(), ledger: acmeLedger, token: acmeToken, otherToken: otherToken, readToken: readToken, clock: clock, obs: obs,
		acme: client.New(srv.URL(), acmeToken, nil), other: client.New(srv.URL(), otherToken, nil)}
}

// raw sends a request and returns the status and body.
func (b *apiBundle) raw(t *testing.T, method, path, token string, body []byte) (int, []byte) {
	t.Helper()
	return b.rawWith(t, method, path, token, body, nil)
}

// rawWith is raw with extra headers.
func (b *apiBundle) rawWith(t *testing.T, method, path, token string, body []byte, hdr http.Header) (int, []byte) {
	t.Helper()
	status, _, data := b.rawHeaders(t, method, path, token, body, hdr)
	return status, data
}

// rawHeaders is rawWith that also returns the answer's headers. It
// checks on every answer the headers the OpenAPI document declares
// (TestResponseHeadersDocumented): X-Request-Id always, WWW-Authenticate
// on a 401, Retry-After on a 503 store_busy or unavailable.
func (b *apiBundle) rawHeaders(t *testing.T, method, path, token string, body []byte, hdr http.Header) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	requireDeclaredHeaders(t, method+" "+path, resp, data)
	return resp.StatusCode, resp.Header, data
}

// requireDeclaredHeaders checks that an answer carries the headers the
// OpenAPI document declares for its status (TestResponseHeadersDocumented).
func requireDeclaredHeaders(t *testing.T, request string, resp *http.Response, data []byte) {
	t.Helper()
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "%s: every answer carries X-Request-Id", request)
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		require.Regexp(t, `^(Bearer|Signature) realm="opledger"`, resp.Header.Get("WWW-Authenticate"), "%s: a 401 carries WWW-Authenticate", request)
	case http.StatusServiceUnavailable:
		if kind := problemKind(t, data); kind == "store_busy" || kind == "unavailable" {
			require.NotEmpty(t, resp.Header.Get("Retry-After"), "%s: %s carries Retry-After", request, kind)
		}
	}
}

func problemKind(t *testing.T, body []byte) string {
	t.Helper()
	var p httpapi.Problem
	require.NoError(t, json.Unmarshal(body, &p), string(body))
	return strings.TrimPrefix(p.Type, httpapi.ProblemTypeBase)
}

func intent(units int) client.Intent {
	return client.Intent{Action: "crm.create", Destination: "crm", Owner: "ops",
		Payload: json.RawMessage(`{"units":` + strconv.Itoa(units) + `,"email":"ana@example.invalid"}`), SensitiveFields: []string{"email"}}
}

// TestAPI drives every route to every documented status code on both
// stores, then checks the OpenAPI document against what was observed.
func TestAPI(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			obs := &observer{seen: map[string]bool{}}
			b := startAPIWith(t, st.NewDSN(t), obs, apiOptions(t))
			exerciseAPI(t, b)
			exerciseEventsAndWorkflows(t, b)
			requireDocumentedStatuses(t, obs)
			requireDocumentedKinds(t, obs)
		})
	}
}

func exerciseAPI(t *testing.T, b *apiBundle) {
	ctx := context.Background()
	tok := b.token
	big := []byte(`{"action":"a","destination":"d","payload":"` + strings.Repeat("x", 1<<20) + `"}`)
	expect := func(method, path string, body []byte, want int, kind string) []byte {
		t.Helper()
		status, data := b.raw(t, method, path, tok, body)
		require.Equal(t, want, status, "%s %s: %s", method, path, data)
		if kind != "" {
			require.Equal(t, kind, problemKind(t, data))
		}
		return data
	}

	// Authentication on every authenticated route; and a read-only token
	// is refused every write, before its body is read, and records
	// nothing, while it reads like any other token of its tenant.
	for _, pattern := range httpapi.Routes() {
		method, path, _ := strings.Cut(pattern, " ")
		if path == "/healthz" || path == "/readyz" || path == "/metrics" || path == "/v1/openapi.json" || strings.HasPrefix(path, "/v1/webhooks/") {
			continue
		}
		path = strings.NewReplacer("{key}", "ro1", "{id}", "01J000000000000000000000AA", "{source}", "forms",
			"{event_id}", "e1", "{step}", "s1").Replace(path)
		for _, token := range []string{"", "opl_wrong"} {
			status, data := b.raw(t, method, path, token, []byte(`{}`))
			require.Equal(t, http.StatusUnauthorized, status, "%s %s without a valid token", method, path)
			require.Equal(t, "unauthorized", problemKind(t, data))
		}
		// Two Authorization fields, even with a valid token first.
		status, data := b.rawWith(t, method, path, "", []byte(`{}`), http.Header{"Authorization": {"Bearer " + tok, "Bearer opl_other"}})
		require.Equal(t, http.StatusUnauthorized, status, "%s %s with two Authorization headers", method, path)
		require.Contains(t, string(data), "send one Authorization header, not several")
		body := []byte(`{"action":"a","destination":"d","worker":"w","source":"forms","event_id":"e1","type":"t"}`)
		status, data = b.raw(t, method, path, b.readToken, body)
		if method == http.MethodGet {
			require.Contains(t, []int{http.StatusOK, http.StatusNotFound}, status, "%s %s with a read-only token: %s", method, path, data)
			continue
		}
		require.Equal(t, http.StatusForbidden, status, "%s %s with a read-only token: %s", method, path, data)
		require.Equal(t, "forbidden", problemKind(t, data))
		require.Contains(t, string(data), "is read-only: it may use the GET routes only")
	}
	readOnly := client.New(b.url, b.readToken, nil)
	_, _, err := readOnly.Record(ctx, "ro1", intent(1))
	require.ErrorIs(t, err, opledger.ErrForbidden, "the client's error says why")
	_, err = b.acme.Get(ctx, "ro1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "a read-only token's PUT and claim recorded nothing")
	events, err := b.acme.ListEvents(ctx, opledger.EventListOptions{})
	require.NoError(t, err)
	require.Empty(t, events.Items, "a read-only token's event recorded nothing")

	// A body sent with a content coding, on every route that takes one
	// (the webhook route too, before its signature is checked): 415,
	// naming the one coding taken.
	for _, pattern := range bodyRoutes(t) {
		method, path, _ := strings.Cut(pattern, " ")
		token := tok
		if strings.HasPrefix(path, "/v1/webhooks/") {
			token = "" // signed, not authenticated
		}
		path = strings.NewReplacer("{key}", "k1", "{id}", "01J000000000000000000000AA", "{source}", "stripe",
			"{step}", "s1").Replace(path)
		status, header, data := b.rawHeaders(t, method, path, token, []byte(`{}`), http.Header{"Content-Encoding": {"gzip"}})
		require.Equal(t, http.StatusUnsupportedMediaType, status, "%s %s: %s", method, path, data)
		require.Equal(t, "unsupported_media", problemKind(t, data), pattern)
		require.Equal(t, "identity", header.Get("Accept-Encoding"), pattern)
	}

	// The scheme's name in any case; the token itself exactly.
	status, _ := b.rawWith(t, "GET", "/v1/stats", "", nil, http.Header{"Authorization": {"bearer " + tok}})
	require.Equal(t, http.StatusOK, status)
	status, _ = b.rawWith(t, "GET", "/v1/stats", "", nil, http.Header{"Authorization": {"Basic " + tok}})
	require.Equal(t, http.StatusUnauthorized, status)

	// Record.
	op, created, err := b.acme.Record(ctx, "order:17:prepare", intent(2))
	require.NoError(t, err)
	require.True(t, created)
	require.NotContains(t, mustJSON(t, op), "ana@example.invalid", "sensitive field masked")
	_, created, err = b.acme.Record(ctx, "order:17:prepare", intent(2))
	require.NoError(t, err)
	require.False(t, created)
	_, _, err = b.acme.Record(ctx, "order:17:prepare", intent(3))
	require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, http.StatusUnprocessableEntity, ce.Status)
	require.Equal(t, opledger.StatePending, ce.Problem.State, "the state in the body")
	expect("PUT", "/v1/operations/ana%40example.com", []byte(`{"action":"a","destination":"d"}`), 400, "invalid_key")
	data := expect("PUT", "/v1/operations/k1", []byte("{\"action\":\"a\",\n\"destination\":}"), 400, "invalid_json")
	require.Contains(t, string(data), "line 2")
	expect("PUT", "/v1/operations/k1", []byte(`{"action":"a","destination":"d","colour":"red"}`), 400, "invalid_json")
	for _, body := range []string{`{"action":"a","destination":"d"}}`, `{"action":"a","destination":"d"}]`, `{"action":"a","destination":"d"} x`} {
		data := expect("PUT", "/v1/operations/k1", []byte(body), 400, "invalid_json")
		require.Contains(t, string(data), "after the JSON object at byte 32", body)
	}
	for _, body := range []string{`null`, `[]`, `"x"`, ` 7`} {
		data := expect("POST", "/v1/operations/order:17:prepare/claim", []byte(body), 400, "invalid_json")
		require.Contains(t, string(data), "must be a JSON object", body)
	}
	expect("PUT", "/v1/operations/k1", []byte(`{"action":"a","destination":"d","payload":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`}`), 400, "invalid_json")
	expect("PUT", "/v1/operations/k1", big, 413, "payload_too_large")
	expect("PUT", "/v1/operations/k1", []byte(`{"action":"a"}`), 400, "invalid_input")

	// Get and list.
	d, err := b.acme.Get(ctx, "order:17:prepare")
	require.NoError(t, err)
	require.Len(t, d.Timeline, 1)
	expect("GET", "/v1/operations/nope", nil, 404, "not_found")
	expect("GET", "/v1/operations/-bad", nil, 400, "invalid_key")
	page, err := b.acme.List(ctx, opledger.ListOptions{States: []opledger.State{opledger.StatePending}})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	expect("GET", "/v1/operations?limit=abc", nil, 400, "invalid_input")
	expect("GET", "/v1/operations?state=done", nil, 400, "invalid_input")

	// Claim, dispatch, outcome.
	c, err := b.acme.Claim(ctx, "order:17:prepare", client.ClaimRequest{Worker: "w1"})
	require.NoError(t, err)
	_, err = b.acme.Claim(ctx, "order:17:prepare", client.ClaimRequest{Worker: "w2"})
	require.ErrorIs(t, err, opledger.ErrInProgress)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, http.StatusConflict, ce.Status)
	require.Equal(t, opledger.StateInProgress, ce.Problem.State)
	expect("POST", "/v1/operations/nope/claim", []byte(`{}`), 404, "not_found")
	expect("POST", "/v1/operations/order:17:prepare/claim", []byte(`{"worker":`), 400, "invalid_json")
	expect("POST", "/v1/operations/order:17:prepare/claim", big, 413, "payload_too_large")
	other := intent(3)
	_, err = b.acme.Claim(ctx, "order:17:prepare", client.ClaimRequest{Intent: &other})
	require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)

	attemptPath := "/v1/operations/order:17:prepare/attempts/" + c.AttemptID
	data = expect("POST", attemptPath+"/dispatch", []byte(`{"fencing_token":99}`), 409, "stale_fencing_token")
	var staleProblem httpapi.Problem
	require.NoError(t, json.Unmarshal(data, &staleProblem))
	require.Equal(t, c.FencingToken, staleProblem.AttemptToken, "the token the attempt was issued")
	require.Equal(t, c.FencingToken, staleProblem.Operation.FencingToken)
	expect("POST", "/v1/operations/order:17:prepare/attempts/01J000000000000000000000AA/dispatch", []byte(`{"fencing_token":1}`), 404, "not_found")
	expect("POST", attemptPath+"/dispatch", []byte(`{"fencing_token":"one"}`), 400, "invalid_json")
	data = expect("POST", attemptPath+"/dispatch", []byte(`{}`), 400, "invalid_input")
	require.Contains(t, string(data), "fencing_token is required")
	data = expect("POST", attemptPath+"/outcome", []byte(`{"outcome":"uncertain"}`), 400, "invalid_input")
	require.Contains(t, string(data), "fencing_token is required")
	expect("POST", attemptPath+"/dispatch", big, 413, "payload_too_large")
	expect("POST", attemptPath+"/release", []byte(`{"fencing_token":99}`), 409, "stale_fencing_token")
	data = expect("POST", attemptPath+"/release", []byte(`{"reason":"shutting down"}`), 400, "invalid_input")
	require.Contains(t, string(data), "fencing_token is required")
	expect("POST", attemptPath+"/release", big, 413, "payload_too_large")
	expect("POST", "/v1/operations/order:17:prepare/attempts/01J000000000000000000000AA/release", []byte(`{"fencing_token":1}`), 404, "not_found")
	_, err = b.acme.Dispatch(ctx, "order:17:prepare", c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	// Dispatched: its call may have gone out, so it cannot be given back.
	data = expect("POST", attemptPath+"/release", []byte(`{"fencing_token":1}`), 409, "invalid_state")
	require.Contains(t, string(data), "attempt already dispatched")
	requireProblemState(t, data, opledger.StateInProgress)
	// A claim given back before its dispatch: due again at once.
	spare := intent(1)
	sc, err := b.acme.Claim(ctx, "order:17:spare", client.ClaimRequest{Worker: "w1", Intent: &spare})
	require.NoError(t, err)
	released, err := b.acme.Release(ctx, "order:17:spare", sc.AttemptID, sc.FencingToken, "not now")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, released.State)
	// A call longer than the lease keeps it.
	extended, err := b.acme.ExtendLease(ctx, "order:17:prepare", c.AttemptID, c.FencingToken, time.Hour)
	require.NoError(t, err)
	require.True(t, extended.LeaseExpiresAt.After(c.LeaseExpiresAt), "%s", extended.LeaseExpiresAt)
	expect("POST", attemptPath+"/lease", []byte(`{"fencing_token":99,"lease_seconds":60}`), 409, "stale_fencing_token")
	data = expect("POST", attemptPath+"/lease", []byte(`{"fencing_token":1}`), 400, "invalid_input")
	require.Contains(t, string(data), "lease_seconds is required")
	expect("POST", attemptPath+"/lease", []byte(`{"lease_seconds":60}`), 400, "invalid_input")
	for _, v := range []string{"-1", "604801"} {
		data = expect("POST", attemptPath+"/lease", []byte(`{"fencing_token":1,"lease_seconds":`+v+`}`), 400, "invalid_input")
		require.Contains(t, string(data), "lease_seconds is required, more than 0 and at most 604800", "not \"between 0 and\": 0 is refused here")
	}
	expect("POST", attemptPath+"/lease", big, 413, "payload_too_large")
	expect("POST", "/v1/operations/order:17:prepare/attempts/01J000000000000000000000AA/lease", []byte(`{"fencing_token":1,"lease_seconds":60}`), 404, "not_found")
	expect("POST", attemptPath+"/outcome", []byte(`{"fencing_token":1,"outcome":"done"}`), 400, "invalid_input")
	expect("POST", attemptPath+"/outcome", big, 413, "payload_too_large")
	expect("POST", "/v1/operations/order:17:prepare/attempts/01J000000000000000000000AA/outcome", []byte(`{"fencing_token":1,"outcome":"uncertain"}`), 404, "not_found")
	res, err := b.acme.Report(ctx, "order:17:prepare", c.AttemptID, client.Report{FencingToken: c.FencingToken,
		Outcome: opledger.OutcomeSucceeded, DestinationRef: "CRM-1", Response: json.RawMessage(`{"id":"CRM-1"}`)})
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, res.State)
	require.False(t, res.StaleReport)
	res, err = b.acme.Report(ctx, "order:17:prepare", c.AttemptID, client.Report{FencingToken: c.FencingToken,
		Outcome: opledger.OutcomeSucceeded, DestinationRef: "CRM-2"})
	require.NoError(t, err, "a stale report answers 200")
	require.True(t, res.StaleReport)
	require.Equal(t, 1, res.DuplicateEffects, "a second ref is a duplicate effect")

	// A repeat claim replays the saved result.
	_, err = b.acme.Claim(ctx, "order:17:prepare", client.ClaimRequest{})
	var replay *client.ReplayError
	require.ErrorAs(t, err, &replay)
	require.Equal(t, "CRM-1", replay.Operation.DestinationRef)
	require.JSONEq(t, `{"id":"CRM-1"}`, string(replay.Operation.Response))

	// Reconcile, after a claim that was dispatched in its own write: the
	// claim answers with the operation dispatched, the attempt carries
	// the time, and an uncertain outcome needs no Dispatch call first.
	expect("POST", "/v1/operations/order:18:prepare/claim", []byte(`{"dispatch":"yes"}`), 400, "invalid_json")
	in := intent(4)
	c, err = b.acme.Claim(ctx, "order:18:prepare", client.ClaimRequest{Intent: &in, Dispatch: true})
	require.NoError(t, err)
	require.True(t, c.Operation.Dispatched)
	require.NotNil(t, c.Operation.FirstDispatchedAt)
	detail, err := b.acme.Get(ctx, "order:18:prepare")
	require.NoError(t, err)
	require.Len(t, detail.Attempts, 1)
	require.NotNil(t, detail.Attempts[0].DispatchedAt)
	require.True(t, c.Operation.FirstDispatchedAt.Equal(*detail.Attempts[0].DispatchedAt))
	_, err = b.acme.Report(ctx, "order:18:prepare", c.AttemptID, client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	// A success with a token no claim of this attempt issued is refused,
	// not kept as a late report: the operation stays uncertain.
	expect("POST", "/v1/operations/order:18:prepare/attempts/"+c.AttemptID+"/outcome",
		[]byte(`{"fencing_token":999,"outcome":"succeeded","destination_ref":"FAKE"}`), 409, "stale_fencing_token")
	detail, err = b.acme.Get(ctx, "order:18:prepare")
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, detail.State)
	require.Empty(t, detail.Attempts[0].DestinationRef)
	expect("POST", "/v1/operations/order:18:prepare/reconcile", []byte(`{"visibility_delay_seconds":-1}`), 400, "invalid_input")
	// The bounds openapi.json gives (maximum), each refused one past it.
	expect("POST", "/v1/operations/order:18:prepare/reconcile", []byte(`{"visibility_delay_seconds":604801}`), 400, "invalid_input")
	out := expect("POST", "/v1/operations/order:18:prepare/reconcile", []byte(`{"protection_retention_seconds":34560001}`), 400, "invalid_input")
	require.Contains(t, string(out), "protection_retention_seconds must be between 0 and 34560000")
	expect("POST", "/v1/operations/order:18:prepare/reconcile", big, 413, "payload_too_large")
	expect("POST", "/v1/operations/nope/reconcile", []byte(`{"found":false}`), 404, "not_found")
	expect("POST", "/v1/operations/order:18:prepare/reconcile", []byte(`{"authoritative":true}`), 400, "invalid_input") // found left out of a lookup
	expect("POST", "/v1/operations/order:18:prepare/reconcile", []byte(`{"attempt_count":-1}`), 400, "invalid_input")
	// A count the operation never had is bad input.
	_, _, err = b.acme.Reconcile(ctx, "order:18:prepare", client.Finding{Authoritative: true, AttemptCount: 7})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "attempt_count 7 is more attempts than the operation has had (1)")
	// A finding made for an earlier attempt than the operation's latest
	// is refused: nothing recorded, the reconciler looks again.
	stale := intent(6)
	c, err = b.acme.Claim(ctx, "order:18:stale", client.ClaimRequest{Intent: &stale, Dispatch: true})
	require.NoError(t, err)
	_, err = b.acme.Report(ctx, "order:18:stale", c.AttemptID, client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	_, _, err = b.acme.Resolve(ctx, "order:18:stale", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "not in the CRM"})
	require.NoError(t, err)
	c, err = b.acme.Claim(ctx, "order:18:stale", client.ClaimRequest{Dispatch: true})
	require.NoError(t, err)
	_, err = b.acme.Report(ctx, "order:18:stale", c.AttemptID, client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	_, _, err = b.acme.Reconcile(ctx, "order:18:stale", client.Finding{Authoritative: true, AttemptCount: 1})
	require.ErrorIs(t, err, opledger.ErrStaleFinding)
	data = expect("POST", "/v1/operations/order:18:stale/reconcile", []byte(`{"found":false,"authoritative":true,"attempt_count":1}`), 409, "stale_finding")
	requireProblemState(t, data, opledger.StateUncertain)
	// A protection needs no found: the destination's idempotency key
	// keeps a retry from acting twice, whatever a lookup would find.
	expect("POST", "/v1/operations/order:18:stale/reconcile", []byte(`{"protection_retention_seconds":3600,"evidence":"idempotency key"}`), 200, "")
	protected, err := b.acme.Get(ctx, "order:18:stale")
	require.NoError(t, err)
	require.True(t, protected.Protected, "the protection was applied")
	op, _, err = b.acme.Reconcile(ctx, "order:18:prepare", client.Finding{Evidence: "no lookup", AttemptCount: 1})
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State)
	// A finding sent through the API names the token it came with.
	signedIn, err := b.ledger.Authenticate(ctx, b.token)
	require.NoError(t, err)
	detail, err = b.acme.Get(ctx, "order:18:prepare")
	require.NoError(t, err)
	require.Equal(t, "reconciler (token test, "+signedIn.ID+")", detail.Timeline[len(detail.Timeline)-1].Actor)
	expect("POST", "/v1/operations/order:18:prepare/reconcile", []byte(`{"found":false}`), 409, "invalid_state")

	// Resolve.
	expect("POST", "/v1/operations/order:18:prepare/resolve", []byte(`{"decision":"cancel","reason":""}`), 400, "reason_required")
	expect("POST", "/v1/operations/order:18:prepare/resolve", big, 413, "payload_too_large")
	expect("POST", "/v1/operations/nope/resolve", []byte(`{"decision":"cancel","reason":"x"}`), 404, "not_found")
	// A decision on the operation as seen before its last change: refused.
	seen := op.UpdatedAt.Add(-time.Millisecond).Format(time.RFC3339Nano)
	data = expect("POST", "/v1/operations/order:18:prepare/resolve", []byte(`{"decision":"cancel","reason":"x","seen_updated_at":"`+seen+`"}`), 409, "stale_decision")
	requireProblemState(t, data, opledger.StateHeld)
	_, _, err = b.acme.Resolve(ctx, "order:18:prepare", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "x", SeenUpdatedAt: op.UpdatedAt.Add(-time.Millisecond)})
	require.ErrorIs(t, err, opledger.ErrStaleDecision)
	// As seen in the API's own answer: taken.
	op, _, err = b.acme.Resolve(ctx, "order:18:prepare", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "CRM-9", Reason: "found in CRM", Operator: "maria", SeenUpdatedAt: op.UpdatedAt})
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, op.State)
	// The decision names who said they took it and the token it came with.
	detail, err = b.acme.Get(ctx, "order:18:prepare")
	require.NoError(t, err)
	require.Equal(t, "maria (token test, "+signedIn.ID+")", detail.Timeline[len(detail.Timeline)-1].Actor)
	expect("POST", "/v1/operations/order:18:prepare/resolve", []byte(`{"decision":"cancel","reason":"x"}`), 409, "invalid_state")
	// The same decision again (its answer lost, say): 200 with
	// Idempotent-Replayed, and nothing recorded.
	again, replayed, err := b.acme.Resolve(ctx, "order:18:prepare", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "CRM-9", Reason: "found in CRM", Operator: "maria", SeenUpdatedAt: op.UpdatedAt})
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, op.UpdatedAt, again.UpdatedAt)
	after, err := b.acme.Get(ctx, "order:18:prepare")
	require.NoError(t, err)
	require.Len(t, after.Timeline, len(detail.Timeline))
	expect("POST", "/v1/operations/order:18:prepare/resolve", []byte(`{"decision":"mark_succeeded","destination_ref":"CRM-10","reason":"found in CRM","operator":"maria"}`), 409, "invalid_state")

	// Approve and revise.
	appr := intent(5)
	appr.RequiresApproval = true
	op, _, err = b.acme.Record(ctx, "order:19:prepare", appr)
	require.NoError(t, err)
	expect("POST", "/v1/operations/order:19:prepare/approve", []byte(`{"version":1,"fingerprint":"sha256:00","approver":"lead"}`), 409, "fingerprint_mismatch")
	expect("POST", "/v1/operations/order:19:prepare/approve", []byte(`{"version":1,"fingerprint":"x"}`), 400, "invalid_input")
	expect("POST", "/v1/operations/order:19:prepare/approve", []byte(`{"fingerprint":"x","approver":"lead"}`), 400, "invalid_input")
	expect("POST", "/v1/operations/order:19:prepare/approve", big, 413, "payload_too_large")
	expect("POST", "/v1/operations/nope/approve", []byte(`{"version":1,"fingerprint":"x","approver":"a"}`), 404, "not_found")
	expect("POST", "/v1/operations/order:19:prepare/revise", []byte(`{"payload":{"units":6},"version":1}`), 400, "invalid_input")
	expect("POST", "/v1/operations/order:19:prepare/revise", big, 413, "payload_too_large")
	expect("POST", "/v1/operations/nope/revise", []byte(`{"payload":{},"version":2}`), 404, "not_found")
	data = expect("POST", "/v1/operations/order:19:prepare/revise", []byte(`{"version":2}`), 400, "invalid_input")
	require.Contains(t, string(data), "needs the new payload")
	expect("POST", "/v1/operations/order:19:prepare/revise", []byte(`{"payload":{},"version":2,"actor":"`+strings.Repeat("a", 201)+`"}`), 400, "invalid_input")
	detail, err = b.acme.Get(ctx, "order:19:prepare")
	require.NoError(t, err)
	require.Equal(t, op.Fingerprint, detail.Fingerprint, "refused revisions change nothing")
	require.Equal(t, op.Version, detail.Version)
	op, _, err = b.acme.Revise(ctx, "order:19:prepare", opledger.Revision{Payload: json.RawMessage(`{"units":6}`), Version: 2})
	require.NoError(t, err)
	// Sent again: 200 with Idempotent-Replayed, nothing recorded.
	again, replayed, err = b.acme.Revise(ctx, "order:19:prepare", opledger.Revision{Payload: json.RawMessage(`{"units":6}`), Version: 2})
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, op.UpdatedAt, again.UpdatedAt)
	op, _, err = b.acme.Approve(ctx, "order:19:prepare", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lead"})
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	// The same approval again: 200 with Idempotent-Replayed, nothing
	// recorded; another approver's is refused, the operation awaits none.
	before, err := b.acme.Get(ctx, "order:19:prepare")
	require.NoError(t, err)
	again, replayed, err = b.acme.Approve(ctx, "order:19:prepare", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lead"})
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, op.UpdatedAt, again.UpdatedAt)
	after, err = b.acme.Get(ctx, "order:19:prepare")
	require.NoError(t, err)
	require.Len(t, after.Timeline, len(before.Timeline))
	expect("POST", "/v1/operations/order:19:prepare/approve", []byte(`{"version":2,"fingerprint":"`+op.Fingerprint+`","approver":"deputy"}`), 409, "invalid_state")
	c, err = b.acme.Claim(ctx, "order:19:prepare", client.ClaimRequest{})
	require.NoError(t, err)
	_, err = b.acme.Dispatch(ctx, "order:19:prepare", c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	expect("POST", "/v1/operations/order:19:prepare/revise", []byte(`{"payload":{"units":7},"version":3}`), 409, "in_progress")

	// A route's path with another method: 405 with Allow; no route: 404.
	status, data = b.raw(t, "DELETE", "/v1/operations/order:19:prepare", tok, nil)
	require.Equal(t, http.StatusMethodNotAllowed, status)
	require.Equal(t, "method_not_allowed", problemKind(t, data))
	require.Contains(t, string(data), "this route takes GET, HEAD, PUT")
	req, err := http.NewRequest("DELETE", b.url+"/v1/operations/order:19:prepare", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "GET, HEAD, PUT", resp.Header.Get("Allow"))
	// HEAD is answered where GET is, as Allow says.
	req.Method = "HEAD"
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	status, data = b.raw(t, "POST", "/healthz", "", nil)
	require.Equal(t, http.StatusMethodNotAllowed, status)
	require.Equal(t, "method_not_allowed", problemKind(t, data))
	data = expect("GET", "/v1/no/such/thing", nil, 404, "not_found")
	require.Contains(t, string(data), `"detail":"no such route: GET /v1/no/such/thing"`)
	require.Contains(t, string(data), `"instance":"/v1/no/such/thing"`)
	// A path with a part no key may be (an e-mail address, say) is not
	// repeated, in the detail or as the instance; under a route that
	// takes keys, the detail says how a "/" in one is written.
	for _, path := range []string{"/v1/operations/ana@example.invalid/x", "/v1/operations/wf-17/create"} {
		data = expect("GET", path, nil, 404, "not_found")
		require.Contains(t, string(data), `a key or name holding \"/\" is written %2F in a path`)
		if strings.Contains(path, "@") {
			require.NotContains(t, string(data), "ana@example")
			require.NotContains(t, string(data), `"instance"`)
			require.Contains(t, string(data), "not repeated")
		} else {
			require.Contains(t, string(data), `"instance":"/v1/operations/wf-17/create"`)
		}
	}
	status, data = b.raw(t, "DELETE", "/v1/operations/ana@example.invalid", tok, nil)
	require.Equal(t, http.StatusMethodNotAllowed, status)
	require.NotContains(t, string(data), "ana@example", "405 neither")

	// Stats, health, metrics, the document.
	stats, err := b.acme.Stats(ctx)
	require.NoError(t, err)
	expect("GET", "/v1/stats?all_tenants=true", nil, 400, "invalid_input") // takes no parameters
	require.Equal(t, 2, stats.ConfirmedEffects)
	require.Equal(t, 1, stats.DuplicateEffects)
	require.Equal(t, 2, stats.Recoveries) // order:18:prepare marked succeeded, order:18:stale retried
	expect("GET", "/healthz", nil, 200, "")
	expect("GET", "/readyz", nil, 200, "")
	// The one operation with a duplicate effect, listed alone.
	var dups opledger.Page
	require.NoError(t, json.Unmarshal(expect("GET", "/v1/operations?duplicate_effects=true", nil, 200, ""), &dups))
	require.Len(t, dups.Items, 1)
	require.Equal(t, 1, dups.Items[0].DuplicateEffects)
	dupPage, err := b.acme.List(ctx, opledger.ListOptions{DuplicateEffects: true})
	require.NoError(t, err)
	require.Equal(t, dups.Items[0].Key, dupPage.Items[0].Key, "the client passes the filter")
	expect("GET", "/v1/operations?duplicate_effects=maybe", nil, 400, "invalid_input")
	metrics := string(expect("GET", "/metrics", nil, 200, ""))
	require.Contains(t, metrics, `opledger_operations{state="in_progress"} 1`)
	require.Contains(t, metrics, `opledger_duplicate_effects_total 1`)
	require.Contains(t, metrics, `opledger_attempts_total{destination="crm",outcome="succeeded"} 1`)
	// order:19's attempt is running: a gauge counts it, not the counter,
	// which must never go down when the attempt ends.
	require.Contains(t, metrics, `opledger_attempts_open{destination="crm"} 1`)
	require.NotContains(t, metrics, `outcome="open"`)
	// Every outcome of a destination with attempts has its series, at 0
	// until one counts: the first lease expiry is then an increase.
	require.Contains(t, metrics, `opledger_attempts_total{destination="crm",outcome="lease_expired"} 0`)
	require.Contains(t, metrics, `opledger_attempts_total{destination="crm",outcome="rejected"} 0`)
	require.Contains(t, metrics, `opledger_attempts_total{destination="crm",outcome="abandoned"} 1`, "order:17:spare's release")
	require.NotContains(t, metrics, "order:", "no keys in metrics")
	doc := expect("GET", "/v1/openapi.json", nil, 200, "")
	require.JSONEq(t, string(httpapi.OpenAPI), string(doc))
	expect("GET", "/v1/nothing-here", nil, 404, "not_found")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// requireDocumentedStatuses checks that every (route, status) pair in the
// OpenAPI document was produced by the test.
func requireDocumentedStatuses(t *testing.T, obs *observer) {
	t.Helper()
	for _, want := range documentedStatuses(t) {
		if want == "GET /readyz 503" {
			continue // TestReadyzUnavailable
		}
		if strings.HasSuffix(want, " 503") {
			continue // every write route's: TestNewerSchemaStopsTheServer
		}
		if strings.HasSuffix(want, " 408") {
			continue // every body route's: TestStalledBodyDocumented
		}
		require.True(t, obs.seen[want], "documented but never produced: %s", want)
	}
}

// requireDocumentedKinds checks that every problem type a route answered
// with is named in the OpenAPI document's description of that status, so
// that a caller reading it knows every type to expect.
func requireDocumentedKinds(t *testing.T, obs *observer) {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Description string `json:"description"`
			} `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(httpapi.OpenAPI, &doc))
	require.NotEmpty(t, obs.kinds)
	for seen := range obs.kinds {
		if strings.HasPrefix(seen, "/ ") {
			continue // no route took it (404, 405): the Errors section of api.md
		}
		parts := strings.Fields(seen)
		require.Len(t, parts, 4, seen)
		method, path, status, kind := parts[0], parts[1], parts[2], parts[3]
		description := doc.Paths[path][strings.ToLower(method)].Responses[status].Description
		require.Regexp(t, `\b`+kind+`\b`, description, "%s %s answered %s %s: the OpenAPI document must name it", method, path, status, kind)
	}
}

// bodyRoutes lists "METHOD /pattern" for every route of the OpenAPI
// document that takes a request body.
func bodyRoutes(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody json.RawMessage `json:"requestBody"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(httpapi.OpenAPI, &doc))
	var out []string
	for path, methods := range doc.Paths {
		for method, op := range methods {
			if op.RequestBody != nil {
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	require.NotEmpty(t, out)
	return out
}

// documentedStatuses lists "METHOD /pattern STATUS" for every response in
// the OpenAPI document.
func documentedStatuses(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(httpapi.OpenAPI, &doc))
	var out []string
	for path, methods := range doc.Paths {
		for method, op := range methods {
			for status := range op.Responses {
				out = append(out, strings.ToUpper(method)+" "+path+" "+status)
			}
		}
	}
	return out
}

// TestOpenAPIMatchesRoutes: every documented route exists and every route
// is documented; docs/openapi.json is the served document.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(httpapi.OpenAPI, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	var documented []string
	for path, methods := range doc.Paths {
		for method := range methods {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	require.ElementsMatch(t, httpapi.Routes(), documented)
	docsCopy, err := os.ReadFile("../docs/openapi.json")
	require.NoError(t, err)
	require.Equal(t, string(httpapi.OpenAPI), string(docsCopy), "docs/openapi.json must equal httpapi/openapi.json: copy it")
}

// TestTenantIsolation tries every route with another tenant's token and
// gets 404, never data.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			in := intent(2)
			c, err := b.acme.Claim(ctx, "secret:1", client.ClaimRequest{Intent: &in, Worker: "acme-worker"})
			require.NoError(t, err)
			key := url.PathEscape("secret:1")
			bodies := map[string]string{
				"claim": `{}`, "reconcile": `{"found":false}`, "approve": `{"version":1,"fingerprint":"x","approver":"a"}`,
				"revise": `{"payload":{},"version":2}`, "resolve": `{"decision":"cancel","reason":"x"}`,
			}
			check := func(method, path, body string) {
				t.Helper()
				status, data := b.rawAs(t, b.other, method, path, []byte(body))
				require.Equal(t, http.StatusNotFound, status, "%s %s: %s", method, path, data)
				require.Equal(t, "not_found", problemKind(t, data))
				require.NotContains(t, string(data), "crm.create")
				require.NotContains(t, string(data), `"state"`)
				require.NotContains(t, string(data), `"operation"`)
			}
			check("GET", "/v1/operations/"+key, "")
			for action, body := range bodies {
				check("POST", "/v1/operations/"+key+"/"+action, body)
			}
			check("POST", "/v1/operations/"+key+"/attempts/"+c.AttemptID+"/dispatch", `{"fencing_token":1}`)
			check("POST", "/v1/operations/"+key+"/attempts/"+c.AttemptID+"/lease", `{"fencing_token":1,"lease_seconds":60}`)
			check("POST", "/v1/operations/"+key+"/attempts/"+c.AttemptID+"/release", `{"fencing_token":1}`)
			check("POST", "/v1/operations/"+key+"/attempts/"+c.AttemptID+"/outcome", `{"fencing_token":1,"outcome":"succeeded","destination_ref":"x"}`)

			// Events and workflows too.
			_, err = b.ledger.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: "evt-9", Type: "t", Payload: json.RawMessage(`{"a":1}`)})
			require.NoError(t, err)
			_, _, err = b.ledger.PutWorkflow(ctx, "wf-secret", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "one", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"a":1}`)}}})
			require.NoError(t, err)
			check("GET", "/v1/events/forms/evt-9", "")
			check("GET", "/v1/workflows/wf-secret", "")
			check("POST", "/v1/workflows/wf-secret/resume", "")
			check("POST", "/v1/workflows/wf-secret/steps/one/approve", `{"version":1,"fingerprint":"x","approver":"a"}`)
			check("POST", "/v1/workflows/wf-secret/steps/one/revise", `{"payload":{},"version":2}`)
			status, data := b.rawAs(t, b.other, "GET", "/v1/events", nil)
			require.Equal(t, http.StatusOK, status)
			require.NotContains(t, string(data), "evt-9")

			// The same key recorded by the other tenant is a different operation.
			_, created, err := b.other.Record(ctx, "secret:1", intent(9))
			require.NoError(t, err)
			require.True(t, created)
			page, err := b.other.List(ctx, opledger.ListOptions{})
			require.NoError(t, err)
			require.Len(t, page.Items, 1)
			require.Equal(t, "other", page.Items[0].Tenant)
			stats, err := b.other.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, stats.AttemptsTotal)

			// And acme's operation was not touched by any of it.
			d, err := b.acme.Get(ctx, "secret:1")
			require.NoError(t, err)
			require.Equal(t, opledger.StateInProgress, d.State)
			require.Len(t, d.Attempts, 1)
		})
	}
}

func (b *apiBundle) rawAs(t *testing.T, _ *client.Client, method, path string, body []byte) (int, []byte) {
	t.Helper()
	return b.raw(t, method, path, b.otherToken, body)
}

// TestReviewsOverdue: the held operations by review time (order=review),
// the refusals of the order parameter, and the count of overdue reviews
// in /v1/stats and /metrics.
func TestReviewsOverdue(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			// later:1 is recorded first but held an hour after soon:1.
			for _, key := range []string{"later:1", "soon:1"} {
				in := intent(1)
				c, err := b.acme.Claim(ctx, key, client.ClaimRequest{Intent: &in, Dispatch: true})
				require.NoError(t, err)
				_, err = b.acme.Report(ctx, key, c.AttemptID, client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
				require.NoError(t, err)
			}
			for _, key := range []string{"soon:1", "later:1"} {
				_, _, err := b.acme.Reconcile(ctx, key, client.Finding{Evidence: "no lookup"})
				require.NoError(t, err)
				b.clock.advance(time.Hour)
			}

			page, err := b.acme.List(ctx, opledger.ListOptions{Order: opledger.OrderReview, Limit: 1})
			require.NoError(t, err)
			require.Len(t, page.Items, 1)
			require.Equal(t, "soon:1", page.Items[0].Key)
			page, err = b.acme.List(ctx, opledger.ListOptions{Order: opledger.OrderReview, Limit: 1, Cursor: page.NextCursor})
			require.NoError(t, err)
			require.Len(t, page.Items, 1)
			require.Equal(t, "later:1", page.Items[0].Key)
			require.Empty(t, page.NextCursor)
			for _, q := range []string{"order=oldest", "order=review&state=uncertain", "order=review&cursor=" + url.QueryEscape(mustNewestCursor(t, b))} {
				status, body := b.raw(t, "GET", "/v1/operations?"+q, b.token, nil)
				require.Equal(t, http.StatusBadRequest, status, "%s: %s", q, body)
				require.Equal(t, "invalid_input", problemKind(t, body), q)
			}

			stats, err := b.acme.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, stats.ReviewsOverdue)
			b.clock.advance(22*time.Hour + 30*time.Minute) // 24.5 h after soon:1 was held, 23.5 h after later:1
			stats, err = b.acme.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, stats.ReviewsOverdue)
			status, body := b.raw(t, "GET", "/metrics", "", nil)
			require.Equal(t, http.StatusOK, status)
			require.Contains(t, string(body), "\nopledger_reviews_overdue 1\n")
			require.Contains(t, string(body), "\nopledger_oldest_due_seconds 0\n", "both are held: none is due")
		})
	}
}

// mustNewestCursor returns a cursor of the newest-first order.
func mustNewestCursor(t *testing.T, b *apiBundle) string {
	t.Helper()
	page, err := b.acme.List(context.Background(), opledger.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, page.NextCursor)
	return page.NextCursor
}

// requireProblemState checks that a problem about an operation carries
// its state, and the operation in that state.
func requireProblemState(t *testing.T, data []byte, want opledger.State) {
	t.Helper()
	var p struct {
		State     opledger.State `json:"state"`
		Operation *struct {
			State opledger.State `json:"state"`
		} `json:"operation"`
	}
	require.NoError(t, json.Unmarshal(data, &p), "%s", data)
	require.Equal(t, want, p.State, "%s", data)
	require.NotNil(t, p.Operation, "%s", data)
	require.Equal(t, want, p.Operation.State)
}

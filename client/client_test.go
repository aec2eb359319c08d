package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// testBundle is the API on a ledger in a fresh SQLite file, served on
// 127.0.0.1, with a client holding a token of it.
type testBundle struct {
	ledger *opledger.Ledger
	api    http.Handler
	url    string
	token  string
	client *client.Client
}

// setup starts the HTTP API on a ledger in a fresh SQLite file.
func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	secret, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testBundle{ledger: l, api: h, url: srv.URL, token: secret, client: client.New(srv.URL, secret, nil)}
}

// serve starts the HTTP API on a ledger in a fresh SQLite file and
// returns a client with a token of it.
func serve(t *testing.T) *client.Client {
	t.Helper()
	return setup(t).client
}

// front starts a server in front of the API, as a proxy or a load
// balancer would be, and returns a client of it. answer answers the
// requests it takes (returning true) itself; every other one goes on to
// the API.
func (b *testBundle) front(t *testing.T, answer func(w http.ResponseWriter, r *http.Request) bool) *client.Client {
	t.Helper()
	return b.frontWith(t, nil, answer)
}

// frontWith is front with the client's own http.Client (nil: the
// client's default).
func (b *testBundle) frontWith(t *testing.T, hc *http.Client, answer func(w http.ResponseWriter, r *http.Request) bool) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !answer(w, r) {
			b.api.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return client.New(srv.URL, b.token, hc)
}

// get sends GET path to the API with the bundle's token and returns the
// status and body, as any HTTP client sees them.
func (b *testBundle) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, b.url+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// TestCloseClosesConnections: a Client keeps its connection to the server
// between calls, until Close; a call after Close opens another.
func TestCloseClosesConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	closed := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(b.api)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, b.token, nil)
	ctx := context.Background()
	_, err := c.Stats(ctx)
	require.NoError(t, err)
	_, err = c.Stats(ctx)
	require.NoError(t, err)
	require.Empty(t, closed, "the connection is kept between calls")
	c.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the connection close")
	}
	_, err = c.Stats(ctx)
	require.NoError(t, err, "a call after Close")
	c.Close()
}

// succeed records, claims and reports an operation as succeeded; its
// payload has a sensitive field.
func succeed(t *testing.T, c *client.Client, key string) *client.ReportResult {
	t.Helper()
	ctx := context.Background()
	cl, err := c.Claim(ctx, key, client.ClaimRequest{Worker: "w1", Dispatch: true, Intent: &client.Intent{
		Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"name":"Ada","email":"ada@example.com"}`),
		SensitiveFields: []string{"email"}}})
	require.NoError(t, err)
	res, err := c.Report(ctx, key, cl.AttemptID, client.Report{FencingToken: cl.FencingToken, Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "R1", Response: json.RawMessage(`{"id":"R1","email":"ada@example.com"}`)})
	require.NoError(t, err)
	return res
}

// OperationDetail and ReportResult encode their own fields along with the
// operation's, which stays masked: the embedded Operation's MarshalJSON
// does not take their place.
func TestDetailAndReportResultMarshal(t *testing.T) {
	t.Parallel()
	c := serve(t)
	res := succeed(t, c, "order:1:create")
	d, err := c.Get(context.Background(), "order:1:create")
	require.NoError(t, err)
	require.Len(t, d.Attempts, 1)
	require.NotEmpty(t, d.Timeline)

	for name, v := range map[string]any{"detail": d, "detail value": *d, "report result": res} {
		b, err := json.Marshal(v)
		require.NoError(t, err, name)
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &m), name)
		require.JSONEq(t, `"order:1:create"`, string(m["key"]), name)
		require.JSONEq(t, `"succeeded"`, string(m["state"]), name)
		require.NotContains(t, string(b), "ada@example.com", "%s: the sensitive field stays masked", name)
		require.Contains(t, string(m["payload"]), "Ada", name)
		if name == "report result" {
			require.JSONEq(t, `false`, string(m["stale_report"]), name)
			continue
		}
		var attempts []opledger.Attempt
		require.NoError(t, json.Unmarshal(m["attempts"], &attempts), name)
		require.Len(t, attempts, 1, name)
		require.Equal(t, d.Attempts[0].ID, attempts[0].ID)
		var timeline []opledger.TimelineEntry
		require.NoError(t, json.Unmarshal(m["timeline"], &timeline), name)
		require.Len(t, timeline, len(d.Timeline), name)
	}

	b, err := json.Marshal(client.ReportResult{Operation: res.Operation, StaleReport: true})
	require.NoError(t, err)
	var back client.ReportResult
	require.NoError(t, json.Unmarshal(b, &back))
	require.True(t, back.StaleReport)
	require.Equal(t, res.Operation.Key, back.Key)
}

// A refusal for an operation that already succeeded matches
// opledger.ErrAlreadySucceeded, as the library's *StateError does.
func TestErrorIsAlreadySucceeded(t *testing.T) {
	t.Parallel()
	c := serve(t)
	succeed(t, c, "order:2:create")
	_, _, err := c.Revise(context.Background(), "order:2:create", opledger.Revision{Payload: json.RawMessage(`{"name":"Bob"}`), Version: 2})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "invalid_state", e.Kind(), "%v", err)
	require.Equal(t, opledger.StateSucceeded, e.Problem.State)
	require.ErrorIs(t, err, opledger.ErrAlreadySucceeded)
	require.ErrorIs(t, err, opledger.ErrInvalidState)
	require.False(t, errors.Is(err, opledger.ErrInProgress))

	// The same problem for another state does not match.
	other := &client.Error{Status: 409, Problem: httpapi.Problem{Type: httpapi.ProblemTypeBase + "invalid_state", State: opledger.StateHeld}}
	require.False(t, errors.Is(other, opledger.ErrAlreadySucceeded))
	require.True(t, errors.Is(other, opledger.ErrInvalidState))
	inProgress := &client.Error{Status: 409, Problem: httpapi.Problem{Type: httpapi.ProblemTypeBase + "invalid_state", State: opledger.StateInProgress}}
	require.True(t, errors.Is(inProgress, opledger.ErrInProgress))
	// The library agrees.
	require.ErrorIs(t, &opledger.StateError{State: opledger.StateSucceeded}, opledger.ErrAlreadySucceeded)

	// Input the server refuses matches ErrInvalidInput, whatever refused it.
	for _, kind := range []string{"invalid_input", "invalid_json", "mapping_failed", "payload_too_large"} {
		e := &client.Error{Status: 400, Problem: httpapi.Problem{Type: httpapi.ProblemTypeBase + kind}}
		require.ErrorIs(t, e, opledger.ErrInvalidInput, kind)
		require.False(t, errors.Is(e, opledger.ErrInvalidState), kind)
	}
}

// Stats keeps the event figures the API sends beside the operation
// figures, and encodes as the API sends them.
func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	succeed(t, b.client, "order:3:create")
	ev := opledger.Event{Source: "forms", EventID: "evt-1", DeliveryID: "d1", Type: "submission.accepted", Payload: json.RawMessage(`{"id":1}`)}
	_, err := b.client.ReceiveEvent(ctx, ev)
	require.NoError(t, err)
	ev.DeliveryID = "d2"
	res, err := b.client.ReceiveEvent(ctx, ev)
	require.NoError(t, err)
	require.True(t, res.Duplicate)

	st, err := b.client.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.ConfirmedEffects)
	require.Equal(t, 1, st.Events.Events)
	require.Equal(t, 2, st.Events.Deliveries)
	require.Equal(t, 1, st.Events.DuplicateDeliveries)
	want, err := b.ledger.EventStats(ctx, false)
	require.NoError(t, err)
	require.Equal(t, *want, st.Events, "the library's figures")

	status, body := b.get(t, "/v1/stats")
	require.Equal(t, http.StatusOK, status)
	got, err := json.Marshal(st)
	require.NoError(t, err)
	require.JSONEq(t, string(body), string(got), "encoded as the API sends it")
}

// An absent payload is refused before anything is sent: sent as null it
// would erase the content. JSON null itself is a payload.
func TestReviseNeedsPayload(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	key := "order:4:create"
	_, _, err := c.Record(ctx, key, client.Intent{Action: "crm.create", Destination: "crm",
		Payload: json.RawMessage(`{"name":"Ada"}`), RequiresApproval: true})
	require.NoError(t, err)

	for _, payload := range []json.RawMessage{nil, {}} {
		_, _, err = c.Revise(ctx, key, opledger.Revision{Payload: payload, Version: 2})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "payload")
		d, err := c.Get(ctx, key)
		require.NoError(t, err)
		require.JSONEq(t, `{"name":"Ada"}`, string(d.Payload), "the content is kept")
		require.EqualValues(t, 1, d.Version)
	}

	op, _, err := c.Revise(ctx, key, opledger.Revision{Payload: json.RawMessage(`null`), Version: 2})
	require.NoError(t, err)
	require.JSONEq(t, `null`, string(op.Payload))
	require.EqualValues(t, 2, op.Version)

	// A revision's sensitive fields cross the API.
	op, _, err = c.Revise(ctx, key, opledger.Revision{Payload: json.RawMessage(`{"name":"Ada","ssn":"078-05-1120"}`), Version: 3,
		SensitiveFields: []string{"ssn"}})
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"Ada","ssn":"***"}`, string(op.Payload))
	require.Equal(t, []string{"ssn"}, op.SensitiveFields)
}

// A decision on an operation that changed since it was seen is refused
// with a problem that has a title and matches opledger.ErrStaleDecision.
func TestStaleDecision(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	key := "order:5:create"
	cl, err := c.Claim(ctx, key, client.ClaimRequest{Worker: "w1", Dispatch: true, Intent: &client.Intent{
		Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"name":"Ada"}`)}})
	require.NoError(t, err)
	res, err := c.Report(ctx, key, cl.AttemptID, client.Report{FencingToken: cl.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, res.State)

	_, _, err = c.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "R1",
		Reason: "found R1", SeenUpdatedAt: res.UpdatedAt.Add(-time.Minute)})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "stale_decision", e.Kind())
	require.Equal(t, "The operation has changed since it was seen", e.Problem.Title)
	require.ErrorIs(t, err, opledger.ErrStaleDecision)
	require.NotEmpty(t, e.RequestID)
	require.Equal(t, e.Problem.RequestID, e.RequestID)
}

// A server that cannot be reached is named in the error, with the route
// and the reason; the error still unwraps to what the transport said, so
// a refused dial is told from a request that may have been sent.
func TestNoAnswer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	c := client.New("http://"+addr, "opl_x", nil)
	_, err = c.List(context.Background(), opledger.ListOptions{Limit: 5})
	require.ErrorContains(t, err, "GET /v1/operations?limit=5")
	require.ErrorContains(t, err, ": no answer from the server at http://"+addr+": dial tcp "+addr+": connect: connection refused")
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	outcome, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRetryable, outcome, "a refused dial sent nothing")
}

// TestRelease: a worker that decides not to call gives its claim back:
// the operation is due again at once (a second claim takes it), nothing
// was dispatched, the reason is in the timeline; once dispatched, a
// claim cannot be given back.
func TestRelease(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	key := "order:9:create"
	claim, err := c.Claim(ctx, key, client.ClaimRequest{Worker: "w1", Intent: &client.Intent{Action: "crm.create", Destination: "crm",
		Payload: json.RawMessage(`{"name":"Ada"}`)}})
	require.NoError(t, err)
	op, err := c.Release(ctx, key, claim.AttemptID, claim.FencingToken, "shutting down")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	require.False(t, op.Dispatched)
	d, err := c.Get(ctx, key)
	require.NoError(t, err)
	last := d.Timeline[len(d.Timeline)-1]
	require.Equal(t, "released before dispatch", last.Event)
	require.Contains(t, last.Evidence, "shutting down")

	again, err := c.Claim(ctx, key, client.ClaimRequest{Worker: "w2"})
	require.NoError(t, err, "due again at once")
	_, err = c.Release(ctx, key, claim.AttemptID, claim.FencingToken, "")
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "the first claim no longer holds it")
	_, err = c.Dispatch(ctx, key, again.AttemptID, again.FencingToken)
	require.NoError(t, err)
	_, err = c.Release(ctx, key, again.AttemptID, again.FencingToken, "")
	require.ErrorIs(t, err, opledger.ErrInvalidState, "dispatched: report its outcome instead")
}

// A payload that is not JSON is refused before anything is sent, with
// ErrInvalidInput as the ledger refuses it, not as an encoding failure.
func TestInvalidJSONRefused(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	_, _, err := c.Record(ctx, "order:5:create", client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{bad`)})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "a value given as JSON (a payload or response) is not valid JSON")
	_, err = c.Get(ctx, "order:5:create")
	require.ErrorIs(t, err, opledger.ErrNotFound, "nothing was sent")
}

// A report from an attempt that no longer holds the operation, with its
// own token, is kept as evidence: the client answers it with StaleReport
// set and no error, where Ledger.Report returns a *StaleError; only a
// token that is not the attempt's own is an error, as Client.Report says.
func TestReportStaleIsNoError(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	key := "order:10:create"
	first, err := c.Claim(ctx, key, client.ClaimRequest{Worker: "w1", Intent: &client.Intent{Action: "crm.create", Destination: "crm",
		Payload: json.RawMessage(`{"n":10}`)}})
	require.NoError(t, err)
	_, err = c.Release(ctx, key, first.AttemptID, first.FencingToken, "shutting down")
	require.NoError(t, err)
	_, err = c.Claim(ctx, key, client.ClaimRequest{Worker: "w2"})
	require.NoError(t, err)

	res, err := c.Report(ctx, key, first.AttemptID, client.Report{FencingToken: first.FencingToken, Outcome: opledger.OutcomeRetryable})
	require.NoError(t, err, "a stale report is kept, not refused")
	require.True(t, res.StaleReport)
	require.Equal(t, opledger.StateInProgress, res.State, "it moved nothing")

	_, err = c.Report(ctx, key, first.AttemptID, client.Report{FencingToken: first.FencingToken + 1, Outcome: opledger.OutcomeRetryable})
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "another attempt's token is refused")
}

// A base URL the client cannot use as given (no scheme, another scheme, no
// host, a query, a user) is refused at the first call, before anything is
// sent, with an error matching opledger.ErrInvalidInput that says what is
// wrong and quotes none of it (a URL may hold a password), as the CLI's
// --server is refused, not with net/url's or net/http's words about a
// colon in a path segment or an unsupported protocol scheme "".
func TestNewRefusesBaseURLItCannotUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for base, want := range map[string]string{
		"127.0.0.1:8080":             "no http:// or https:// before the host",
		"":                           "no http:// or https:// before the host",
		"ftp://127.0.0.1":            "its scheme is ftp",
		"http://":                    "it names no host",
		"http://127.0.0.1:8080?x=1":  "a query or fragment",
		"http://127.0.0.1:8080/#top": "a query or fragment",
		"http://admin:s3cret@h:8080": "a user or password",
		"http://[::1":                "cannot be parsed as a URL",
		"http://127.0.0.1:99999":     `its port "99999" is not a number from 1 to 65535`,
		"http://127.0.0.1:0":         `its port "0" is not a number from 1 to 65535`,
	} {
		c := client.New(base, "opl_x", nil)
		_, err := c.List(ctx, opledger.ListOptions{})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, base)
		require.ErrorContains(t, err, want, base)
		require.NotContains(t, err.Error(), "s3cret", base)
	}
	// Usable ones go on to send: here with a context already ended, so
	// that nothing is sent anywhere.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, base := range []string{"http://127.0.0.1:8080", "https://ledger.example/", "http://127.0.0.1:8080/opledger", "HTTP://127.0.0.1:8080"} {
		_, err := client.New(base, "opl_x", nil).List(ended, opledger.ListOptions{})
		require.ErrorIs(t, err, context.Canceled, base)
		require.NotErrorIs(t, err, opledger.ErrInvalidInput, base)
	}
}

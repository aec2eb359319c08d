package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// on answers requests for method and path with status, headers and body,
// as something in front of the API would.
func on(method, path string, status int, header map[string]string, body string) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != method || r.URL.Path != path {
			return false
		}
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
		return true
	}
}

// An answer that is not the API's problem (a load balancer's page, another
// service's JSON) keeps the start of its body as Detail, and its
// Retry-After and X-Request-Id; the API's own problems keep theirs.
func TestErrorNotProblem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	date := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	page := "<html><body>" + strings.Repeat("Überlastet – bitte später. ", 4000) + "</body></html>" // ~100 KB
	c := b.front(t, func(w http.ResponseWriter, r *http.Request) bool {
		for _, answer := range []func(http.ResponseWriter, *http.Request) bool{
			on("GET", "/v1/operations/lb:1", 503, map[string]string{"Retry-After": "120", "X-Request-Id": "lb-17", "Content-Type": "text/html"}, page),
			// byte 511 starts a three-byte character the cut at 512 splits.
			on("GET", "/v1/operations/lb:2", 502, nil, strings.Repeat("a", 511)+strings.Repeat("€", 100)),
			on("GET", "/v1/operations/lb:3", 502, nil, "bad \xff gateway"),
			on("GET", "/v1/operations/lb:4", 429, map[string]string{"Date": date.Format(http.TimeFormat),
				"Retry-After": date.Add(90 * time.Second).Format(http.TimeFormat)}, `{"error":"slow down"}`),
			on("GET", "/v1/operations/lb:5", 503, map[string]string{"Retry-After": "soon"}, ``),
			// Another web server's page: its title says what answered.
			on("GET", "/v1/operations/lb:6", 404, map[string]string{"Content-Type": "text/html; charset=utf-8"},
				"<!DOCTYPE HTML>\n<html><head><title>Error response</title><style>p{}</style></head>\n<body><h1>Error response</h1><p>Error code: 404</p></body></html>"),
			on("GET", "/v1/operations/lb:7", 502, map[string]string{"Content-Type": "text/html"},
				"<html><head><script>var x = 1;</script></head><body><h1>502 Bad&nbsp;Gateway</h1>\n<hr><center>nginx</center></body></html>"),
		} {
			if answer(w, r) {
				return true
			}
		}
		return false
	})

	for _, tc := range []struct {
		key        string
		status     int
		detail     string
		retryAfter time.Duration
		requestID  string
	}{
		{key: "lb:2", status: 502, detail: strings.Repeat("a", 511) + "…"},
		{key: "lb:3", status: 502, detail: "bad \uFFFD gateway"},
		{key: "lb:4", status: 429, detail: `{"error":"slow down"}`, retryAfter: 90 * time.Second},
		{key: "lb:5", status: 503},
		{key: "lb:6", status: 404, detail: "an HTML page, not an answer of the opledger API: Error response"},
		{key: "lb:7", status: 502, detail: "an HTML page, not an answer of the opledger API: 502 Bad Gateway nginx"},
	} {
		_, err := c.Get(ctx, tc.key)
		var e *client.Error
		require.ErrorAs(t, err, &e, tc.key)
		require.Equal(t, tc.status, e.Status, tc.key)
		require.Empty(t, e.Kind(), tc.key)
		require.Equal(t, tc.detail, e.Problem.Detail, tc.key)
		require.Equal(t, tc.retryAfter, e.RetryAfter, tc.key)
		require.Equal(t, tc.requestID, e.RequestID, tc.key)
		require.False(t, errors.Is(err, opledger.ErrNotFound), tc.key)
	}

	_, err := c.Get(ctx, "lb:1")
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 503, e.Status)
	require.Equal(t, 120*time.Second, e.RetryAfter)
	require.Equal(t, "lb-17", e.RequestID)
	require.True(t, strings.HasPrefix(e.Problem.Detail, "an HTML page, not an answer of the opledger API: Überlastet – bitte später. Überlastet"), e.Problem.Detail)
	require.True(t, strings.HasSuffix(e.Problem.Detail, "…"))
	require.LessOrEqual(t, len(e.Problem.Detail), 512+len("…"))
	require.True(t, utf8.ValidString(e.Problem.Detail))
	require.Equal(t, "HTTP 503: "+e.Problem.Detail, err.Error())

	// The API's own problem, through the same front.
	_, err = c.Get(ctx, "order:404")
	require.ErrorAs(t, err, &e)
	require.Equal(t, "not_found", e.Kind())
	require.ErrorIs(t, err, opledger.ErrNotFound)
	require.Contains(t, e.Problem.Detail, "order:404")
	require.NotEmpty(t, e.Problem.RequestID)
	require.Equal(t, e.Problem.RequestID, e.RequestID)
	require.Zero(t, e.RetryAfter)
}

// A 200 claim answer that is not the API's replay (no operation, or no
// "replayed": true) is an error, not a *ReplayError without a result.
func TestClaimReplayNeedsOperation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	succeed(t, b.client, "order:6:create")
	c := b.front(t, func(w http.ResponseWriter, r *http.Request) bool {
		if on("POST", "/v1/operations/lb:1/claim", 200, nil, `{"replayed":true}`)(w, r) {
			return true
		}
		return on("POST", "/v1/operations/lb:2/claim", 200, nil, `{"operation":{"key":"lb:2","state":"succeeded","destination_ref":"R9"}}`)(w, r)
	})

	for _, key := range []string{"lb:1", "lb:2"} {
		var err error
		require.NotPanics(t, func() {
			_, err = c.Claim(ctx, key, client.ClaimRequest{Worker: "w1"})
			_ = err.Error()
		}, key)
		var replay *client.ReplayError
		require.False(t, errors.As(err, &replay), "%s: %v", key, err)
		require.ErrorContains(t, err, "replayed", key)
	}

	// The API's replay.
	_, err := c.Claim(ctx, "order:6:create", client.ClaimRequest{Worker: "w2"})
	var replay *client.ReplayError
	require.ErrorAs(t, err, &replay)
	require.Equal(t, "R1", replay.Operation.DestinationRef)
	require.ErrorIs(t, err, opledger.ErrAlreadySucceeded)

	// A ReplayError built without an operation still describes itself.
	require.NotPanics(t, func() { require.Contains(t, (&client.ReplayError{}).Error(), "already succeeded") })
}

// A 2xx answer with null or nothing for a call that expects an object is
// an error, and so is any 3xx the http.Client did not follow.
func TestAnswerNotAnObject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	op := `{"key":"lb:6","state":"pending","attempts":[],"timeline":[]}`
	c := b.front(t, func(w http.ResponseWriter, r *http.Request) bool {
		for _, answer := range []func(http.ResponseWriter, *http.Request) bool{
			on("GET", "/v1/operations/lb:1", 200, nil, "null\n"),
			on("PUT", "/v1/operations/lb:2", 201, nil, ""),
			on("GET", "/v1/stats", 200, nil, "null"),
			on("GET", "/v1/operations/lb:3", 200, nil, `[]`),
			// 3xx without a Location: the http.Client returns them as they are.
			on("GET", "/v1/operations/lb:4", http.StatusTemporaryRedirect, nil, op),
			on("GET", "/v1/operations/lb:5", http.StatusMultipleChoices, nil, op),
		} {
			if answer(w, r) {
				return true
			}
		}
		return false
	})

	_, err := c.Get(ctx, "lb:1")
	require.ErrorContains(t, err, "null, not a JSON object")
	_, _, err = c.Record(ctx, "lb:2", client.Intent{Action: "a", Destination: "d"})
	require.ErrorContains(t, err, "an empty body, not a JSON object")
	_, err = c.Stats(ctx)
	require.ErrorContains(t, err, "not a JSON object")
	_, err = c.Get(ctx, "lb:3")
	require.ErrorContains(t, err, "not a JSON object")

	for key, status := range map[string]int{"lb:4": http.StatusTemporaryRedirect, "lb:5": http.StatusMultipleChoices} {
		d, err := c.Get(ctx, key)
		require.Nil(t, d, key)
		var e *client.Error
		require.ErrorAs(t, err, &e, key)
		require.Equal(t, status, e.Status, key)
	}
}

// A response past MaxResponseBytes is an error saying so, not a body cut
// short and decoded; one at the limit is read whole and decoded.
func TestResponseLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// An object, then a stray byte and spaces up to n bytes: the decoder
	// stops at the stray byte at once (decoding 64 MiB of spaces takes
	// most of a minute under the race detector), with an error that
	// shows the body reached it.
	body := func(n int) []byte {
		body := bytes.Repeat([]byte{' '}, n)
		copy(body, `{"unresolved":7}x`)
		return body
	}
	// Reading 64 MiB under the race detector on a loaded machine once
	// took longer than the default client's 30 s: this one waits longer.
	hc := &http.Client{Timeout: 5 * time.Minute}
	t.Cleanup(hc.CloseIdleConnections)
	stats := func(n int) *client.Client {
		return b.frontWith(t, hc, func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/v1/stats" {
				return false
			}
			_, _ = w.Write(body(n))
			return true
		})
	}
	ctx := context.Background()
	var se *json.SyntaxError

	_, err := stats(client.MaxResponseBytes).Stats(ctx)
	require.ErrorAs(t, err, &se, "at the limit the body is decoded: %v", err)
	require.EqualValues(t, len(`{"unresolved":7}x`), se.Offset)
	require.NotContains(t, err.Error(), "larger than")

	_, err = stats(client.MaxResponseBytes + 1).Stats(ctx)
	require.ErrorContains(t, err, "response larger than 67108864 bytes")
	require.False(t, errors.As(err, &se), "past the limit nothing is decoded: %v", err)
}

// A key that is not one, or an empty id, is refused before anything is
// sent, with the library's error rather than a 404 "no such route".
func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var sent atomic.Int64
	c := b.front(t, func(http.ResponseWriter, *http.Request) bool {
		sent.Add(1)
		return false
	})
	in := client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
	approval := opledger.Approval{Version: 1, Fingerprint: "sha256:00", Approver: "ana"}
	revision := opledger.Revision{Payload: json.RawMessage(`{}`), Version: 2}
	for name, tc := range map[string]struct {
		call func() error
		want error
	}{
		"record empty key":   {func() error { _, _, err := c.Record(ctx, "", in); return err }, opledger.ErrInvalidKey},
		"get empty key":      {func() error { _, err := c.Get(ctx, ""); return err }, opledger.ErrInvalidKey},
		"get personal data":  {func() error { _, err := c.Get(ctx, "ada@example.com"); return err }, opledger.ErrInvalidKey},
		"claim empty key":    {func() error { _, err := c.Claim(ctx, "", client.ClaimRequest{}); return err }, opledger.ErrInvalidKey},
		"dispatch empty key": {func() error { _, err := c.Dispatch(ctx, "", "01J", 1); return err }, opledger.ErrInvalidKey},
		"dispatch empty id":  {func() error { _, err := c.Dispatch(ctx, "order:1", "", 1); return err }, opledger.ErrInvalidInput},
		"report empty id": {func() error {
			_, err := c.Report(ctx, "order:1", "", client.Report{Outcome: opledger.OutcomeSucceeded})
			return err
		}, opledger.ErrInvalidInput},
		"reconcile empty key": {func() error { _, _, err := c.Reconcile(ctx, "", client.Finding{}); return err }, opledger.ErrInvalidKey},
		"approve empty key":   {func() error { _, _, err := c.Approve(ctx, "", approval); return err }, opledger.ErrInvalidKey},
		"revise empty key":    {func() error { _, _, err := c.Revise(ctx, "", revision); return err }, opledger.ErrInvalidKey},
		"resolve empty key":   {func() error { _, _, err := c.Resolve(ctx, "", opledger.Decision{Reason: "r"}); return err }, opledger.ErrInvalidKey},
		"event empty source":  {func() error { _, err := c.GetEvent(ctx, "", "evt-1"); return err }, opledger.ErrInvalidInput},
		"event empty id":      {func() error { _, err := c.GetEvent(ctx, "forms", ""); return err }, opledger.ErrInvalidInput},
		"put workflow":        {func() error { _, _, err := c.PutWorkflow(ctx, "", opledger.WorkflowSpec{}); return err }, opledger.ErrInvalidKey},
		"get workflow":        {func() error { _, err := c.GetWorkflow(ctx, ""); return err }, opledger.ErrInvalidKey},
		"resume workflow":     {func() error { _, err := c.ResumeWorkflow(ctx, ""); return err }, opledger.ErrInvalidKey},
		"approve empty step":  {func() error { _, _, err := c.ApproveWorkflowStep(ctx, "wf:1", "", approval); return err }, opledger.ErrInvalidInput},
		"revise empty step":   {func() error { _, _, err := c.ReviseWorkflowStep(ctx, "wf:1", "", revision); return err }, opledger.ErrInvalidInput},
		"step of empty key":   {func() error { _, _, err := c.ApproveWorkflowStep(ctx, "", "s", approval); return err }, opledger.ErrInvalidKey},
		// Names outside the key syntax, as the ledger refuses them: sent,
		// an e-mail address would travel in the URL, through the access
		// log of anything in front of the server.
		"event source personal data": {func() error { _, err := c.GetEvent(ctx, "ada@example.com", "evt-1"); return err }, opledger.ErrInvalidInput},
		"event id personal data":     {func() error { _, err := c.GetEvent(ctx, "forms", "ada@example.com"); return err }, opledger.ErrInvalidInput},
		"approve step personal data": {func() error {
			_, _, err := c.ApproveWorkflowStep(ctx, "wf:1", "ada@example.com", approval)
			return err
		}, opledger.ErrInvalidInput},
		"revise step personal data": {func() error {
			_, _, err := c.ReviseWorkflowStep(ctx, "wf:1", "ada@example.com", revision)
			return err
		}, opledger.ErrInvalidInput},
		"workflow prefix personal data": {func() error {
			_, err := c.ListWorkflows(ctx, opledger.WorkflowListOptions{Prefix: "ada@example.com"})
			return err
		}, opledger.ErrInvalidKey},
		"step holding a slash": {func() error { _, _, err := c.ApproveWorkflowStep(ctx, "wf:1", "a/b", approval); return err }, opledger.ErrInvalidInput},
	} {
		err := tc.call()
		require.ErrorIs(t, err, tc.want, name)
		require.False(t, errors.Is(err, opledger.ErrNotFound), "%s: %v", name, err)
		var e *client.Error
		require.False(t, errors.As(err, &e), "%s: refused by the client, not the server: %v", name, err)
	}
	require.Zero(t, sent.Load(), "nothing was sent")
	_, err := c.GetEvent(ctx, "forms", "ada@example.com")
	require.NotContains(t, err.Error(), "ada@example.com", "the refusal does not repeat it")

	_, err = c.Get(ctx, "order:1")
	require.ErrorIs(t, err, opledger.ErrNotFound)
	require.EqualValues(t, 1, sent.Load(), "a valid key is sent")
}

// A write (PUT, POST) redirected with 301, 302 or 303, by something in
// front of the API (an old address, http to https), is followed by the
// http.Client as a GET without its body, and that GET's answer is another
// route's: a PUT of other content got the operation as recorded (no 422),
// and an event posted got a page of events, both taken for success
// though nothing was written. The redirect is the answer instead, a
// *client.Error with its status; a read follows a redirect as before, and
// a 307 or 308, which keeps the method and body, is followed by a write.
func TestWriteRedirectedIsNoAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	in := client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}
	_, _, err := b.client.Record(ctx, "moved:1", in)
	require.NoError(t, err)
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if rest, ok := strings.CutPrefix(r.URL.Path, "/old"); ok {
				http.Redirect(w, r, rest, status)
				return
			}
			b.api.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		c := client.New(srv.URL+"/old", b.token, nil)

		// A read follows the redirect.
		d, err := c.Get(ctx, "moved:1")
		require.NoError(t, err, "%d", status)
		require.Equal(t, "moved:1", d.Key)

		other := in
		other.Payload = json.RawMessage(`{"n":2}`)
		_, created, err := c.Record(ctx, "moved:1", other)
		ev := opledger.Event{Source: "forms", EventID: "moved-" + strconv.Itoa(status), Type: "t"}
		_, evErr := c.ReceiveEvent(ctx, ev)
		if status == http.StatusTemporaryRedirect || status == http.StatusPermanentRedirect {
			// The method and body are sent again: the API answers them.
			require.ErrorIs(t, err, opledger.ErrFingerprintMismatch, "%d", status)
			require.NoError(t, evErr, "%d", status)
			_, err = b.ledger.GetEvent(ctx, ev.Source, ev.EventID)
			require.NoError(t, err, "%d: the event was recorded", status)
			continue
		}
		require.False(t, created)
		for _, err := range []error{err, evErr} {
			var e *client.Error
			require.ErrorAs(t, err, &e, "%d: the redirect is the answer", status)
			require.Equal(t, status, e.Status)
			require.Contains(t, e.Error(), "redirected")
			require.Contains(t, e.Error(), "nothing was written")
		}
		_, err = b.ledger.GetEvent(ctx, ev.Source, ev.EventID)
		require.ErrorIs(t, err, opledger.ErrNotFound, "%d: no event recorded", status)
	}
}

// A claim's answer that is no JSON is refused as do refuses any answer
// that is no JSON; one that is JSON but not a claim (or not a replay) is
// refused as a claim (or a replay) that did not decode.
func TestClaimAnswerDoesNotDecode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := b.front(t, func(w http.ResponseWriter, r *http.Request) bool {
		for _, answer := range []func(http.ResponseWriter, *http.Request) bool{
			on("POST", "/v1/operations/cl:1/claim", 201, nil, `{"attempt_id":"a",}`),
			on("POST", "/v1/operations/cl:2/claim", 201, nil, `{"attempt_id":1}`),
			on("POST", "/v1/operations/cl:3/claim", 200, nil, "{\"replayed\":true\n"),
			on("POST", "/v1/operations/cl:4/claim", 200, nil, `{"replayed":"yes"}`),
			on("POST", "/v1/operations/cl:5/claim", 201, nil, " {\"attempt_id\":\"a\",\"fencing_token\":7}\n"),
		} {
			if answer(w, r) {
				return true
			}
		}
		return false
	})
	_, err := c.Claim(ctx, "cl:1", client.ClaimRequest{})
	require.EqualError(t, err, "decode POST /v1/operations/cl:1/claim response: invalid character '}' looking for beginning of object key string")
	_, err = c.Claim(ctx, "cl:2", client.ClaimRequest{})
	require.EqualError(t, err, "decode claim: json: cannot unmarshal number into Go struct field Claim.attempt_id of type string")
	_, err = c.Claim(ctx, "cl:3", client.ClaimRequest{})
	require.EqualError(t, err, "decode POST /v1/operations/cl:3/claim response: unexpected end of JSON input")
	_, err = c.Claim(ctx, "cl:4", client.ClaimRequest{})
	require.EqualError(t, err, `decode replay: json: cannot unmarshal string into Go struct field .replayed of type bool`)
	cl, err := c.Claim(ctx, "cl:5", client.ClaimRequest{})
	require.NoError(t, err)
	require.Equal(t, "a", cl.AttemptID)
	require.Equal(t, int64(7), cl.FencingToken)
}

// TestOtherJSONIsNotTheAPI: a 2xx JSON answer that is not what the route
// answers (another service at the base URL) fails with an error that
// matches client.ErrNotTheAPI, for a program to tell it apart from the
// API's own refusals, rather than by the words of its message.
func TestOtherJSONIsNotTheAPI(t *testing.T) {
	t.Parallel()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"count":0}`))
	}))
	t.Cleanup(other.Close)
	c := client.New(other.URL, "opl_x", nil)
	ctx := context.Background()
	_, err := c.List(ctx, opledger.ListOptions{})
	require.ErrorIs(t, err, client.ErrNotTheAPI)
	_, err = c.Get(ctx, "intake:I17:create")
	require.ErrorIs(t, err, client.ErrNotTheAPI)
	require.NotErrorIs(t, err, opledger.ErrNotFound)
}

// TestOtherServerEchoingTheToken: a server that is not the API (a
// mistyped --server, a debugging server that dumps the request it got)
// may answer with the request's headers in its body. The error quotes
// the start of such a body, and is printed by the CLI and logged by
// programs: the client's own token is never in it, whatever the status.
func TestOtherServerEchoingTheToken(t *testing.T) {
	t.Parallel()
	const token = "opl_3f9a1c0e7b5d4a2f8e6c1b0a9d7e5f3c"
	for _, tc := range []struct {
		status      int
		contentType string
		body        string
	}{
		{http.StatusBadRequest, "text/plain", "bad request\nAuthorization: Bearer " + token + "\nAccept: */*"},
		{http.StatusNotFound, "text/html", "<html><body><h1>Not found</h1><pre>Authorization: Bearer " + token + "</pre></body></html>"},
		{http.StatusInternalServerError, "application/problem+json", `{"type":"about:blank","title":"error","detail":"token ` + token + ` refused"}`},
		{http.StatusOK, "text/plain", token + " is the token you sent"},
	} {
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", tc.contentType)
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		c := client.New(other.URL, token, nil)
		_, err := c.List(context.Background(), opledger.ListOptions{})
		other.Close()
		require.Error(t, err, tc.body)
		require.NotContains(t, err.Error(), token, tc.body)
		require.NotContains(t, err.Error(), token[:12], tc.body)
		var ce *client.Error
		if errors.As(err, &ce) {
			require.NotContains(t, ce.Problem.Detail, token, tc.body)
		}
	}
}

// TestOtherJSONErrorIsShort: an answer that is JSON but does not decode
// (another server's, with a number no field can hold) fails with an
// error of a line or so, as the CLI prints it and programs log it: not
// one quoting the body's number whole, which may be most of a megabyte.
func TestOtherJSONErrorIsShort(t *testing.T) {
	t.Parallel()
	huge := "1" + strings.Repeat("0", 100000)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"items":[{"key":"a","attempt_count":` + huge + `}],"next_cursor":""}`))
	}))
	t.Cleanup(other.Close)
	c := client.New(other.URL, "opl_x", nil)
	ctx := context.Background()
	_, err := c.List(ctx, opledger.ListOptions{})
	require.Error(t, err)
	require.Less(t, len(err.Error()), 1024, err.Error()[:min(len(err.Error()), 300)])
	_, err = c.Get(ctx, "a")
	require.Error(t, err)
	require.Less(t, len(err.Error()), 1024, err.Error()[:min(len(err.Error()), 300)])
}

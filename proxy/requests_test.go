package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/proxy"
	"github.com/opledger/opledger/reconciler"
)

// A protected request gets the forwarding headers exactly as a request
// passed through does: what the caller sent is dropped (the client
// address headers of load balancers and CDNs too), X-Forwarded-For is the
// connection's address. They are no part of the fingerprint: a
// repeat with other forged values is still the same request.
func TestProtectedForwardingHeadersNotForgeable(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.srv.URL})
	forged := func(addr string) http.Header {
		return http.Header{
			"Content-Type":      {"application/json"},
			"Authorization":     {token},
			"Idempotency-Key":   {"key-1"},
			"X-Forwarded-For":   {addr},
			"X-Forwarded-Host":  {"forged.example"},
			"X-Forwarded-Proto": {"https"},
			"Forwarded":         {"for=" + addr + ";proto=https"},
			"X-Real-Ip":         {addr},
			"True-Client-Ip":    {addr},
			"X-Forwarded-Port":  {"8443"},
		}
	}
	first := b.sendWith(t, http.MethodPost, "/records", forged("203.0.113.7"), body1)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	h := forged("203.0.113.7")
	h.Del("Idempotency-Key")
	require.Equal(t, http.StatusCreated, b.sendWith(t, http.MethodGet, "/records", h, "").status)

	got := up.headers()
	require.Len(t, got, 2)
	proxyHost := strings.TrimPrefix(b.url, "http://")
	for i, name := range []string{"protected", "passed through"} {
		require.Equal(t, []string{"127.0.0.1"}, got[i].Values("X-Forwarded-For"), name)
		require.Equal(t, []string{proxyHost}, got[i].Values("X-Forwarded-Host"), name)
		require.Equal(t, []string{"http"}, got[i].Values("X-Forwarded-Proto"), name)
		require.Empty(t, got[i].Values("Forwarded"), name)
		for _, other := range []string{"X-Real-Ip", "True-Client-Ip", "X-Forwarded-Port"} {
			require.Empty(t, got[i].Values(other), "%s: %s", name, other)
		}
		require.Equal(t, token, got[i].Get("Authorization"), name)
	}
	for _, name := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
		require.Equal(t, got[1].Values(name), got[0].Values(name), "%s: the same as passed through", name)
	}

	again := b.sendWith(t, http.MethodPost, "/records", forged("198.51.100.9"), body1)
	require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed), "the forwarding headers are not in the fingerprint")
	require.Equal(t, first.body, again.body)
	require.Len(t, up.headers(), 2, "the repeat was not forwarded")
	payload := string(b.only(t).Payload)
	require.NotContains(t, payload, "203.0.113.7")
	require.NotContains(t, payload, "forged.example")
}

// A protected request whose body does not arrive within the upstream's
// timeout gets 408 (the connection is closed after it); nothing is
// recorded or forwarded, and the handler does not stay pinned.
func TestSlowRequestBodyTimesOut(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]),
		proxy.Upstream{Name: "crm", URL: up.srv.URL, Timeout: destination.Duration(300 * time.Millisecond)})

	c, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	require.NoError(t, err)
	defer c.Close()
	// A guard against a handler that waits forever (the defect), not a
	// wait: the proxy answers after its 300 ms timeout.
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	_, err = io.WriteString(c, "POST /records HTTP/1.1\r\nHost: proxy\r\nIdempotency-Key: k1\r\n"+
		"Content-Type: application/json\r\nContent-Length: 10\r\n\r\n{")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "the proxy must answer a body that does not arrive")
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "%s", data)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p httpapi.Problem
	require.NoError(t, json.Unmarshal(data, &p))
	require.Equal(t, httpapi.ProblemTypeBase+"request_timeout", p.Type)
	require.Equal(t, "The request body did not arrive in time", p.Title)
	require.Equal(t, http.StatusRequestTimeout, p.Status)
	require.Contains(t, p.Detail, "did not arrive")
	require.True(t, resp.Close, "the connection is not reused")
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the proxy closed the connection")

	require.Empty(t, up.requests(), "nothing was forwarded")
	require.Zero(t, b.count(t), "nothing was recorded")

	// A body that arrives is read as before, and the same key is free.
	status, _ := rawAnswer(t, b.url, rawPost("POST", "/records", "k1"))
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, []string{"POST /records"}, up.requests())
}

// tokenUpstream is a bot API that carries its token in the path: the
// first POST acts and then loses its answer (the connection is dropped);
// GET /lookup?path=… finds the message sent to that path.
type tokenUpstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	sent    []string // paths of the POSTs acted on
	lookups []string // the path asked for by each lookup
}

func newTokenUpstream(t *testing.T) *tokenUpstream {
	t.Helper()
	u := &tokenUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		defer u.mu.Unlock()
		if r.Method == http.MethodGet && r.URL.Path == "/lookup" {
			asked := r.URL.Query().Get("path")
			u.lookups = append(u.lookups, asked)
			items := []map[string]string{}
			for i, p := range u.sent {
				if p == asked {
					items = append(items, map[string]string{"id": fmt.Sprintf("M%d", i+1), "path": p})
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
			return
		}
		u.sent = append(u.sent, r.URL.EscapedPath())
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close() // the answer is lost
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// A credential in the path (/bot<token>/sendMessage) is stored, for
// lookups, but masked wherever the ledger shows the operation; the lookup
// template still gets the real path, and the operation is confirmed by it.
func TestPathMaskedButUsedByLookup(t *testing.T) {
	t.Parallel()
	const (
		secret = "123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
		path   = "/bot" + secret + "/sendMessage"
	)
	up := newTokenUpstream(t)
	results := "/items"
	u := proxy.Upstream{Name: "bot", URL: up.srv.URL, Lookup: &destination.LookupConfig{
		URL:           up.srv.URL + "/lookup?path={{urlquery .Payload.path}}",
		Results:       &results,
		Ref:           "/id",
		Authoritative: true,
		Match:         []destination.MatchConfig{{Record: "/path", Payload: "/path"}},
	}}
	l := openLedger(t, testdb.Stores()[0])
	logs := &testrig.LogBuffer{}
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	b := &bundle{ledger: l, proxy: p, url: srv.URL}

	a := b.send(t, http.MethodPost, path, "msg-1", "", `{"chat_id":1,"text":"hi"}`)
	require.Equal(t, http.StatusBadGateway, a.status, "%s", a.body)
	require.Equal(t, httpapi.ProblemTypeBase+"upstream_response_lost", a.problem(t).Type)
	require.Contains(t, a.problem(t).Detail, "same credential")

	pass, err := p.ReconcileOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, pass.Decisions[reconciler.Succeeded], "the lookup found the message by its real path")
	up.mu.Lock()
	require.Equal(t, []string{path}, up.lookups, "the lookup template saw the real path")
	up.mu.Unlock()

	a = b.send(t, http.MethodPost, path, "msg-1", "", `{"chat_id":1,"text":"hi"}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Contains(t, string(a.body), `"destination_ref":"M1"`)

	op := b.only(t)
	require.Contains(t, op.SensitiveFields, "path")
	var stored map[string]any
	require.NoError(t, json.Unmarshal(op.Payload, &stored))
	require.Equal(t, path, stored["path"], "stored as received, for lookups and the fingerprint")

	shown, err := json.Marshal(op) // what the API, the console and opledger ops show print
	require.NoError(t, err)
	require.NotContains(t, string(shown), secret)
	var masked struct {
		Payload map[string]any `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(shown, &masked))
	require.Equal(t, opledger.Mask, masked.Payload["path"])

	events, err := l.Timeline(context.Background(), op.Key)
	require.NoError(t, err)
	timeline, err := json.Marshal(events)
	require.NoError(t, err)
	require.NotContains(t, string(timeline), secret)
	require.NotContains(t, logs.String(), secret)
}

// A 3xx answer (303 See Other after a POST) is passed through, not
// followed and not saved: the upstream may have acted, so the operation
// is uncertain, and without a lookup or idempotency key held for a person.
func TestRedirectAnswerIsUncertain(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		calls++
		mu.Unlock()
		http.Redirect(w, r, "/records/R1", http.StatusSeeOther)
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.URL})

	req, err := http.NewRequest(http.MethodPost, b.url+"/records", strings.NewReader(body1))
	require.NoError(t, err)
	req.Header = http.Header{"Idempotency-Key": {"key-1"}, "Authorization": {token}, "Content-Type": {"application/json"}}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/records/R1", resp.Header.Get("Location"), "passed through, not followed")
	require.Equal(t, string(opledger.StateUncertain), resp.Header.Get(proxy.HeaderState))
	require.Equal(t, opledger.StateUncertain, b.only(t).State)
	require.Empty(t, b.only(t).Response, "not saved")

	a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, opledger.StateUncertain, a.problem(t).State)

	require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Held])
	a = b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, opledger.StateHeld, a.problem(t).State)
	mu.Lock()
	require.Equal(t, 1, calls, "forwarded once")
	mu.Unlock()
}

// A request of a method the proxy does not protect is passed on with
// the caller's Idempotency-Key as sent: an upstream that honours the key
// keeps its own protection (before, the key was removed, and a retried
// DELETE acted twice at an upstream that would have acted once).
func TestPassedThroughKeepsIdempotencyKey(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.srv.URL})
	for _, method := range []string{http.MethodDelete, http.MethodPut, http.MethodGet} {
		a := b.send(t, method, "/subscriptions/s1", "cancel-s1", token, "")
		require.Equal(t, http.StatusCreated, a.status, "%s: %s", method, a.body)
		require.Empty(t, a.header.Get(proxy.HeaderOperation), "%s: passed through", method)
	}
	for i, h := range up.headers() {
		require.Equal(t, "cancel-s1", h.Get("Idempotency-Key"), "request %d", i)
	}
	require.Zero(t, b.count(t), "nothing recorded")
}

// A 429 to a protected re-forward of an uncertain request leaves the
// operation uncertain (the first request may have acted): the answer says
// so with Opledger-State, as a 500 to it does, so that the caller does
// not take Retry-After for a promise of another forward.
func TestProtectedReforwardRetryableSaysState(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 { // acts, and its answer is lost
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.URL,
		Idempotency: &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(24 * time.Hour)}})
	first := b.send(t, http.MethodPost, "/charges", "c1", token, body1)
	require.Equal(t, http.StatusBadGateway, first.status, "%s", first.body)
	b.reconcile(t) // the upstream's key protects a re-forward: pending, protected
	again := b.send(t, http.MethodPost, "/charges", "c1", token, body1)
	require.Equal(t, http.StatusTooManyRequests, again.status, "%s", again.body)
	require.Equal(t, int32(2), calls.Load(), "re-forwarded under the upstream's key")
	op := b.only(t)
	require.Equal(t, opledger.StateUncertain, op.State)
	require.Equal(t, string(opledger.StateUncertain), again.header.Get(proxy.HeaderState))
}

// The proxy reads a protected request's whole body before it forwards
// it, answering the caller's "Expect: 100-continue" itself: the
// expectation is met, and is not passed on. An upstream that does not
// take expectations (answering 417 Expectation Failed, as lighttpd
// did) would otherwise have its 417 saved as the decided answer and
// replayed to every repeat, with or without the header, though the
// request was never refused for what it asked.
func TestExpectContinueNotForwarded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Get("Expect"))
		mu.Unlock()
		if r.Header.Get("Expect") != "" {
			w.WriteHeader(http.StatusExpectationFailed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"R1"}`)
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.URL})
	h := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"key-1"}, "Expect": {"100-continue"}}
	first := b.sendWith(t, http.MethodPost, "/records", h, body1)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	h.Del("Expect")
	again := b.sendWith(t, http.MethodPost, "/records", h, body1)
	require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{""}, seen, "forwarded once, without the caller's Expect")
}

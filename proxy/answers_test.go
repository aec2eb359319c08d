package proxy_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// readsOf counts the requests d read for path.
func readsOf(d *fakedest.Dropper, path string) int {
	n := 0
	for _, r := range d.Requests() {
		if r.Path == path {
			n++
		}
	}
	return n
}

// A protected request whose reused upstream connection breaks after the
// upstream read it reaches the upstream once and is uncertain: net/http
// never sends it again behind the ledger's back, even without a body and
// with an Idempotency-Key header (the upstream's declared one, or a
// caller's X-Idempotency-Key).
func TestNeverResentOnReusedConnection(t *testing.T) {
	t.Parallel()
	up := fakedest.NewDropper(t)
	url := up.URL()
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]),
		proxy.Upstream{Name: "plain", Prefix: "/plain/", URL: url + "/plain"},
		proxy.Upstream{Name: "keyed", Prefix: "/keyed/", URL: url + "/keyed",
			Idempotency: &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(24 * 3600e9)}})
	for i, c := range []struct {
		prefix string
		header http.Header
		body   string
	}{
		{"/plain/", http.Header{"X-Idempotency-Key": {"caller-1"}}, ""},
		{"/plain/", http.Header{"X-Idempotency-Key": {"caller-2"}}, body1},
		{"/keyed/", http.Header{}, ""},
		{"/keyed/", http.Header{}, body1},
	} {
		first := b.send(t, http.MethodPost, c.prefix+"warm", fmt.Sprintf("warm-%d", i), token, body1)
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)

		act := strings.TrimSuffix(c.prefix, "/") + "/act"
		before := readsOf(up, act)
		h := c.header.Clone()
		h.Set("Idempotency-Key", fmt.Sprintf("act-%d", i))
		h.Set("Authorization", token)
		a := b.sendWith(t, http.MethodPost, c.prefix+"act", h, c.body)
		require.Equal(t, http.StatusBadGateway, a.status, "%s %q: %s", c.prefix, c.body, a.body)
		p := a.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"upstream_response_lost", p.Type)
		require.Equal(t, opledger.StateUncertain, p.State)
		require.Equal(t, 1, readsOf(up, act)-before, "%s %q: sent exactly once", c.prefix, c.body)
	}
}

// A reference the ledger cannot store (a NUL byte) is not used: the
// operation succeeds under the attempt id and the caller gets the answer,
// for an answer saved whole and for one too large to save.
func TestUnstorableRefFallsBack(t *testing.T) {
	t.Parallel()
	const small = `{"id":"a\u0000b"}`
	large := `{"id":"a\u0000b","pad":"` + strings.Repeat("x", 4096) + `"}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		if strings.HasSuffix(r.URL.Path, "/large") {
			_, _ = io.WriteString(w, large)
			return
		}
		_, _ = io.WriteString(w, small)
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 1024})
	for path, want := range map[string]string{"/small": small, "/large": large} {
		first := b.send(t, http.MethodPost, path, "k"+path, token, body1)
		require.Equal(t, http.StatusCreated, first.status, "%s: %s", path, first.body)
		require.Equal(t, want, string(first.body))
		op, err := b.ledger.Get(t.Context(), b.keyOf(t, path))
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.True(t, strings.HasPrefix(op.DestinationRef, "attempt:"), op.DestinationRef)
		again := b.send(t, http.MethodPost, path, "k"+path, token, body1)
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
	}
}

// When the ledger cannot record the outcome of a forwarded request, the
// caller's 500 says that it was forwarded, never that nothing was.
func TestUnrecordedOutcomeSaysForwarded(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_ = l.Close() // the ledger fails while the upstream acts
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"R1"}`)
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, l, proxy.Upstream{Name: "crm", URL: up.URL})
	a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusInternalServerError, a.status, "%s", a.body)
	p := a.problem(t)
	require.NotContains(t, p.Detail, "nothing was forwarded")
	require.Contains(t, p.Detail, "was forwarded to the upstream")
	require.Equal(t, int32(1), calls.Load())
}

// The caller's Accept-Encoding is not forwarded: the proxy's transport
// asks for gzip itself and decodes the answer, so the reference is read
// from the decoded body, which is what is saved and replayed.
func TestCallerAcceptEncodingNotForwarded(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 4096)
	var mu sync.Mutex
	var asked []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		body := `{"id":"INV-42"}`
		if r.URL.Path == "/large" {
			body = `{"id":"INV-43","pad":"` + pad + `"}`
		}
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, body)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusCreated)
		gz := gzip.NewWriter(w)
		_, _ = io.WriteString(gz, body)
		_ = gz.Close()
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 1024})
	caller := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(caller.CloseIdleConnections)
	send := func(path, key string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, b.url+path, strings.NewReader(body1))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Accept-Encoding", "gzip, deflate, br")
		resp, err := caller.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(data)
	}
	for path, c := range map[string]struct{ ref, body string }{
		"/small": {"INV-42", `{"id":"INV-42"}`},
		"/large": {"INV-43", `{"id":"INV-43","pad":"` + pad + `"}`},
	} {
		resp, body := send(path, "k"+path)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Empty(t, resp.Header.Get("Content-Encoding"), "the caller gets the decoded answer")
		require.Equal(t, c.body, body)
		op, err := b.ledger.Get(t.Context(), b.keyOf(t, path))
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, c.ref, op.DestinationRef)

		resp, body = send(path, "k"+path)
		require.Equal(t, "true", resp.Header.Get(proxy.HeaderReplayed))
		require.Empty(t, resp.Header.Get("Content-Encoding"))
		if path == "/small" {
			require.Equal(t, c.body, body, "the decoded answer is saved and replayed")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"gzip", "gzip"}, asked, "the transport's own Accept-Encoding, not the caller's")
}

// An answer too large to save that is not a 2xx and breaks off midway
// reaches the caller broken off, not as if it were complete.
func TestLargeNon2xxBrokenOff(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/whole" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, strings.Repeat("x", 4000))
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(4000) + "\r\n\r\n" + strings.Repeat("x", 2000))
		_ = buf.Flush()
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 1000})
	for path, broken := range map[string]bool{"/broken": true, "/whole": false} {
		req, err := http.NewRequest(http.MethodPost, b.url+path, strings.NewReader(body1))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k"+path)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if broken {
			require.Error(t, err, "the caller sees the answer break off after %d bytes", n)
		} else {
			require.NoError(t, err)
			require.EqualValues(t, 4000, n)
		}
		op, err := b.ledger.Get(t.Context(), b.keyOf(t, path))
		require.NoError(t, err)
		require.Equal(t, opledger.StateFailed, op.State, "the 422 decided the request")
	}
}

// upstream_unreachable says what the operation's state allows: a retry
// while it is pending, a new key once its retries are exhausted.
func TestUnreachableDetailFollowsState(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	one, two, none := 1, 2, destination.Duration(0)
	u := proxy.Upstream{Name: "crm", URL: dead.URL,
		Retry: &destination.RetryConfig{MaxAttempts: &one, InitialDelay: &none, MaxDelay: &none, Deadline: &none}}
	u2 := proxy.Upstream{Name: "crm2", Prefix: "/two/", URL: dead.URL,
		Retry: &destination.RetryConfig{MaxAttempts: &two, InitialDelay: &none, MaxDelay: &none, Deadline: &none}}
	policies, err := proxy.RetryPolicies([]proxy.Upstream{u, u2})
	require.NoError(t, err)
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{DestinationRetryPolicies: policies})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	b := proxyOn(t, l, u, u2)

	for i, want := range []opledger.State{opledger.StatePending, opledger.StateFailed} {
		a := b.send(t, http.MethodPost, "/two/records", "key-2", token, body1)
		require.Equal(t, http.StatusBadGateway, a.status, "attempt %d", i+1)
		p := a.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"upstream_unreachable", p.Type)
		require.Equal(t, want, p.State)
		if want == opledger.StatePending {
			require.Contains(t, p.Detail, "same Idempotency-Key is safe")
		} else {
			require.NotContains(t, p.Detail, "safe")
			require.Contains(t, p.Detail, "retries are exhausted")
			require.Contains(t, p.Detail, "new Idempotency-Key")
		}
	}
	a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	p := a.problem(t)
	require.Equal(t, opledger.StateFailed, p.State)
	require.NotContains(t, p.Detail, "safe", fmt.Sprintf("%+v", p))
}

// An answer header whose value is not UTF-8 (a Latin-1 file name, say) is
// replayed byte for byte, with its values in order: saved as JSON text,
// its bytes would have become U+FFFD. Such headers are shown masked.
func TestAnswerHeaderNotUTF8Replayed(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Disposition"] = []string{"attachment; filename=\"caf\xe9.pdf\""}
		w.Header()["X-Mixed"] = []string{"plain", "\xff\xfe", "last"}
		w.Header().Set("X-Plain", "café")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"F1"}`)
	}))
	defer api.Close()
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "files", URL: api.URL})

	first := b.send(t, http.MethodPost, "/files", "k1", token, body1)
	require.Equal(t, http.StatusCreated, first.status)
	again := b.send(t, http.MethodPost, "/files", "k1", token, body1)
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
	for _, a := range []answer{first, again} {
		require.Equal(t, []string{"attachment; filename=\"caf\xe9.pdf\""}, a.header["Content-Disposition"])
		require.Equal(t, []string{"plain", "\xff\xfe", "last"}, a.header["X-Mixed"])
		require.Equal(t, []string{"café"}, a.header["X-Plain"])
	}

	shown, err := json.Marshal(b.only(t))
	require.NoError(t, err)
	var view struct {
		Response struct {
			Header      map[string][]string `json:"header"`
			HeaderBytes json.RawMessage     `json:"header_bytes"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(shown, &view))
	require.Equal(t, []string{"café"}, view.Response.Header["X-Plain"], "a UTF-8 header is shown")
	require.NotContains(t, view.Response.Header, "X-Mixed")
	require.JSONEq(t, `"***"`, string(view.Response.HeaderBytes), "the others are masked")
}

// Every answer to a protected request with a key names its operation
// (Opledger-Operation), so that whoever holds a 502, a 409, a 413 or a replay
// can find it with opledger ops show; a refused upstream whose policy
// spaces the attempts says when to come back (Retry-After), and the
// repeat it holds back says why.
func TestAnswersNameTheirOperation(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		first := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusCreated, first.status)
		key := first.header.Get(proxy.HeaderOperation)
		require.Equal(t, b.keyOf(t, "/records"), key)
		for _, a := range []answer{
			b.send(t, http.MethodPost, "/records", "key-1", token, body1),                        // replayed
			b.send(t, http.MethodPost, "/records", "key-1", token, body2),                        // 422
			b.send(t, http.MethodPost, "/records", "key-1", token, strings.Repeat("x", 1<<20+1)), // 413
		} {
			require.Equal(t, key, a.header.Get(proxy.HeaderOperation), "%d %s", a.status, a.body)
		}
		require.Empty(t, b.send(t, http.MethodPost, "/records", "", token, body1).header.Get(proxy.HeaderOperation), "no key, no operation")

		// Lost after it was sent, on an upstream that declares no way to
		// find out: the repeat says a person will decide.
		b.up.Fail(fakedest.LoseResponse)
		lost := b.send(t, http.MethodPost, "/records", "key-2", token, body1)
		require.Equal(t, http.StatusBadGateway, lost.status)
		again := b.send(t, http.MethodPost, "/records", "key-2", token, body1)
		require.Equal(t, http.StatusConflict, again.status)
		require.Equal(t, lost.header.Get(proxy.HeaderOperation), again.header.Get(proxy.HeaderOperation))
		require.NotEqual(t, key, again.header.Get(proxy.HeaderOperation))
		require.Contains(t, again.problem(t).Detail, "will hold it for a person")
		require.NotContains(t, again.problem(t).Detail, "finding out")
	})
}

func TestUnreachableWithBackoffSaysWhen(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	five, hour := 5, destination.Duration(time.Hour)
	// Full jitter: the first delay is random up to an hour, so it has
	// not passed by the repeat but for a chance of about one in a million.
	b := proxyFor(t, proxy.Upstream{Name: "crm", URL: dead.URL,
		Retry: &destination.RetryConfig{MaxAttempts: &five, InitialDelay: &hour, MaxDelay: &hour}})
	a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusBadGateway, a.status)
	after, err := strconv.Atoi(a.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", a.header.Get("Retry-After"))
	require.GreaterOrEqual(t, after, 1)
	require.LessOrEqual(t, after, 3600)
	again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusConflict, again.status)
	p := again.problem(t)
	require.Equal(t, httpapi.ProblemTypeBase+"not_due", p.Type)
	require.Contains(t, p.Detail, "could not be reached and the upstream's retry policy spaces the attempts")
	require.NotEmpty(t, again.header.Get("Retry-After"))
	require.Equal(t, a.header.Get(proxy.HeaderOperation), again.header.Get(proxy.HeaderOperation))
}

// An upstream's answer carrying headers of the proxy's protocol (its own
// Idempotent-Replayed, an Opledger-State) gets the proxy's alone, first
// and replayed: no header appears twice. An answer without Content-Type
// is passed on and replayed without one, not with a type net/http
// guessed from the body.
func TestUpstreamAnswerHeadersAsSent(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(proxy.HeaderReplayed, "true")
			w.Header().Set(proxy.HeaderState, "upstream's own")
			w.Header().Set(proxy.HeaderOperation, "upstream's own")
			w.Header().Set("X-Request-Id", "up-1")
			w.Header()["Content-Type"] = nil // net/http would guess one
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "<html>hello</html>")
		}))
		t.Cleanup(up.Close)
		b := proxyOn(t, openLedger(t, st), proxy.Upstream{Name: "crm", URL: up.URL})
		first := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		for name, a := range map[string]answer{"first": first, "replay": again} {
			require.Equal(t, http.StatusCreated, a.status, name)
			require.Equal(t, "<html>hello</html>", string(a.body), name)
			require.Equal(t, []string{"up-1"}, a.header.Values("X-Request-Id"), name)
			require.NotContains(t, a.header, "Content-Type", name)
			require.Empty(t, a.header.Values(proxy.HeaderState), name)
			require.Len(t, a.header.Values(proxy.HeaderOperation), 1, name)
			require.NotEqual(t, "upstream's own", a.header.Get(proxy.HeaderOperation), name)
		}
		require.Empty(t, first.header.Values(proxy.HeaderReplayed))
		require.Equal(t, []string{"true"}, again.header.Values(proxy.HeaderReplayed))
	})
}

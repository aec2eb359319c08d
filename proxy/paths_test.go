package proxy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/proxy"
)

// recorder is an upstream that answers 201 {"id":"R<n>"} and records
// every request as it arrived: its method and request target, and its
// headers.
type recorder struct {
	srv     *httptest.Server
	mu      sync.Mutex
	targets []string
	header  []http.Header
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rec.mu.Lock()
		rec.targets = append(rec.targets, r.Method+" "+r.RequestURI)
		rec.header = append(rec.header, r.Header.Clone())
		n := len(rec.targets)
		rec.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"R%d"}`, n)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

// requests are the method and request target of each request, in order.
func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.targets...)
}

// headers are the headers of each request, in order.
func (rec *recorder) headers() []http.Header {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]http.Header(nil), rec.header...)
}

// proxyOn starts a proxy for upstreams recording in l.
func proxyOn(t *testing.T, l *opledger.Ledger, upstreams ...proxy.Upstream) *bundle {
	t.Helper()
	p, err := proxy.New(l, proxy.Config{Upstreams: upstreams, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &bundle{ledger: l, proxy: p, url: srv.URL}
}

// proxyFor starts a proxy for upstreams recording in a ledger of its own
// on SQLite, opened with the upstreams' retry policies.
func proxyFor(t *testing.T, upstreams ...proxy.Upstream) *bundle {
	t.Helper()
	policies, err := proxy.RetryPolicies(upstreams)
	require.NoError(t, err)
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{DestinationRetryPolicies: policies})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return proxyOn(t, l, upstreams...)
}

func openLedger(t *testing.T, st testdb.Store) *opledger.Ledger {
	t.Helper()
	l, err := opledger.Open(context.Background(), st.NewDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// An escaped path is forwarded as received, protected or passed through,
// under the upstream's base path and after a prefix; and a%2Fb and a/b
// are different requests for the fingerprint.
func TestEscapedPathForwardedAsReceived(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		up := newRecorder(t)
		other := newRecorder(t)
		b := proxyOn(t, openLedger(t, st),
			proxy.Upstream{Name: "files", URL: up.srv.URL + "/base"},
			proxy.Upstream{Name: "other", Prefix: "/other/", URL: other.srv.URL + "/v1/"})

		first := b.send(t, http.MethodPost, "/files/a%2Fb", "key-1", token, body1)
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodGet, "/files/a%2Fb?x=%2F", "", token, "").status)
		require.Equal(t, []string{"POST /base/files/a%2Fb", "GET /base/files/a%2Fb?x=%2F"}, up.requests())

		op := b.only(t)
		var payload map[string]any
		require.NoError(t, json.Unmarshal(op.Payload, &payload))
		require.Equal(t, "/files/a%2Fb", payload["path"], "the path is recorded as received")

		again := b.send(t, http.MethodPost, "/files/a%2Fb", "key-1", token, body1)
		require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
		require.Equal(t, first.body, again.body)
		a := b.send(t, http.MethodPost, "/files/a/b", "key-1", token, body1)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
		require.Equal(t, httpapi.ProblemTypeBase+"fingerprint_mismatch", a.problem(t).Type)
		a = b.send(t, http.MethodPost, "/files/a%252Fb", "key-1", token, body1)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "an escaped %% is yet another path")
		require.Len(t, up.requests(), 2, "nothing forwarded again")

		// After a prefix: the rest is forwarded escaped; %2F is no separator
		// for the prefix either.
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/other/x%2Fy%20z", "key-2", token, body1).status)
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/other%2Fx", "key-3", token, body1).status)
		require.Equal(t, []string{"POST /v1/x%2Fy%20z"}, other.requests())
		require.Equal(t, "POST /base/other%2Fx", up.requests()[2], "/other%2Fx is not under the prefix /other/")
	})
}

// earlierKey is the operation key the proxy derives, as every version has.
func earlierKey(upstream, auth, callerKey string) string {
	cred := sha256.Sum256([]byte(auth))
	h := sha256.New()
	h.Write([]byte("opledger-proxy\x00" + hex.EncodeToString(cred[:]) + "\x00" + callerKey))
	return "proxy:" + upstream + ":" + hex.EncodeToString(h.Sum(nil)[:24])
}

// recordEarlier records a succeeded operation exactly as a proxy before
// escaped paths were kept did: the decoded path in the payload, and a
// saved answer that names no upstream.
func recordEarlier(t *testing.T, l *opledger.Ledger, upstream, decodedPath, callerKey, body, answer string) {
	t.Helper()
	sum := sha256.Sum256([]byte(body))
	payload, err := json.Marshal(struct {
		Method     string          `json:"method"`
		Path       string          `json:"path"`
		Query      string          `json:"query,omitempty"`
		BodySHA256 string          `json:"body_sha256"`
		Body       json.RawMessage `json:"body,omitempty"`
		BodyBytes  int             `json:"body_bytes"`
	}{http.MethodPost, decodedPath, "", hex.EncodeToString(sum[:]), json.RawMessage(body), len(body)})
	require.NoError(t, err)
	key := earlierKey(upstream, token, callerKey)
	ctx := context.Background()
	c, err := l.Claim(ctx, key, opledger.ClaimOptions{Worker: "proxy", Dispatch: true, Intent: &opledger.Intent{
		Key: key, Action: proxy.Action, Destination: "proxy:" + upstream, Payload: payload, SensitiveFields: []string{"body", "query"}}})
	require.NoError(t, err)
	saved, err := json.Marshal(map[string]any{"status": 201, "header": http.Header{"Content-Type": {"application/json"}}, "body": []byte(answer)})
	require.NoError(t, err)
	_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "OLD", Response: saved})
	require.NoError(t, err)
}

// Operations recorded before escaped paths were kept: a retry whose path
// has no percent-escape has the same fingerprint and is replayed (its
// saved answer names no upstream, and is replayed too); one whose path had
// escapes is refused with 422, never forwarded again.
func TestEarlierOperationsStillRecognised(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		up := newRecorder(t)
		l := openLedger(t, st)
		b := proxyOn(t, l, proxy.Upstream{Name: "crm", URL: up.srv.URL})
		const path = "/records/a:b;c=d@e!f"
		recordEarlier(t, l, "crm", path, "old-1", body1, `{"id":"OLD"}`)
		recordEarlier(t, l, "crm", "/files/a/b", "old-2", body1, `{"id":"OLD2"}`)

		a := b.send(t, http.MethodPost, path, "old-1", token, body1)
		require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
		require.Equal(t, "true", a.header.Get(proxy.HeaderReplayed))
		require.Equal(t, `{"id":"OLD"}`, string(a.body))

		a = b.send(t, http.MethodPost, "/files/a%2Fb", "old-2", token, body1)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
		require.Empty(t, up.requests(), "nothing forwarded")
	})
}

// TestEscapedSlashKeptBesideOtherBytes: an escaped slash reaches the
// upstream, and the fingerprint, as received even when the path also has
// a byte Go's URL escaping would escape itself (| here): /files/a%2Fb|v1
// and /files/a/b%7Cv1 are different requests.
func TestEscapedSlashKeptBesideOtherBytes(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.srv.URL})
	status, _ := rawAnswer(t, b.url, rawPost("POST", "/files/a%2Fb|v1{x}", "k1"))
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, []string{"POST /files/a%2Fb%7Cv1%7Bx%7D"}, up.requests(), "the escaped slash is forwarded as received")
	status, _ = rawAnswer(t, b.url, rawPost("POST", "/files/a/b%7Cv1%7Bx%7D", "k1"))
	require.Equal(t, http.StatusUnprocessableEntity, status, "another path with the same key")
	status, _ = rawAnswer(t, b.url, rawPost("POST", "/files/a%2Fb%7Cv1%7Bx%7D", "k1"))
	require.Equal(t, http.StatusCreated, status, "the same path, escaped alike: a repeat")
	require.Len(t, up.requests(), 1)
}

// TestPassThroughCutOffLoggedByTheProxy: an answer whose body breaks off
// while it is relayed is logged by the proxy's own logger (JSON with
// --log-json), not by the standard library's logger in another format.
func TestPassThroughCutOffLoggedByTheProxy(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("only the beginning"))
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(api.Close)
	l, err := opledger.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	logs := &testrig.LogBuffer{}
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "files", URL: api.URL}},
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/big")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	require.Error(t, err, "the caller's answer breaks off too")
	p.Close()
	srv.Close() // the handler has returned: its log line is written

	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, "ReverseProxy read error") {
			require.NoError(t, json.Unmarshal([]byte(l), &line), "a JSON line: %s", l)
		}
	}
	require.NotNil(t, line, "logged by the proxy's logger: %s", logs.String())
	require.Equal(t, "proxy", line["component"])
	require.Equal(t, "WARN", line["level"])
}

// TestPrefixItselfReachesBase: a request to exactly a route's prefix,
// without its trailing slash (/crm for the prefix /crm/), reaches the
// upstream at its base URL as written, not with a slash added; /crm/
// reaches it with the slash. The operation is the same as before: the
// key and the fingerprint are the caller's key and the path as received.
func TestPrefixItselfReachesBase(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	slashed := newRecorder(t)
	b := proxyFor(t,
		proxy.Upstream{Name: "crm", Prefix: "/crm/", URL: up.srv.URL + "/v1"},
		proxy.Upstream{Name: "mail", Prefix: "/mail", URL: slashed.srv.URL + "/v2/"})

	require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/crm", "key-1", token, body1).status)
	require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/crm/", "key-2", token, body1).status)
	require.Equal(t, http.StatusCreated, b.send(t, http.MethodGet, "/crm?q=1", "", token, "").status)
	require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/crm/x/", "key-3", token, body1).status)
	require.Equal(t, []string{"POST /v1", "POST /v1/", "GET /v1?q=1", "POST /v1/x/"}, up.requests())

	// A base URL written with a slash keeps it.
	require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/mail", "key-4", token, body1).status)
	require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/mail/", "key-5", token, body1).status)
	require.Equal(t, []string{"POST /v2/", "POST /v2/"}, slashed.requests())

	// The operation of /crm is the one earlier versions recorded: the same
	// key, and its path as received, so a repeat is replayed.
	again := b.send(t, http.MethodPost, "/crm", "key-1", token, body1)
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
	require.Equal(t, earlierKey("crm", token, "key-1"), again.header.Get(proxy.HeaderOperation))
	op, err := b.ledger.Get(context.Background(), earlierKey("crm", token, "key-1"))
	require.NoError(t, err)
	var payload map[string]any
	require.NoError(t, json.Unmarshal(op.Payload, &payload))
	require.Equal(t, "/crm", payload["path"])
	require.Len(t, up.requests(), 4, "nothing forwarded again")
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestStoreUnreachableProblem: a request that finds the PostgreSQL server
// unreachable (it is down, or the network to it is gone) answers 503
// unavailable, with Retry-After, as /readyz does, and not 500 internal as
// if the server had failed: nothing was recorded, and the same request
// succeeds once the database answers again. The client matches it with
// opledger.ErrStoreUnavailable. The log keeps the driver's words, at
// warning level, and never the DSN's password.
func TestStoreUnreachableProblem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, cut := testdb.UnreachablePostgres(t, testdb.PostgresDSN(t), "relay-secret-pw")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	var log bytes.Buffer
	var logMu sync.Mutex
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &log, mu: &logMu}, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, token, nil)
	in := client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}
	_, _, err = c.Record(ctx, "down:1", in)
	require.NoError(t, err)

	cut()
	testdb.WaitUnreachable(t, l.Ping)

	do := func(method, path, body string) *http.Response {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	for _, rq := range []struct{ method, path, body string }{
		{"PUT", "/v1/operations/down:2", `{"action":"crm.create","destination":"crm","payload":{"n":2}}`},
		{"GET", "/v1/operations/down:1", ""},
		{"GET", "/v1/stats", ""},
	} {
		resp := do(rq.method, rq.path, rq.body)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			logMu.Lock()
			t.Fatalf("%s %s: %d %s\nlog:\n%s", rq.method, rq.path, resp.StatusCode, body, log.String())
		}
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		require.NotEmpty(t, resp.Header.Get("Retry-After"), "%s %s", rq.method, rq.path)
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(body, &p))
		require.Equal(t, httpapi.ProblemTypeBase+"unavailable", p.Type, "%s %s", rq.method, rq.path)
		require.Equal(t, opledger.ErrStoreUnavailable.Error(), p.Detail, "the detail is not the driver's")
	}
	_, _, err = c.Record(ctx, "down:3", in)
	require.ErrorIs(t, err, opledger.ErrStoreUnavailable)
	var ce *client.Error
	require.True(t, errors.As(err, &ce))
	require.Positive(t, ce.RetryAfter)

	logMu.Lock()
	logs := log.String()
	logMu.Unlock()
	require.Contains(t, logs, "level=WARN")
	require.Contains(t, logs, "problem=unavailable")
	require.Contains(t, logs, "failed to connect", "the log keeps the cause")
	require.NotContains(t, logs, "level=ERROR", "not logged as a failure of the server")
	require.NotContains(t, logs, "relay-secret-pw")
}

// lockedWriter serialises writes to w (a log written by several
// requests at once).
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

// TestReadsUnavailableDocumented: every GET route that reads the store
// answers 503 unavailable, with Retry-After, when the PostgreSQL server
// cannot be reached, as the writes do, and the OpenAPI document lists
// that 503 for each of them (a client generated from it would otherwise
// have no case for the answer).
func TestReadsUnavailableDocumented(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, cut := testdb.UnreachablePostgres(t, testdb.PostgresDSN(t), "relay-secret-pw")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cut()
	testdb.WaitUnreachable(t, l.Ping)

	documented := map[string]bool{}
	for _, s := range documentedStatuses(t) {
		documented[s] = true
	}
	headers := documentedHeaders(t)
	reads := 0
	for _, pattern := range httpapi.Routes() {
		method, path, _ := strings.Cut(pattern, " ")
		switch {
		case method != http.MethodGet:
			continue // TestNewerSchemaStopsTheServer, TestStoreUnreachableProblem
		case path == "/healthz" || path == "/metrics" || path == "/v1/openapi.json" || path == "/readyz":
			continue // no store, or its own answer (TestReadyzUnavailable)
		}
		reads++
		req, err := http.NewRequest(method, srv.URL+strings.NewReplacer("{key}", "k1", "{source}", "forms", "{event_id}", "e1").Replace(path), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", pattern, body)
		require.Equal(t, "unavailable", problemKind(t, body), pattern)
		require.Equal(t, httpapi.StoreUnavailableRetryAfter, resp.Header.Get("Retry-After"), pattern)
		require.True(t, documented[pattern+" 503"], "%s answers 503: the OpenAPI document must list it", pattern)
		requireDeclaredHeaders(t, pattern, resp, body)
		require.Contains(t, headers[pattern+" 503"], "Retry-After", "%s answers 503 with Retry-After: the OpenAPI document must declare it", pattern)
	}
	require.Equal(t, 7, reads, "the GET routes that read the store")
}

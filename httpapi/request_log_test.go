package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// TestRequestLogNamesTenantAndProblem: each request's log line names the
// tenant of its token, as its comment always said, and, for a problem
// answer, the problem's type, so that an alert on 422 mapping_failed or
// 409 conflict can be read from the log; never the path's key.
func TestRequestLogNamesTenantAndProblem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	var logs testrig.LogBuffer
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	do := func(method, path, body string) int {
		req, err := http.NewRequest(method, srv.URL()+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, do("GET", "/v1/operations", ""))
	require.Equal(t, http.StatusNotFound, do("GET", "/v1/operations/order:alice", ""))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var requests []string
	for _, line := range lines {
		if strings.Contains(line, "msg=request ") {
			requests = append(requests, line)
		}
	}
	require.Len(t, requests, 2, logs.String())
	require.Contains(t, requests[0], `route="GET /v1/operations"`)
	require.Contains(t, requests[1], `route="GET /v1/operations/{key}"`)
	require.Contains(t, requests[0], "tenant=acme")
	require.NotContains(t, requests[0], "problem=")
	require.Contains(t, requests[1], "tenant=acme")
	require.Contains(t, requests[1], "problem=not_found")
	require.NotContains(t, logs.String(), "alice")
}

// TestProbeRequestsLogAtDebug: a liveness or readiness probe and a
// metrics scrape that succeed, every few seconds each, are logged at
// DEBUG, so that they do not bury the lines that matter at INFO; a probe
// that fails (the store closed) is logged at INFO, as any request.
func TestProbeRequestsLogAtDebug(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	var logs testrig.LogBuffer
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	get := func(path string) int {
		resp, err := http.Get(srv.URL() + path)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		require.Equal(t, http.StatusOK, get(path), path)
	}
	require.NoError(t, l.Close())
	require.Equal(t, http.StatusServiceUnavailable, get("/readyz"))
	levels := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.Contains(line, "msg=request ") {
			continue
		}
		_, rest, _ := strings.Cut(line, "level=")
		level, _, _ := strings.Cut(rest, " ")
		_, route, _ := strings.Cut(line, `route="`)
		route, _, _ = strings.Cut(route, `"`)
		levels[route] = append(levels[route], level)
	}
	require.Equal(t, map[string][]string{
		"GET /healthz": {"DEBUG"},
		"GET /readyz":  {"DEBUG", "INFO"},
		"GET /metrics": {"DEBUG"},
	}, levels, logs.String())
}

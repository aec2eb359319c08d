package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestBusyLedger: a request that meets another process's write lock on
// the ledger, held past the ledger's wait (an operator's VACUUM), answers
// 503 store_busy with Retry-After and is not forwarded; the same request
// goes through once the lock is gone.
func TestBusyLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	up := fakedest.New(t, fakedest.Options{})
	u := proxy.Upstream{Name: "crm", URL: up.URL()}
	policies, err := proxy.RetryPolicies([]proxy.Upstream{u})
	require.NoError(t, err)
	l, err := opledger.Open(ctx, dsn, opledger.Options{DestinationRetryPolicies: policies, SQLiteBusyTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	send := func() (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/records", strings.NewReader(body1))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "key-1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}

	release := testdb.HoldLock(t, dsn, opledger.DefaultTenant, "")
	resp, problem := send()
	release()

	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Contains(t, problem, `"type":"`+httpapi.ProblemTypeBase+`store_busy"`)
	require.Zero(t, up.Creates(), "nothing forwarded")
	resp, _ = send()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "once the lock is gone")
	require.Equal(t, 1, up.Creates())
}

// TestUnreachableLedger: a request that finds the ledger's PostgreSQL
// server unreachable answers 503 unavailable with Retry-After, as the
// API does, not 500 internal, and is not forwarded; the log keeps the
// cause at warning level, without the DSN's password.
func TestUnreachableLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, cut := testdb.UnreachablePostgres(t, testdb.PostgresDSN(t), "relay-secret-pw")
	up := fakedest.New(t, fakedest.Options{})
	u := proxy.Upstream{Name: "crm", URL: up.URL()}
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	var log lockedBuffer
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	cut()
	testdb.WaitUnreachable(t, l.Ping)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/records", strings.NewReader(body1))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "key-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	problem, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(problem))
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.Contains(t, string(problem), `"type":"`+httpapi.ProblemTypeBase+`unavailable"`)
	require.Zero(t, up.Creates(), "nothing forwarded")
	logs := log.take()
	require.Contains(t, logs, "level=WARN")
	require.Contains(t, logs, "failed to connect")
	require.NotContains(t, logs, "level=ERROR")
	require.NotContains(t, logs, "relay-secret-pw")
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// relay forwards loopback connections to a PostgreSQL server until cut:
// then it closes its listener and every connection it carried, so that
// the server can no longer be reached at its address, as when the
// database is down or the network to it is gone.
type relay struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &relay{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, u)
			r.mu.Unlock()
			r.wg.Add(2)
			go func() { defer r.wg.Done(); _, _ = io.Copy(u, c); u.Close() }()
			go func() { defer r.wg.Done(); _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(r.cut)
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

// cut closes the listener and every connection; it returns once every
// goroutine of the relay has ended.
func (r *relay) cut() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

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
	dsn := testdb.PostgresDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	rl := startRelay(t, u.Host)
	u.Host = rl.addr()
	u.User = url.UserPassword(u.User.Username(), "relay-secret-pw")
	l, err := opledger.Open(ctx, u.String(), opledger.Options{})
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

	rl.cut()
	// The pool's idle connections died with the relay: each is found
	// dead once, by a ping; then every new one fails to connect.
	for i := 0; ; i++ {
		err := l.Ping(ctx)
		require.Error(t, err)
		if strings.Contains(err.Error(), "failed to connect") {
			break
		}
		require.Less(t, i, 100, "the pool still hands out dead connections: %v", err)
	}

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
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s %s: %s", rq.method, rq.path, body)
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

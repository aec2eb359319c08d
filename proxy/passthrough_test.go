package proxy_test

import (
	"context"
	"io"
	"log"
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
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestPassThroughWithoutAnswer: a request passed through unprotected
// (allow_missing_key, no key) that gets no answer is told apart as a
// protected one is: an upstream that could not be reached (nothing sent,
// safe to send again) from a connection lost or an answer not given
// within the timeout after the request was sent (the upstream may have
// acted), each with the note that nothing was recorded. The timeout
// counts from the moment the request was written: a caller that takes
// longer than it to send the body is not cut off.
func TestPassThroughWithoutAnswer(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		const timeout = 300 * time.Millisecond
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
			u.AllowMissingKey = true
			u.Timeout = destination.Duration(timeout)
		})
		// Bounded, so that a pass-through that waits for ever fails the
		// test rather than hanging it.
		send := func(body io.Reader) answer {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url+"/records", body)
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return answer{resp.StatusCode, resp.Header, data}
		}

		b.up.Fail(fakedest.LoseResponse)
		a := send(strings.NewReader(body1))
		require.Equal(t, http.StatusBadGateway, a.status)
		p := a.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"upstream_response_lost", p.Type, p.Detail)
		require.Contains(t, p.Detail, "may or may not have acted")
		require.Contains(t, p.Detail, "passed through unprotected")
		require.Equal(t, 1, b.up.Creates())

		b.up.Fail(fakedest.Hang)
		a = send(strings.NewReader(body1))
		require.Equal(t, http.StatusGatewayTimeout, a.status, "the timeout bounds a passed-through request too")
		p = a.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"upstream_response_lost", p.Type)
		require.Contains(t, p.Detail, "did not answer within "+timeout.String())
		require.Equal(t, 2, b.up.Creates())

		// A body that takes three timeouts to arrive: the wait for the
		// answer starts once it has been written.
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte(`{"external_ref":"slow",`))
			<-time.After(3 * timeout) // a slow caller, not a synchronisation
			pw.Write([]byte(`"amount":1}`))
			pw.Close()
		}()
		a = send(pr)
		require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
		require.Equal(t, 3, b.up.Creates())
		require.Equal(t, 0, b.count(t), "nothing recorded")

		dead := httptest.NewServer(http.NotFoundHandler())
		deadURL := dead.URL
		dead.Close()
		gone := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
			u.AllowMissingKey = true
			u.URL = deadURL + "/bot123:SECRET-UPSTREAM-TOKEN"
		})
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			a = gone.send(t, method, "/records", "", token, body1)
			require.Equal(t, http.StatusBadGateway, a.status)
			p = a.problem(t)
			require.Equal(t, httpapi.ProblemTypeBase+"upstream_unreachable", p.Type)
			require.Contains(t, p.Detail, "nothing was sent")
			require.Contains(t, p.Detail, "passed through unprotected")
			require.Equal(t, "/records", p.Instance, "the caller's path, never the upstream's base path, which may hold its credential")
			require.NotContains(t, string(a.body), "SECRET")
		}
		require.NotContains(t, gone.logs.String(), "SECRET")
	})
}

// TestPassThroughUpstreamNotReading: a passed-through request whose body
// the upstream stops taking (it reads the headers, then nothing) is ended
// once the upstream has taken no part of it for the route's timeout, and
// answered 504 upstream_response_lost (it may have acted on what it
// read). Before, the proxy waited for ever: its timeout counted only from
// the moment the whole request had been written.
func TestPassThroughUpstreamNotReading(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns sync.WaitGroup
	stop := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		close(stop)
		conns.Wait()
	})
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				_, _ = c.Read(make([]byte, 4096)) // the headers, and no more
				<-stop
			})
		}
	})

	const timeout = 300 * time.Millisecond
	b := setup(t, testdb.Store{Name: "sqlite", NewDSN: testdb.SQLiteDSN}, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
		u.AllowMissingKey = true
		u.Timeout = destination.Duration(timeout)
		u.URL = "http://" + ln.Addr().String()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Far more than the sockets' buffers hold: the proxy's writes stall.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url+"/upload", io.LimitReader(zeros{}, 1<<30))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "the proxy answers rather than waiting for ever")
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, "%s", data)
	p := answer{resp.StatusCode, resp.Header, data}.problem(t)
	require.Equal(t, httpapi.ProblemTypeBase+"upstream_response_lost", p.Type)
	require.Contains(t, p.Detail, "took no more of the request for "+timeout.String())
	require.Contains(t, p.Detail, "may or may not have acted")
	require.Contains(t, b.logs.String(), "pass-through failed")
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestPassThroughTLSHandshakeFailed: an upstream whose TLS handshake
// fails (a certificate the proxy does not trust, a plain-HTTP port named
// https) was never sent the request. A passed-through request is then
// answered as a protected one is, 502 upstream_unreachable, "nothing was
// sent": before, it got upstream_response_lost, "the connection to the
// upstream broke after the request was sent, so it may or may not have
// acted", and the log said "pass-through failed: no answer from the
// upstream".
func TestPassThroughTLSHandshakeFailed(t *testing.T) {
	t.Parallel()
	var reached atomic.Int32
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	up.Config.ErrorLog = log.New(io.Discard, "", 0) // its "TLS handshake error" lines
	t.Cleanup(up.Close)
	b := setup(t, testdb.Store{Name: "sqlite", NewDSN: testdb.SQLiteDSN}, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
		u.AllowMissingKey = true
		u.URL = up.URL // a certificate the proxy's transport does not trust
	})
	for _, tc := range []struct{ method, key string }{
		{http.MethodGet, ""},
		{http.MethodPost, ""}, // allow_missing_key: passed through
		{http.MethodPost, "tls-1"},
	} {
		a := b.send(t, tc.method, "/records", tc.key, token, body1)
		require.Equal(t, http.StatusBadGateway, a.status, "%s %q: %s", tc.method, tc.key, a.body)
		p := a.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"upstream_unreachable", p.Type, "%s %q: %s", tc.method, tc.key, p.Detail)
		require.Contains(t, p.Detail, "nothing was sent")
	}
	require.Zero(t, reached.Load(), "no request reached the upstream")
	require.NotContains(t, b.logs.String(), "pass-through failed: no answer from the upstream")
	require.Contains(t, b.logs.String(), "pass-through failed: the upstream could not be reached")
	op := b.only(t)
	require.Equal(t, opledger.StatePending, op.State, "the protected request was not sent either")
}

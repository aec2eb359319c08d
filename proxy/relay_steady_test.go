package proxy_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestSteadyCallerLargeBuffers: a caller that reads a large 2xx answer
// steadily, more slowly than the proxy can send it, on connections with
// the kernel's own (autotuned, megabytes) buffers, gets it whole. A write
// to it may wait longer than the route's timeout for the send buffer to
// drain enough, though the caller never stops reading: the proxy counts
// the caller stalled only when it acknowledges (almost) nothing for the timeout
// (ConnContext). Before, each write had the timeout, the caller was cut
// off, and the body of an answer too large to save was lost for good.
func TestSteadyCallerLargeBuffers(t *testing.T) {
	t.Parallel()
	const size = 6 << 20
	up := httptest.NewServer(largeAnswer(size))
	t.Cleanup(up.Close)
	u := proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 1 << 10, Timeout: destination.Duration(time.Second)}
	l := openLedger(t, testdb.Stores()[0])
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewUnstartedServer(p)
	srv.Config.ConnContext = proxy.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	b := &bundle{ledger: l, proxy: p, url: srv.URL}

	resp := postLarge(t, b, http.DefaultClient, "key-1")
	defer resp.Body.Close()
	// 16 KiB every 20 ms, about 800 KB/s: never a pause near the
	// timeout, but slower than the proxy writes.
	n, err := readPaced(resp.Body, 20*time.Millisecond, 16<<10)
	require.Equal(t, io.EOF, err, "the answer ended, not broke off, after %d bytes", n)
	require.Equal(t, largeAnswerSize(size), n, "the caller got the whole answer")
	op := b.only(t)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Equal(t, "BIG-1", op.DestinationRef)
}

// TestRelayOverHTTP2LeavesConnection: over HTTP/2 (a program serving the
// proxy over TLS with ConnContext), the connection is shared by other
// requests: relaying a large answer leaves no write deadline on it, and a
// later request on the same connection, after the timeout has passed,
// gets its answer (before, the deadline set on the whole connection broke
// the next answer: forwarded and recorded, but never delivered).
func TestRelayOverHTTP2LeavesConnection(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		if r.URL.Path == "/small" {
			_, _ = io.WriteString(w, `{"id":"S-1"}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"BIG-1","pad":"`)
		for range 8 { // over more than one check of the caller's progress
			_, _ = io.WriteString(w, strings.Repeat("x", 64<<10))
			w.(http.Flusher).Flush()
			time.Sleep(timeout / 16) // half the timeout in all: the upstream's time counts against it
		}
		_, _ = io.WriteString(w, `"}`)
	}))
	t.Cleanup(up.Close)
	u := proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 1 << 10, Timeout: destination.Duration(timeout)}
	l := openLedger(t, testdb.Stores()[0])
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewUnstartedServer(p)
	srv.EnableHTTP2 = true
	srv.Config.ConnContext = proxy.ConnContext
	srv.StartTLS()
	t.Cleanup(srv.Close)
	b := &bundle{ledger: l, proxy: p, url: srv.URL}

	resp := postLarge(t, b, srv.Client(), "key-1")
	require.Equal(t, 2, resp.ProtoMajor)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	time.Sleep(timeout + timeout/2) // the scenario: idle past any deadline the relay could have left
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/small", strings.NewReader(body1))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "key-2")
	resp, err = srv.Client().Do(req)
	require.NoError(t, err, "a request on the same connection after a relayed answer")
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, `{"id":"S-1"}`, string(got))
}

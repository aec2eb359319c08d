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
// the caller stalled only when it acknowledges nothing for the timeout
// (ConnContext). Before, each write had the timeout, the caller was cut
// off, and the body of an answer too large to save was lost for good.
func TestSteadyCallerLargeBuffers(t *testing.T) {
	t.Parallel()
	const size = 6 << 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		chunk := strings.Repeat("x", 64<<10)
		_, _ = io.WriteString(w, `{"id":"BIG-1","pad":"`)
		for n := 0; n < size; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}`)
	}))
	t.Cleanup(up.Close)
	u := proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 1 << 10, Timeout: destination.Duration(500 * time.Millisecond)}
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
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	buf := make([]byte, 16<<10)
	n := 0
	for err == nil {
		<-tick.C
		var k int
		k, err = io.ReadFull(resp.Body, buf)
		n += k
	}
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the answer ended, not broke off, after %d bytes", n)
	require.Equal(t, size+len(`{"id":"BIG-1","pad":""}`), n, "the caller got the whole answer")
	op := b.only(t)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Equal(t, "BIG-1", op.DestinationRef)
}

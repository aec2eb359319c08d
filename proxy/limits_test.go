package proxy_test

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestLargestResponseLimit: max_response_bytes at its largest value (as
// one may write it for "save every answer whole") saves and passes on
// the whole answer; the one byte more read to tell an answer over the
// limit must not wrap around to a limit that reads nothing, which gave
// the caller, and every repeat, an empty 201.
func TestLargestResponseLimit(t *testing.T) {
	t.Parallel()
	const answer = `{"id":"R1","amount":120}`
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(upstream.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: upstream.URL, MaxResponseBytes: math.MaxInt64})
	first := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusCreated, first.status)
	require.Equal(t, answer, string(first.body))
	again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
	require.Equal(t, answer, string(again.body))
	require.Equal(t, "R1", b.only(t).DestinationRef)
}

// TestBodyTooLargeAnnounced: a protected request whose Content-Length
// announces a body over max_body_bytes is refused with 413 before its
// body is asked for, so a client that sent "Expect: 100-continue" (curl
// does for a body over a megabyte) sends none of it. Before, the proxy
// answered 100 Continue, read the body up to the limit and only then
// refused it: the client uploaded a megabyte for nothing.
func TestBodyTooLargeAnnounced(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Store{Name: "sqlite", NewDSN: testdb.SQLiteDSN}, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
		u.MaxBodyBytes = 64
	})
	body := &countingReader{r: strings.NewReader(strings.Repeat("x", 1000))}
	req, err := http.NewRequest(http.MethodPost, b.url+"/records", body)
	require.NoError(t, err)
	req.ContentLength = 1000
	req.Header.Set("Idempotency-Key", "key-1")
	req.Header.Set("Expect", "100-continue")
	// The client waits for 100 Continue or a final answer before it
	// sends the body (the minute is a guard, never waited for).
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Do(req)
	require.NoError(t, err)
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", data)
	a := answer{resp.StatusCode, resp.Header, data}
	require.Equal(t, httpapi.ProblemTypeBase+"payload_too_large", a.problem(t).Type)
	require.NotEmpty(t, resp.Header.Get(proxy.HeaderOperation))
	require.Zero(t, body.n.Load(), "the client was not asked for the body")
	require.Equal(t, 0, b.up.Creates())
	require.Equal(t, 0, b.count(t))

	// A body announced within the limit is taken, Expect or not.
	req, err = http.NewRequest(http.MethodPost, b.url+"/records", strings.NewReader(`{"a":1}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "key-2")
	req.Header.Set("Expect", "100-continue")
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

package proxy_test

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

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

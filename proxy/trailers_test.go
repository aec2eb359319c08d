package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestTrailersOfProtectedAnswers: an upstream's trailers are no part of
// a protected request's answer, live or replayed: the saved answer keeps
// the status, headers and body, and a replay carries what the first
// answer carried, no trailer either, so that a caller never sees one
// answer with a trailer and its repeat without. This holds for an answer
// too large to save, relayed as it arrives. An unprotected request is
// passed through with its trailers.
func TestTrailersOfProtectedAnswers(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"R1","pad":"`+strings.Repeat("x", 64)+`"}`)
		w.Header().Set("X-Checksum", "c0ffee")
	}))
	t.Cleanup(up.Close)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]),
		proxy.Upstream{Name: "small", Prefix: "/small/", URL: up.URL},
		proxy.Upstream{Name: "large", Prefix: "/large/", URL: up.URL, MaxResponseBytes: 16})

	do := func(method, path, key string) (*http.Response, string) {
		req, err := http.NewRequest(method, b.url+path, strings.NewReader(`{}`))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	for _, path := range []string{"/small/r", "/large/r"} {
		first, firstBody := do(http.MethodPost, path, "k")
		require.Equal(t, http.StatusCreated, first.StatusCode, path)
		require.Empty(t, first.Trailer, path)
		require.Empty(t, first.Header.Values("Trailer"), path)
		again, againBody := do(http.MethodPost, path, "k")
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"), path)
		require.Empty(t, again.Trailer, path)
		if path == "/small/r" {
			require.Equal(t, firstBody, againBody)
			require.Equal(t, first.StatusCode, again.StatusCode)
		}
	}
	pass, _ := do(http.MethodGet, "/small/r", "")
	require.Equal(t, "c0ffee", pass.Trailer.Get("X-Checksum"), "a pass-through keeps the upstream's trailers")
}

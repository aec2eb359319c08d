package destination_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// TestSendHTTPFollowsNoRedirect: SendHTTP returns a redirect as the
// answer it is, with a client that would follow it (a plain
// http.Client, as a Go destination's hand-written call may use). net/http
// followed a POST's 302 with a GET and returned the GET's answer: the
// record the Location named, 200, which SendHTTP classified as the
// POST's success, though the server that redirected had done nothing
// (and a DELETE answered 301 read as deleted, on a GET of the record
// still there).
func TestSendHTTPFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var followed atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /records", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/records/r1", http.StatusFound)
	})
	mux.HandleFunc("DELETE /records/r1", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v2/records/r1", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		followed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id": "r1"}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr} // follows redirects

	for method, code := range map[string]int{http.MethodPost: http.StatusFound, http.MethodDelete: http.StatusMovedPermanently} {
		req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+"/records", nil)
		require.NoError(t, err)
		if method == http.MethodDelete {
			req.URL.Path = "/records/r1"
		}
		resp, err := destination.SendHTTP(client, req, destination.HTTPPolicy{})
		require.NotNil(t, resp, method)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, code, resp.StatusCode, "%s: the redirect is the answer", method)
		got, _ := opledger.OutcomeOf(err)
		require.Equal(t, opledger.OutcomeUncertain, got, "%s: %v", method, err)
	}
	require.Zero(t, followed.Load(), "no redirect was followed")
	require.Nil(t, client.CheckRedirect, "the caller's client is left as it was")
}

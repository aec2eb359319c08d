package proxy_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestUncertainStatusesOfAnUpstream: an upstream behind a gateway that
// answers 503 after the backend acted declares it in uncertain_statuses,
// as a destination does. Its 503 is then passed on as uncertain, and a
// repeat is not forwarded again (409 invalid_state) until the reconciler
// settles it: a 503 was always retryable, and the repeat was forwarded,
// making the effect twice. A 429, not listed, is retryable as ever.
func TestUncertainStatusesOfAnUpstream(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Stores()[0], fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
		u.UncertainStatuses = []int{502, 503, 504}
	})
	b.up.SetRetryAfter("0")
	b.up.Fail(fakedest.Unavailable)
	a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Equal(t, string(opledger.StateUncertain), a.header.Get(proxy.HeaderState))
	require.Equal(t, opledger.StateUncertain, b.only(t).State)
	a = b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusConflict, a.status)
	require.Equal(t, httpapi.ProblemTypeBase+"invalid_state", a.problem(t).Type)
	require.Equal(t, 1, b.up.Creates(), "not forwarded again")

	b.up.Fail(fakedest.TooMany)
	a = b.send(t, http.MethodPost, "/records", "key-2", token, body1)
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Empty(t, a.header.Get(proxy.HeaderState))

	// Checked at start as a destination's: in Go and in a file.
	require.ErrorContains(t, proxy.CheckUpstreams([]proxy.Upstream{{Name: "crm", URL: "http://127.0.0.1:1", UncertainStatuses: []int{200}}}),
		"uncertain_statuses.0: 200 is not a 4xx or 5xx status")
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	require.NoError(t, os.WriteFile(path, []byte("upstreams:\n  - name: crm\n    url: http://127.0.0.1:1\n    uncertain_statuses:\n"), 0o644))
	_, err := proxy.LoadConfig(path)
	require.ErrorContains(t, err, "line 4: upstreams.0.uncertain_statuses: has no value")
}

package cli_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServerThatIsNotOpledger: a --server that names another HTTP server
// (a mistyped port: the proxy's, a lab destination's, another service's)
// answers with its own 404 or 5xx in plain text. The error says that the
// answer is not the opledger API's and points at --server, instead of
// "HTTP 404: 404 page not found", which reads like a key or route that
// does not exist.
func TestServerThatIsNotOpledger(t *testing.T) {
	t.Parallel()
	other := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(other.Close)

	for _, args := range [][]string{
		{"ops", "list"},
		{"ops", "show", "intake:I17:create"},
		{"workflows", "list"},
		{"events", "list"},
	} {
		_, errOut, code := run(t, append(args, "--server", other.URL, "--token", "opl_x")...)
		require.Equal(t, 1, code, errOut)
		require.Equal(t, "opledger: HTTP 404: 404 page not found (not an answer of the opledger API: is --server the address of an opledger serve?)\n", errOut, args)
	}

	// An HTML page is named so by the client already.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"))
	}))
	t.Cleanup(page.Close)
	_, errOut, code := run(t, "ops", "list", "--server", page.URL, "--token", "opl_x")
	require.Equal(t, 1, code, errOut)
	require.Equal(t, "opledger: HTTP 502: an HTML page, not an answer of the opledger API: 502 Bad Gateway (is --server the address of an opledger serve?)\n", errOut)
}

// TestServerThatAnswersOtherJSON: a --server that names another JSON API
// (a mistyped port: the proxy's listen address forwards a GET to its
// upstream, which may answer 200 with an object of its own) is not taken
// for an empty answer of the opledger API. Before, ops list printed an
// empty table and the note that the tenant lists no operation at all,
// ops show an empty operation, and ops stats zeros, each exiting 0: an
// exception queue read from the wrong server looked empty.
func TestServerThatAnswersOtherJSON(t *testing.T) {
	t.Parallel()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"count":0}`))
	}))
	t.Cleanup(other.Close)

	for _, args := range [][]string{
		{"ops", "list"},
		{"ops", "show", "intake:I17:create"},
		{"ops", "stats"},
		{"workflows", "list"},
		{"workflows", "list", "--stuck"},
		{"workflows", "show", "wf:C-17"},
		{"events", "list"},
		{"events", "show", "stripe", "evt_1"},
	} {
		out, errOut, code := run(t, append(args, "--server", other.URL, "--token", "opl_x")...)
		require.Equal(t, 1, code, "%v: %s%s", args, out, errOut)
		require.Contains(t, errOut, "not an answer of the opledger API", args)
		require.Contains(t, errOut, "(is --server the address of an opledger serve?)\n", args)
		require.NotContains(t, errOut, "lists no", args)
	}
}

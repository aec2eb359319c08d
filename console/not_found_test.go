package console_test

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
)

// storeConsole opens a ledger of tenant acme on dsn with opts, a
// read-write token of it and a console over it, served; all are closed
// when the test ends.
func storeConsole(t *testing.T, dsn string, opts opledger.Options) (*opledger.Ledger, string, *httptest.Server) {
	t.Helper()
	l, token, srv, _ := storeConsoleWith(t, dsn, opts)
	return l, token, srv
}

// storeConsoleOf is storeConsole with default options, and the console.
func storeConsoleOf(t *testing.T, dsn string) (*opledger.Ledger, string, *httptest.Server, *console.Console) {
	t.Helper()
	return storeConsoleWith(t, dsn, opledger.Options{})
}

// storeConsoleWith is storeConsole, and the console.
func storeConsoleWith(t *testing.T, dsn string, opts opledger.Options) (*opledger.Ledger, string, *httptest.Server, *console.Console) {
	t.Helper()
	return storeConsoleOptions(t, dsn, opts, console.Options{})
}

// storeConsoleOptions is storeConsoleWith with the console's options
// copts (its logger discards everything unless copts names one).
func storeConsoleOptions(t *testing.T, dsn string, opts opledger.Options, copts console.Options) (*opledger.Ledger, string, *httptest.Server, *console.Console) {
	t.Helper()
	opts.Tenant = "acme"
	l, err := opledger.Open(context.Background(), dsn, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	token, _, err := l.CreateToken(context.Background(), "console", opledger.ReadWrite)
	require.NoError(t, err)
	if copts.Logger == nil {
		copts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := console.New(l, copts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return l, token, srv, c
}

// pagedConsole opens a console over a new SQLite ledger
// (storeConsoleOf) whose operations, workflows and events lists show
// pageSize items a page, and signs in to it.
func pagedConsole(t *testing.T, pageSize int) (*opledger.Ledger, *consoleSession) {
	t.Helper()
	l, token, srv, c := storeConsoleOf(t, testdb.SQLiteDSN(t))
	c.SetPageSize(pageSize)
	c.SetWorkflowsPageSize(pageSize)
	c.SetEventsPageSize(pageSize)
	return l, signIn(t, srv.URL, token)
}

// nextPageLink is the address of the list page's link to its next page,
// which it must have, with its cursor.
func nextPageLink(t *testing.T, page string) string {
	t.Helper()
	next := regexp.MustCompile(`href="([^"]*cursor=[^"]+)" id="next-page"`).FindStringSubmatch(page)
	require.Len(t, next, 2, "a link to the next page")
	return html.UnescapeString(next[1])
}

// TestUnknownPathIsAConsolePage: a path the console has no page at, or a
// method it takes no request of there, is answered with the console's own
// page (its layout, a link back to the exception queue, and for a
// signed-in session its navigation) in status 404 (405 with Allow), not
// the plain text of net/http; on both stores.
func TestUnknownPathIsAConsolePage(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			_, token, srv := storeConsole(t, st.NewDSN(t), opledger.Options{})

			check := func(hc *http.Client, method, path string, status int, signedIn bool) string {
				t.Helper()
				req, err := http.NewRequest(method, srv.URL+path, nil)
				require.NoError(t, err)
				resp, err := hc.Do(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				page := string(body)
				require.Equal(t, status, resp.StatusCode, method+" "+path)
				require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"), method+" "+path)
				require.Contains(t, page, `<link rel="stylesheet" href="/static/console.css">`, "the console's layout")
				require.Contains(t, page, `<a href="/">Back to the exception queue</a>`)
				require.Contains(t, page, "<h1>")
				require.NotContains(t, page, "404 page not found")
				if signedIn {
					require.Contains(t, page, `<nav aria-label="Main">`, "signed in: the page keeps the navigation")
					require.Contains(t, page, "tenant <strong>acme</strong>")
				} else {
					require.NotContains(t, page, `<nav aria-label="Main">`)
				}
				if status == http.StatusMethodNotAllowed {
					require.NotEmpty(t, resp.Header.Get("Allow"))
				}
				require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "an error page is never cached, under /static/ too")
				require.False(t, strings.Contains(page, "<script>"), "nothing of the path is echoed as markup")
				return page
			}
			// Every page names its icon, so that a browser does not ask
			// for /favicon.ico at each page: that address has no page, and
			// answering it reads the session from the store.
			require.Contains(t, signIn(t, srv.URL, token).get("/"), `<link rel="icon" href="data:,">`)

			anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			check(anon, http.MethodGet, "/no-such-page", http.StatusNotFound, false)
			// A key with a "/" typed as it is: the address of its page.
			resp, err := anon.Get(srv.URL + "/operations/k:1/nothing")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Equal(t, "/operations/k:1%2Fnothing", resp.Header.Get("Location"))
			// A static file the console does not have, and the folder of
			// its static files, which it does not list.
			check(anon, http.MethodGet, "/static/nope.css", http.StatusNotFound, false)
			check(anon, http.MethodGet, "/static/", http.StatusNotFound, false)
			resp, err = anon.Get(srv.URL + "/static/console.css")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "the console's own static files are served")
			require.Equal(t, "text/css; charset=utf-8", resp.Header.Get("Content-Type"))
			require.Empty(t, resp.Header.Get("Cache-Control"), "and may be cached")

			s := signIn(t, srv.URL, token)
			check(s.hc, http.MethodGet, "/no-such-page", http.StatusNotFound, true)
			check(s.hc, http.MethodGet, "/events/only-a-source", http.StatusNotFound, true)
			check(s.hc, http.MethodGet, "/events/forms/evt:1/nothing", http.StatusNotFound, true)
			check(s.hc, http.MethodGet, "/dashboard/more", http.StatusNotFound, true)
			check(s.hc, http.MethodGet, "/%3Cscript%3E", http.StatusNotFound, true)
			check(s.hc, http.MethodGet, "/static/nope.css", http.StatusNotFound, true)
			check(s.hc, http.MethodGet, "/static/", http.StatusNotFound, true)
			require.Contains(t, check(s.hc, http.MethodGet, "/operations/k:1/resolve", http.StatusMethodNotAllowed, true),
				"takes a form posted from a page of the console, not a link: nothing was done")
			require.Contains(t, check(s.hc, http.MethodGet, "/logout", http.StatusMethodNotAllowed, true),
				"Sign out button", "a sign-out typed as an address is not taken for a decision")
		})
	}
}

// TestUnknownOperationLinksToOperations: the page of an operation that is
// not there (a mistyped key, or one of another tenant) linked only to
// the exception queue: it links to the operations list too, whose "Open
// by key" form takes another try.
func TestUnknownOperationLinksToOperations(t *testing.T) {
	t.Parallel()
	_, token, srv, _ := storeConsoleOf(t, testdb.SQLiteDSN(t))
	s := signIn(t, srv.URL, token)
	for _, path := range []string{"/operations/nope:1", "/operations/a%20b"} {
		status, page := s.fetch(path)
		require.Equal(t, http.StatusNotFound, status, path)
		require.Contains(t, page, `<a href="/operations">Back to the operations</a>`, path)
		require.Contains(t, page, `<a href="/">Back to the exception queue</a>`, path)
	}
}

package proxy_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// Every configuration file shown in docs/proxy.md loads and builds.
func TestDocsConfigExamplesLoad(t *testing.T) {
	t.Setenv("CRM_LOOKUP_TOKEN", "x")
	doc, err := os.ReadFile("../docs/proxy.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```(?:yaml|sh)\n(.*?)```").FindAllSubmatch(doc, -1)
	n := 0
	for _, b := range blocks {
		text := string(b[1])
		if i := strings.Index(text, "$ cat proxy.yaml\n"); i >= 0 {
			text = text[i+len("$ cat proxy.yaml\n"):]
			text = text[:strings.Index(text, "\n$ ")+1]
		} else if !strings.HasPrefix(text, "tenant:") && !strings.HasPrefix(text, "upstreams:") {
			continue
		}
		n++
		path := filepath.Join(t.TempDir(), "proxy.yaml")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		c, err := proxy.LoadConfig(path)
		require.NoError(t, err, "example %d:\n%s", n, text)
		_, err = proxy.RetryPolicies(c.Upstreams)
		require.NoError(t, err, "example %d:\n%s", n, text)
	}
	require.Equal(t, 2, n, "the reference file and the session's file")
}

// TestDocsSession replays docs/proxy.md's recorded session against the
// simulated CRM and checks that the page shows what the proxy answers
// now: every body (problem details included) verbatim, and the proxy's
// own headers with their values, so that the page cannot drift from the
// code unnoticed.
func TestDocsSession(t *testing.T) {
	doc, err := os.ReadFile("../docs/proxy.md")
	require.NoError(t, err)
	session := string(doc)
	session = session[strings.Index(session, "\n## A session\n"):]
	if end := strings.Index(session[1:], "\n## "); end >= 0 {
		session = session[:end+1]
	}
	b := setup(t, testdb.Stores()[0], fakedest.Options{}, lookupByExternalRef)
	const auth = "Bearer sk_test_123"
	shown := func(what string, a answer, status int) {
		t.Helper()
		require.Equal(t, status, a.status, "%s: %s", what, a.body)
		require.Contains(t, session, fmt.Sprintf("HTTP/1.1 %d %s\n", status, http.StatusText(status)), what)
		require.Contains(t, session, strings.TrimSuffix(string(a.body), "\n"), "%s: the body the page shows", what)
		for _, name := range []string{"Idempotent-Replayed", proxy.HeaderOperation, proxy.HeaderState} {
			if v := a.header.Get(name); v != "" {
				require.Contains(t, session, name+": "+v+"\n", "%s: the header the page shows", what)
			}
		}
	}
	order17 := `{"external_ref":"order-17","amount":120}`
	shown("first call", b.send(t, http.MethodPost, "/records", "order-17", auth, order17), http.StatusCreated)
	shown("replay", b.send(t, http.MethodPost, "/records", "order-17", auth, order17), http.StatusCreated)
	shown("mismatch", b.send(t, http.MethodPost, "/records", "order-17", auth, `{"external_ref":"order-17","amount":999}`), http.StatusUnprocessableEntity)
	shown("no key", b.send(t, http.MethodPost, "/records", "", auth, order17), http.StatusBadRequest)
	b.up.Fail(fakedest.LoseResponse)
	order18 := `{"external_ref":"order-18","amount":80}`
	shown("lost response", b.send(t, http.MethodPost, "/records", "order-18", auth, order18), http.StatusBadGateway)
	shown("repeat at once", b.send(t, http.MethodPost, "/records", "order-18", auth, order18), http.StatusConflict)
	b.reconcile(t)
	shown("repeat once looked up", b.send(t, http.MethodPost, "/records", "order-18", auth, order18), http.StatusOK)
	require.Equal(t, 2, b.up.Creates())
	require.Equal(t, 2, b.up.Effects())
	require.Contains(t, session, "The CRM counted 2 creates and 2 records.")
}

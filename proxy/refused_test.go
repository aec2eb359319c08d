package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// rawAnswer sends the raw HTTP/1.1 request req to the proxy at base, on
// a connection of its own, and returns the answer's status and problem
// (zero for an answer that is not problem JSON).
func rawAnswer(t *testing.T, base, req string) (int, httpapi.Problem) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second))) // a guard, not a wait
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var p httpapi.Problem
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		require.NoError(t, json.Unmarshal(body, &p))
	}
	return resp.StatusCode, p
}

// rawPost is a POST of method (any spelling) to target with an
// Idempotency-Key, as raw HTTP/1.1.
func rawPost(method, target, key string) string {
	return method + " " + target + " HTTP/1.1\r\nHost: proxy\r\nIdempotency-Key: " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
}

// A path or query that is not UTF-8 is refused before anything is
// recorded: recorded as JSON text, its bytes would become U+FFFD, and
// another request with the same key would get the first one's answer.
func TestPathNotUTF8Refused(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.srv.URL})
	for _, target := range []string{"/r?a=\xff", "/r?a=\xfe", "/p\xff", "/p\xfe", "/p/\xc3?x=1", "/p?x=\xed\xa0\x80"} {
		status, p := rawAnswer(t, b.url, rawPost("POST", target, "k1"))
		require.Equal(t, http.StatusBadRequest, status, "%q", target)
		require.Equal(t, httpapi.ProblemTypeBase+"invalid_input", p.Type)
		require.Contains(t, p.Detail, "not UTF-8")
	}
	require.Empty(t, up.requests(), "nothing was forwarded")
	require.Zero(t, b.count(t), "nothing was recorded")

	// Percent-encoded, the same bytes are an ordinary request.
	status, _ := rawAnswer(t, b.url, rawPost("POST", "/r?a=%FF", "k1"))
	require.Equal(t, http.StatusCreated, status)
	status, p := rawAnswer(t, b.url, rawPost("POST", "/r?a=%FE", "k1"))
	require.Equal(t, http.StatusUnprocessableEntity, status, "another query, the same key: %+v", p)
	require.Equal(t, []string{"POST /r?a=%FF"}, up.requests())
}

// A protected method spelled in another case ("post") is refused, not
// passed through unprotected: an upstream may take it for POST.
func TestProtectedMethodCaseRefused(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.srv.URL})
	for _, m := range []string{"post", "Post", "pOST", "patch"} {
		status, p := rawAnswer(t, b.url, rawPost(m, "/records", "k-"+m))
		require.Equal(t, http.StatusBadRequest, status, m)
		require.Equal(t, httpapi.ProblemTypeBase+"invalid_input", p.Type)
		require.Contains(t, p.Detail, "upper case")
	}
	require.Empty(t, up.requests(), "nothing was forwarded")
	require.Zero(t, b.count(t))

	status, _ := rawAnswer(t, b.url, "get /records HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
	require.Equal(t, http.StatusCreated, status, "an unprotected method passes through in any spelling")
	status, _ = rawAnswer(t, b.url, rawPost("POST", "/records", "k"))
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, []string{"get /records", "POST /records"}, up.requests())
}

// A path with a ".." segment, as received or percent-encoded, is
// refused: forwarded, it would leave the upstream's base path. So is one
// followed by path parameters (";", "%3B") or a NUL: Tomcat, Jetty and
// Spring strip the parameters before resolving the path.
func TestDotDotRefused(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]),
		proxy.Upstream{Name: "crm", Prefix: "/crm/", URL: up.srv.URL + "/api/crm"},
		proxy.Upstream{Name: "root", URL: up.srv.URL + "/api/root"})
	for _, path := range []string{"/crm/../admin", "/crm/%2e%2e/admin", "/crm/.%2E/admin", "/crm/a/..",
		"/crm/a/..%2Fadmin", "/crm/a%2F..%2F..%2Fadmin", "/..", "/%2E%2E/admin", "/a/..\\admin", "/crm%2F..%2Fadmin",
		"/crm/..;/admin", "/crm/..;x=1/admin", "/crm/..%3B/admin", "/crm/..%3b/admin",
		"/crm/.%2e;x=1/admin", "/crm/%2E%2E%3Bjsessionid=1/admin", "/crm/a/..;", "/crm/..%00/admin", "/crm/..%00.json",
		"/..;/admin", "/a/..;\\admin", "/crm%2F..;%2Fadmin", "/crm/a%2F..%3B%2Fadmin"} {
		for _, method := range []string{"POST", "GET"} {
			status, p := rawAnswer(t, b.url, rawPost(method, path, "k"+path))
			require.Equal(t, http.StatusBadRequest, status, "%s %s", method, path)
			require.Equal(t, httpapi.ProblemTypeBase+"invalid_input", p.Type)
			require.Contains(t, p.Detail, "..")
		}
	}
	require.Empty(t, up.requests(), "nothing was forwarded")
	require.Zero(t, b.count(t))

	// Dots that are not "..", and parameters on other segments, pass.
	passing := []string{"/crm/a..b", "/crm/.../x", "/crm/./x", "/crm/.x",
		"/crm/a;b=1", "/crm/..a;x", "/crm/.;/x", "/crm/...;/x", "/crm/a..;/x", "/crm/;../x"}
	var want []string
	for _, path := range passing {
		status, _ := rawAnswer(t, b.url, rawPost("POST", path, "k"+path))
		require.Equal(t, http.StatusCreated, status, path)
		want = append(want, "POST /api"+path)
	}
	require.Equal(t, want, up.requests())
}

// A method-override header naming another method is refused for every
// method: a GET taken for a POST by the upstream would pass unprotected.
// So is a path-override header (X-Original-URL), which would have the
// upstream act on a path the proxy did not route.
// One naming the request's own method changes nothing and passes.
func TestMethodOverrideRefused(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.srv.URL})
	for _, c := range []struct{ method, header, value string }{
		{"GET", "X-HTTP-Method-Override", "POST"},
		{"GET", "X-HTTP-Method", "PATCH"},
		{"GET", "X-Method-Override", "post"},
		{"POST", "X-HTTP-Method-Override", "DELETE"},
		{"POST", "X-HTTP-Method-Override", "GET"},
	} {
		req := c.method + " /records HTTP/1.1\r\nHost: proxy\r\nIdempotency-Key: k-" + c.header + c.value +
			"\r\n" + c.header + ": " + c.value + "\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
		status, p := rawAnswer(t, b.url, req)
		require.Equal(t, http.StatusBadRequest, status, "%+v", c)
		require.Equal(t, httpapi.ProblemTypeBase+"invalid_input", p.Type)
		require.Contains(t, p.Detail, c.header)
	}
	require.Empty(t, up.requests(), "nothing was forwarded")
	require.Zero(t, b.count(t), "nothing was recorded")

	// A path override is refused whatever it names.
	for _, h := range []string{"X-Original-URL", "X-Rewrite-URL"} {
		req := "POST /records HTTP/1.1\r\nHost: proxy\r\nIdempotency-Key: k-" + h + "\r\n" + h +
			": /admin\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
		status, p := rawAnswer(t, b.url, req)
		require.Equal(t, http.StatusBadRequest, status, h)
		require.Contains(t, p.Detail, "asks for another path", h)
	}
	require.Empty(t, up.requests(), "nothing was forwarded")

	req := "POST /records HTTP/1.1\r\nHost: proxy\r\nIdempotency-Key: k\r\nX-HTTP-Method-Override: POST" +
		"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	status, _ := rawAnswer(t, b.url, req)
	require.Equal(t, http.StatusCreated, status, "an override naming the request's own method")
	require.Equal(t, []string{"POST /records"}, up.requests())
}

// TestConnectRefused: a CONNECT is refused with 405, problem JSON and an
// Allow header, on every route, whatever its target (authority form or a
// path), and never reaches an upstream: one that is a forward proxy
// itself would open a tunnel through the proxy, unrecorded.
func TestConnectRefused(t *testing.T) {
	t.Parallel()
	root := newRecorder(t)
	crm := newRecorder(t)
	b := proxyFor(t,
		proxy.Upstream{Name: "root", URL: root.srv.URL},
		proxy.Upstream{Name: "crm", Prefix: "/crm/", URL: crm.srv.URL, ProtectedMethods: []string{"POST", "PUT", "PATCH", "DELETE"}})
	for _, target := range []string{"example.com:443", "/crm/records", "/records", "/crm"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second))) // a guard, not a wait
		_, err = io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: example.com:443\r\nIdempotency-Key: k\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		c.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "CONNECT %s: %s", target, body)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		require.Equal(t, "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE", resp.Header.Get("Allow"))
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(body, &p))
		require.Equal(t, httpapi.ProblemTypeBase+"method_not_allowed", p.Type)
	}
	require.Empty(t, root.requests(), "nothing forwarded")
	require.Empty(t, crm.requests(), "nothing forwarded")
}

// TestMethodOverrideEmptyPasses: an empty method-override header names
// no method, and no framework that reads one (Rails, Express,
// ASP.NET, Laravel) takes an empty value for a method: the request is
// its own method. It used to be refused as asking "for the method
// instead of POST"; it now passes, forwarded as sent. An empty value
// beside one naming another method is still refused.
func TestMethodOverrideEmptyPasses(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.srv.URL})
	for i, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		req := "POST /records HTTP/1.1\r\nHost: proxy\r\nIdempotency-Key: k-" + h + "\r\n" + h +
			": \r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
		status, p := rawAnswer(t, b.url, req)
		require.Equal(t, http.StatusCreated, status, "%s: %+v", h, p)
		require.Len(t, up.requests(), 2*i+1)
		status, p = rawAnswer(t, b.url, "GET /records HTTP/1.1\r\nHost: proxy\r\n"+h+":   \r\nConnection: close\r\n\r\n")
		require.NotEqual(t, http.StatusBadRequest, status, "%s: %+v", h, p)
		require.Len(t, up.requests(), 2*i+2)
	}
	req := "GET /records HTTP/1.1\r\nHost: proxy\r\nX-HTTP-Method-Override: \r\nX-HTTP-Method-Override: POST\r\nConnection: close\r\n\r\n"
	status, p := rawAnswer(t, b.url, req)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, p.Detail, "asks for the method POST instead of GET")
}

// TestMethodOverrideInAnotherCase checks that an override naming the
// request's own method in another case passes (the frameworks that honour
// the header upper-case its value, so it names the same method), while
// one naming another method in any case is still refused.
func TestMethodOverrideInAnotherCase(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.srv.URL})
	status, p := rawAnswer(t, b.url, "POST /records HTTP/1.1\r\nHost: proxy\r\nIdempotency-Key: k-case\r\nX-HTTP-Method-Override: post\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	require.Equal(t, http.StatusCreated, status, "%+v", p)
	require.Len(t, up.requests(), 1)
	status, p = rawAnswer(t, b.url, "GET /records HTTP/1.1\r\nHost: proxy\r\nX-HTTP-Method: Get\r\nConnection: close\r\n\r\n")
	require.NotEqual(t, http.StatusBadRequest, status, "%+v", p)
	require.Len(t, up.requests(), 2)
	status, p = rawAnswer(t, b.url, "GET /records HTTP/1.1\r\nHost: proxy\r\nX-Method-Override: post\r\nConnection: close\r\n\r\n")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, p.Detail, "asks for the method post instead of GET")
	require.Len(t, up.requests(), 2)
}

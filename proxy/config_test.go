package proxy_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// A negative limit or duration is refused with an error naming it; 0 (or
// absent) is the documented default.
func TestNegativeSettingsRefused(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	const url = "http://127.0.0.1:1"
	for _, c := range []struct {
		u    proxy.Upstream
		want string
	}{
		{proxy.Upstream{Timeout: destination.Duration(-time.Second)}, "timeout is -1s: it must be positive (0 or absent means the default, 30s)"},
		{proxy.Upstream{Timeout: destination.Duration(opledger.MaxLease)}, "timeout is 168h0m0s: it must be at most 167h59m0s (a forward's lease, the timeout and a minute, is at most 168h0m0s)"},
		{proxy.Upstream{MaxBodyBytes: -1}, "max_body_bytes is -1: it must be positive"},
		{proxy.Upstream{MaxResponseBytes: -5}, "max_response_bytes is -5: it must be positive"},
	} {
		c.u.Name, c.u.URL = "crm", url
		_, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{c.u}})
		require.ErrorContains(t, err, c.want)
		_, err = proxy.RetryPolicies([]proxy.Upstream{c.u})
		require.ErrorContains(t, err, c.want)
	}
	up := []proxy.Upstream{{Name: "crm", URL: url}}
	_, err = proxy.New(l, proxy.Config{Upstreams: up, ReconcileInterval: -time.Second})
	require.ErrorContains(t, err, "reconcile interval is -1s: it must be positive")
	_, err = proxy.New(l, proxy.Config{Upstreams: up, CompactInterval: -time.Second})
	require.ErrorContains(t, err, "compact interval is -1s")
	_, err = proxy.New(l, proxy.Config{Upstreams: up, InFlightRetryAfter: -1})
	require.ErrorContains(t, err, "InFlightRetryAfter is -1")

	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "crm", URL: url, Timeout: 0, MaxBodyBytes: 0}}})
	require.NoError(t, err, "0 is the default")
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = p.Run(context.Background(), ln, -time.Second)
	require.ErrorContains(t, err, "shutdown timeout is -1s: it must be positive")
	_, err = net.Dial("tcp", ln.Addr().String())
	require.Error(t, err, "the listener is closed")

	// The same rule in a configuration file.
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	require.NoError(t, os.WriteFile(path, []byte("upstreams:\n  - name: crm\n    url: "+url+"\n    max_body_bytes: -1\n"), 0o644))
	_, err = proxy.LoadConfig(path)
	require.ErrorContains(t, err, "proxy config "+path+": line 2: upstream crm: max_body_bytes is -1")
	require.NoError(t, os.WriteFile(path, []byte("upstreams:\n  - name: crm\n    url: "+url+"\n    timeout: -5s\n"), 0o644))
	_, err = proxy.LoadConfig(path)
	require.ErrorContains(t, err, "negative")
}

// TestLoadConfigRefusals: a second YAML document, a file larger than 4 MiB
// or not a regular file, and a tenant outside the key syntax are refused,
// each with an error naming the file.
func TestLoadConfigRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const upstreams = "upstreams:\n  - name: crm\n    url: http://127.0.0.1:1\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"two documents", upstreams + "---\n" + upstreams, "only one YAML document is allowed"},
		{"an empty second document", upstreams + "---\n", "only one YAML document is allowed"},
		{"tenant with a space", "tenant: bad tenant\n" + upstreams, "tenant takes a name in the operation key syntax: key may contain only letters"},
		{"tenant with a NUL", "tenant: \"a\\0b\"\n" + upstreams, "tenant takes a name in the operation key syntax"},
		{"tenant too long", "tenant: " + strings.Repeat("t", 201) + "\n" + upstreams, "tenant takes a name in the operation key syntax: key is longer than 200 bytes"},
		// A section without a value would declare nothing.
		{"empty sections", upstreams + "    retry:\n    unique_reference: ~\n",
			"line 4: upstreams.0.retry: has no value: write retry: {} for the default policy (5 attempts, 1s, 5m, 24h), or leave it out\n" +
				"line 5: upstreams.0.unique_reference: has no value"},
		{"empty idempotency", upstreams + "  - name: pay\n    url: http://127.0.0.1:2\n    idempotency:\n",
			"line 6: upstreams.1.idempotency: has no value"},

		// An upstream's own settings are checked at load, at its line.
		{"an upstream url without a scheme", upstreams + "  - name: pay\n    url: pay.example.com\n",
			"line 4: upstream pay: url must be an absolute http:// or https:// URL"},
		{"an upstream without a name", upstreams + "  - url: http://127.0.0.1:2\n", "line 4: upstream: name is required"},
		{"a ref that is no JSON pointer", "upstreams:\n  - name: crm\n    ref: id\n    url: http://127.0.0.1:1\n",
			"line 2: upstream crm: destination proxy:crm: ref: JSON pointer \"id\" must start with /"},
		{"a name used twice", upstreams + "  - name: crm\n    prefix: /b/\n    url: http://127.0.0.1:2\n",
			"line 4: upstream crm: the name is already used by another upstream"},

		// A duration that is not one names its field.
		{"a timeout without a unit", upstreams + "    timeout: 30\n", `line 4: upstreams.0.timeout: duration "30" needs a unit, e.g. 30s`},
		{"a retention that is no duration", upstreams + "    idempotency: {header: Idempotency-Key, retention: 1d}\n",
			`line 4: upstreams.0.idempotency.retention: "1d" is not a duration like 10s or 24h`},

		// With an unknown field: both, by line (the unknown field used to
		// be left unsaid, after or before the duration).
		{"a timeout without a unit and an unknown field", upstreams + "    timeout: 30\n    bogus: 1\n",
			"line 4: upstreams.0.timeout: duration \"30\" needs a unit, e.g. 30s\nline 5: field bogus not found in type proxy.Upstream"},
		{"an unknown field and a retention that is no duration", upstreams + "    bogus: 1\n    idempotency: {header: Idempotency-Key, retention: 1d}\n",
			"line 4: field bogus not found in type proxy.Upstream\nline 5: upstreams.0.idempotency.retention: \"1d\" is not a duration like 10s or 24h"},
		{"two durations", upstreams + "    timeout: 30\n    retry: {max_delay: 1d}\n",
			"line 4: upstreams.0.timeout: duration \"30\" needs a unit, e.g. 30s\nline 5: upstreams.0.retry.max_delay: \"1d\" is not a duration like 10s or 24h"},

		// The proxy's timeout of 0 is its default, not refused.
		{"empty section beside a zero timeout", upstreams + "    timeout: 0s\n    retry:\n", "line 5: upstreams.0.retry: has no value"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
		require.NoError(t, os.WriteFile(path, []byte(tc.yaml), 0o644))
		_, err := proxy.LoadConfig(path)
		require.ErrorContains(t, err, "proxy config "+path+": "+tc.want, tc.name)
	}
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte(upstreams+"# "+strings.Repeat("x", 4<<20)+"\n"), 0o644))
	_, err := proxy.LoadConfig(big)
	require.EqualError(t, err, "read proxy config: "+big+": larger than 4 MiB")
	_, err = proxy.LoadConfig(dir)
	require.EqualError(t, err, "read proxy config: "+dir+": not a regular file")

	ok := filepath.Join(dir, "ok.yaml")
	require.NoError(t, os.WriteFile(ok, []byte("tenant: acme\n"+upstreams+"    timeout: 0s\n"), 0o644))
	c, err := proxy.LoadConfig(ok)
	require.NoError(t, err)
	require.Equal(t, "acme", c.Tenant)
}

// TestUpstreamURLRefused: an upstream's url is absolute http(s), without
// a query or fragment, and the refusal names the upstream and says what
// is wrong: an escape, host or port that does not parse, or a port no
// connection can reach (url.Parse takes any digits; every forward would have been
// refused as if the upstream were down).
func TestUpstreamURLRefused(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"127.0.0.1:1":             "upstream crm: url must be an absolute http:// or https:// URL",
		"ftp://127.0.0.1:1":       "upstream crm: url must be an absolute http:// or https:// URL",
		"http://127.0.0.1:1/?v=2": "upstream crm: url must not carry a query or fragment",
		"http://127.0.0.1:1/#top": "upstream crm: url must not carry a query or fragment",
		// Empty, but sent: every forward went to /?.
		"http://127.0.0.1:1/?": "upstream crm: url must not carry a query or fragment",
		"http://127.0.0.1:1/#": "upstream crm: url must not carry a query or fragment",
		// What is wrong, not a scheme that is right already.
		"http://127.0.0.1:1/a%zz":  `upstream crm: url is not a URL: invalid URL escape "%zz"`,
		"http://127.0.0.1:abc":     `upstream crm: url is not a URL: invalid port ":abc" after host`,
		"http://[::1":              `upstream crm: url is not a URL: missing ']' in host`,
		"http://127.0.0.1:99999/a": "upstream crm: url has port 99999: a port is a number from 1 to 65535",
		"http://127.0.0.1:0":       "upstream crm: url has port 0: a port is a number from 1 to 65535",
	} {
		require.EqualError(t, proxy.CheckUpstreams([]proxy.Upstream{{Name: "crm", URL: raw}}), want, raw)
	}
	require.NoError(t, proxy.CheckUpstreams([]proxy.Upstream{{Name: "crm", URL: "https://api.example.com/v1"}}))
}

// TestPrefixNoPathMatchesRefused: a prefix that no request can be under
// (one holding ? or #, which end a path, or a .. segment, refused in
// every path) is refused at start: its requests would go, unnoticed, to
// the upstream of a shorter prefix (/) instead.
func TestPrefixNoPathMatchesRefused(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"/crm?v=1/", "/crm#x", "/a/../b/", "/a/..", "/../"} {
		err := proxy.CheckUpstreams([]proxy.Upstream{{Name: "x", Prefix: prefix, URL: "http://127.0.0.1:1"}})
		require.Error(t, err, "prefix %q", prefix)
		require.Contains(t, err.Error(), "no request path can be under it", "prefix %q", prefix)
	}
	require.NoError(t, proxy.CheckUpstreams([]proxy.Upstream{{Name: "x", Prefix: "/a/..b/", URL: "http://127.0.0.1:1"}}), "..b is a name")
}

// TestPrefixEmptySegmentRefused: a prefix with an empty segment ("//",
// "/a//") is refused at start, naming the upstream and the prefix, and
// in a file at the upstream's line: it routes only paths that repeat the
// slash, which clients and the proxies in front of this one collapse,
// while the path it was meant for ("/a/x") goes to a shorter prefix's
// upstream.
func TestPrefixEmptySegmentRefused(t *testing.T) {
	t.Parallel()
	for prefix, want := range map[string]string{
		"//":      `upstream x: prefix "//" has an empty segment (//): no request path is routed as meant; write it with single slashes, as "/"`,
		"/a//":    `upstream x: prefix "/a//" has an empty segment (//): no request path is routed as meant; write it with single slashes, as "/a/"`,
		"//a/":    `upstream x: prefix "//a/" has an empty segment (//): no request path is routed as meant; write it with single slashes, as "/a/"`,
		"/a///b/": `upstream x: prefix "/a///b/" has an empty segment (//): no request path is routed as meant; write it with single slashes, as "/a/b/"`,
	} {
		require.EqualError(t, proxy.CheckUpstreams([]proxy.Upstream{{Name: "x", Prefix: prefix, URL: "http://127.0.0.1:1"}}), want, prefix)
	}
	for _, prefix := range []string{"/", "/a", "/a/", "/a/b/"} {
		require.NoError(t, proxy.CheckUpstreams([]proxy.Upstream{{Name: "x", Prefix: prefix, URL: "http://127.0.0.1:1"}}), prefix)
	}
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	require.NoError(t, os.WriteFile(path, []byte("upstreams:\n  - name: crm\n    url: http://127.0.0.1:1\n  - name: pay\n    prefix: /pay//\n    url: http://127.0.0.1:2\n"), 0o644))
	_, err := proxy.LoadConfig(path)
	require.EqualError(t, err, "proxy config "+path+`: line 4: upstream pay: prefix "/pay//" has an empty segment (//): no request path is routed as meant; write it with single slashes, as "/pay/"`)
}

// TestTimeoutTooShortRefused: a timeout below MinTimeout (1ns, a
// millisecond written for a minute) leaves the upstream no time to
// answer, so that every forward would end uncertain: it is refused at
// start, in Go and in a file, naming the upstream; MinTimeout itself is
// taken.
func TestTimeoutTooShortRefused(t *testing.T) {
	t.Parallel()
	const url = "http://127.0.0.1:1"
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, proxy.MinTimeout - time.Nanosecond} {
		err := proxy.CheckUpstreams([]proxy.Upstream{{Name: "crm", URL: url, Timeout: destination.Duration(d)}})
		require.EqualError(t, err, "upstream crm: timeout is "+d.String()+": it must be at least 100ms (0 or absent means the default, 30s): "+
			"a shorter one leaves the upstream no time to answer, and every forward would end uncertain (504) though it may have acted", d.String())
		_, err = proxy.RetryPolicies([]proxy.Upstream{{Name: "crm", URL: url, Timeout: destination.Duration(d)}})
		require.Error(t, err, d.String())
	}
	require.NoError(t, proxy.CheckUpstreams([]proxy.Upstream{{Name: "crm", URL: url, Timeout: destination.Duration(proxy.MinTimeout)}}))
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	require.NoError(t, os.WriteFile(path, []byte("upstreams:\n  - name: crm\n    url: "+url+"\n    timeout: 1ns\n"), 0o644))
	_, err := proxy.LoadConfig(path)
	require.ErrorContains(t, err, "proxy config "+path+": line 2: upstream crm: timeout is 1ns: it must be at least 100ms")
}

// TestTimeoutFloorShared: the proxy's upstreams and the destinations
// take the same floor through one check (destination.TimeoutTooShort):
// a timeout one refuses as too short the other refuses too, each in its
// own words, and both take MinTimeout and the unset 0.
func TestTimeoutFloorShared(t *testing.T) {
	t.Parallel()
	const url = "http://127.0.0.1:1"
	for _, d := range []time.Duration{0, time.Nanosecond, proxy.MinTimeout - time.Nanosecond, proxy.MinTimeout, time.Second} {
		short := destination.TimeoutTooShort(d)
		require.Equal(t, d > 0 && d < proxy.MinTimeout, short, d.String())
		err := proxy.CheckUpstreams([]proxy.Upstream{{Name: "crm", URL: url, Timeout: destination.Duration(d)}})
		_, derr := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: url + "/x", Ref: "/id", Timeout: destination.Duration(d)}, destination.LoadOptions{})
		if short {
			require.ErrorContains(t, err, "(0 or absent means the default, 30s)", d.String())
			require.ErrorContains(t, derr, "(leave it out for the default 10s)", d.String())
		} else {
			require.NoError(t, err, d.String())
			require.NoError(t, derr, d.String())
		}
	}
}

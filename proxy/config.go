package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/configfile"
)

// Defaults of an Upstream.
const (
	// DefaultMaxBodyBytes is the largest request body buffered (1 MiB).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxResponseBytes is the largest upstream answer saved for
	// replay (1 MiB); a larger one is returned once and saved without body.
	DefaultMaxResponseBytes = 1 << 20
	// DefaultTimeout bounds the wait for the upstream of one forwarded
	// request (see Upstream.Timeout).
	DefaultTimeout = 30 * time.Second
	// MinTimeout is the shortest Upstream.Timeout taken (100 ms, the
	// floor of the command's other intervals): a shorter one leaves the
	// upstream no time to answer (the wait counts from the moment the
	// request is written, and a body must arrive within it too), so that
	// every forward would end uncertain though the upstream may have
	// acted. A typo (1ms for 1m, 1ns) is refused rather than run.
	MinTimeout = destination.MinTimeout
	// DefaultCredentialHeader scopes keys per caller.
	DefaultCredentialHeader = "Authorization"
	// DefaultRef is where the effect's reference is read from a 2xx JSON
	// answer.
	DefaultRef = "/id"
	// DefaultMaxAttempts is how many forwards an operation may get after
	// retryable answers (429, 503, refused connections) before it is
	// failed (exhausted).
	DefaultMaxAttempts = 100
	// DefaultUpstreamName is the name opledger proxy --upstream gives its
	// one upstream unless told another (--name). Operation keys carry the
	// name, so it never changes: a proxy that shares its store with another
	// one must give each upstream its own name.
	DefaultUpstreamName = "upstream"
)

// DefaultProtectedMethods are the methods recorded in the ledger when an
// upstream names none.
var DefaultProtectedMethods = []string{http.MethodPost, http.MethodPatch}

// Upstream configures one API behind the proxy. Name and URL are required.
// Idempotency, Lookup and UniqueReference declare what the upstream
// guarantees (DESIGN.md section 6), exactly as for a destination in
// docs/destinations.md; the reconciler uses only what is declared.
type Upstream struct {
	// Name identifies the upstream; its operations have the destination
	// "proxy:" + Name and keys "proxy:" + Name + ":" + a digest. Key syntax
	// (letters, digits, . _ : / -). Keys are scoped by the name, not by
	// the URL: proxies that share a store must give different upstreams
	// different names, and renaming an upstream makes its earlier keys
	// unknown to it (their requests would be forwarded again).
	Name string `yaml:"name"`
	// Prefix routes requests whose path starts with it to this upstream and
	// is removed before forwarding. Default "/". The longest match wins.
	// It is written decoded, with single slashes: one with an empty
	// segment ("/a//"), a percent-escape, ?, # or a .. segment is refused.
	Prefix string `yaml:"prefix"`
	// URL is the upstream's base URL; the path after Prefix is appended
	// with its slash ("/crm/x" is URL + "/x"). A request to the prefix
	// itself without its slash ("/crm" for "/crm/") goes to URL as
	// written.
	URL string `yaml:"url"`
	// ProtectedMethods go through the ledger. Default POST and PATCH; a
	// list replaces the default whole ([PUT] leaves POST unprotected).
	// Other methods are passed through as a plain reverse proxy; a
	// protected method spelled in another case ("post") is refused with
	// 400.
	ProtectedMethods []string `yaml:"protected_methods"`
	// AllowMissingKey passes a protected request without an
	// Idempotency-Key header through unprotected instead of refusing it
	// with 400.
	AllowMissingKey bool `yaml:"allow_missing_key"`
	// MaxBodyBytes bounds a protected request's body (larger: 413).
	// 0 means DefaultMaxBodyBytes; negative is refused.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxResponseBytes bounds the answer saved for replay. 0 means
	// DefaultMaxResponseBytes; negative is refused. A larger 2xx answer is
	// passed whole to the first caller and its reference read from the
	// whole of it, but only its status and headers are saved.
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// CredentialHeader is the request header whose SHA-256 scopes the
	// callers' keys. Default Authorization. Requests without it share the
	// upstream's anonymous scope. A header that names no caller (Host,
	// Content-Type, a hop-by-hop or forwarding header, Idempotency-Key)
	// is refused: every caller would share one scope.
	CredentialHeader string `yaml:"credential_header"`
	// CompareHeaders are request headers that are part of what a repeat
	// must match, like the method, path, query and body: a header that
	// selects what the upstream acts on (Stripe-Account, a tenant or API
	// version header). Their values as forwarded are recorded in the
	// operation's payload (a sensitive field, headers), and a request
	// repeating a key with other values for them, or without one the
	// first had, is refused with 422 as another request. The upstream's
	// lookups send each operation's recorded values, so none of them may
	// be in Lookup.Headers. Names are HTTP field names in any case; a
	// credential header, the Idempotency-Key and the headers the proxy
	// does not pass on as sent (hop-by-hop, forwarding, Host,
	// Content-Length, Accept-Encoding, Expect) are refused. Empty by default:
	// headers are no part of the fingerprint.
	CompareHeaders []string `yaml:"compare_headers"`
	// Timeout bounds the time a forwarded request waits for the upstream,
	// in all: for its status and headers and for the parts of its answer. A
	// request that gets no answer in time after it was written is
	// uncertain (504). The time the caller takes to receive an answer too
	// large to save does not count; a caller that takes nothing of it for
	// this long instead (see ConnContext) has its connection broken off
	// (the outcome stays the upstream's). It also bounds the
	// reading of a protected request's body, before anything is recorded:
	// a body that does not arrive in time gets 408. 0 means
	// DefaultTimeout (30 s); negative, or below MinTimeout (100 ms), is
	// refused.
	Timeout destination.Duration `yaml:"timeout"`
	// Ref is the RFC 6901 JSON pointer to the effect's reference in a 2xx
	// answer. Default /id. Answers without one (not JSON, nothing there,
	// not a string, number or boolean, longer than 200 bytes, or not text
	// the ledger can store: a NUL byte, invalid UTF-8, a lone surrogate)
	// are recorded under the attempt id.
	Ref string `yaml:"ref"`
	// Idempotency declares that the upstream honours an idempotency key
	// header. The proxy then sends the ledger's derived key (never the
	// caller's) and may re-forward an uncertain request under it inside
	// the retention window.
	Idempotency *destination.IdempotencyConfig `yaml:"idempotency"`
	// Lookup declares how the reconciler finds an effect whose response
	// was lost. Its templates see the operation's payload: method, path
	// and, for a JSON request body, body (e.g. /body/external_ref).
	Lookup *destination.LookupConfig `yaml:"lookup"`
	// UniqueReference declares that a duplicate create is refused with a
	// conflict status; it needs a Lookup.
	UniqueReference *destination.UniqueReferenceConfig `yaml:"unique_reference"`
	// UncertainStatuses are answer statuses after which the upstream may
	// have acted (a gateway's 503 sent while the backend went on): such
	// an answer is uncertain, passed on with Opledger-State: uncertain,
	// and a repeat is not forwarded again until the reconciler settles
	// it, whatever the status means otherwise. Checked as a
	// destination's (destination.HTTPConfig.UncertainStatuses).
	UncertainStatuses []int `yaml:"uncertain_statuses"`
	// Owner names who decides this upstream's operations when automation
	// cannot (Operation.Owner: a team or an on-call handle): its held
	// operations wait for it in the exception queue, and lists filter by
	// it. Empty leaves them without an owner.
	Owner string `yaml:"owner"`
	// Retry overrides the retry policy for retryable answers. Default:
	// DefaultMaxAttempts attempts, no delay beyond the upstream's
	// Retry-After, no deadline (the caller decides when to retry).
	Retry *destination.RetryConfig `yaml:"retry"`
}

// FileConfig is the YAML file of opledger proxy --config:
//
//	tenant: default            # ledger tenant of the proxy's operations
//	upstreams:
//	  - name: crm
//	    prefix: /crm/
//	    url: https://crm.example.com/api
//	    protected_methods: [POST, PATCH]
//	    max_body_bytes: 1048576
//	    credential_header: Authorization
//	    compare_headers: [Stripe-Account]
//	    timeout: 30s
//	    ref: /id
//	    idempotency: {header: Idempotency-Key, retention: 24h}
//	    lookup: {...}          # as in docs/destinations.md
//
// See docs/proxy.md for every field.
type FileConfig struct {
	// Tenant is the ledger tenant of the proxy's operations, in the key
	// syntax (opledger.ValidateKey). Default opledger.DefaultTenant.
	Tenant string `yaml:"tenant"`
	// Upstreams are the APIs behind the proxy. At least one.
	Upstreams []Upstream `yaml:"upstreams"`
}

// LoadConfig reads a proxy configuration file: a regular file of at most
// configfile.MaxSize (4 MiB) bytes holding one YAML document. Unknown
// fields are errors naming their line. Its tenant is checked here, so
// that the error names the file.
func LoadConfig(path string) (*FileConfig, error) {
	data, err := configfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("read proxy config: %w", err)
	}
	var c FileConfig
	if err := configfile.DecodeYAML(data, &c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("proxy config %s is empty: it needs an upstreams list", path)
		}
		// Values of the wrong kind and durations that are not one are
		// said by their field in DecodeYAML's words already, with the
		// unknown fields beside them.
		return nil, fmt.Errorf("proxy config %s: %w", path, err)
	}
	if c.Tenant != "" {
		if err := opledger.ValidateKey(c.Tenant); err != nil {
			reason := err.Error()
			var ke *opledger.KeyError
			if errors.As(err, &ke) {
				reason = ke.Reason
			}
			// Like a key, the value is not repeated.
			return nil, fmt.Errorf("proxy config %s: tenant takes a name in the operation key syntax: %s", path, reason)
		}
	}
	if len(c.Upstreams) == 0 {
		return nil, fmt.Errorf("proxy config %s: no upstreams: the file needs a non-empty upstreams list", path)
	}
	if err := emptySections(data); err != nil {
		return nil, fmt.Errorf("proxy config %s: %w", path, err)
	}
	if err := checkUpstreamsAt(data, c.Upstreams); err != nil {
		return nil, fmt.Errorf("proxy config %s: %w", path, err)
	}
	return &c, nil
}

// checkUpstreamsAt reports the first problem New would find with the
// upstreams (CheckUpstreams), at the line of the entry it is in: each
// upstream is checked with those before it, so that the first entry
// refused is the one at fault, a name or prefix used twice included.
func checkUpstreamsAt(data []byte, us []Upstream) error {
	for i := range us {
		routes, err := buildRoutes(us[:i+1], netHTTPTransport)
		if err != nil {
			if line := upstreamLine(data, i); line > 0 {
				return fmt.Errorf("line %d: %w", line, err)
			}
			return err
		}
		for _, r := range routes {
			_ = r.dest.Close()
		}
	}
	return nil
}

// upstreamLine is the line of the i-th entry of the file's upstreams
// list; 0 when it cannot be found.
func upstreamLine(data []byte, i int) int {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return 0
	}
	doc := root.Content[0]
	for k := 0; k+1 < len(doc.Content); k += 2 {
		if doc.Content[k].Value == "upstreams" && doc.Content[k+1].Kind == yaml.SequenceNode && i < len(doc.Content[k+1].Content) {
			return doc.Content[k+1].Content[i].Line
		}
	}
	return 0
}

// emptySections refuses the sections of an upstream written without a
// value ("retry:", "lookup: ~"), which the decoder leaves unset and so
// would declare nothing, as the destinations file refuses them
// (destination.EmptySections); an upstream's tenants take no value.
func emptySections(data []byte) error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "upstreams" || doc.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		var errs []error
		for n, up := range doc.Content[i+1].Content {
			errs = append(errs, destination.EmptySections(up, "upstreams."+strconv.Itoa(n))...)
		}
		return errors.Join(errs...)
	}
	return nil
}

// CheckUpstreams reports the first problem New would find with the
// upstreams (a name, a URL, a prefix, a setting), without a ledger: a
// command line can refuse them as bad input before it opens the store.
func CheckUpstreams(us []Upstream) error {
	if len(us) == 0 {
		return errNoUpstream
	}
	_, err := buildRoutes(us, netHTTPTransport)
	return err
}

// errNoUpstream refuses a proxy configured with no upstream.
var errNoUpstream = errors.New("proxy: no upstream configured")

// route is a checked, ready upstream.
type route struct {
	Upstream
	dest *destination.HTTP
	// client sends the forwarded requests, on the transport the lookups
	// of dest use too.
	client    *http.Client
	base      *url.URL
	protected map[string]bool
	timeout   time.Duration
	policy    opledger.RetryPolicy
	idemHdr   string
	credHdr   string
	// compared are the CompareHeaders, canonical and sorted.
	compared []string
	// prefix is the Prefix without its trailing slash, in segments
	// ("/crm/" is ["", "crm"]); nil for "/".
	prefix []string
	// identity is the upstream's base URL without credentials, saved with
	// its answers to detect another upstream under the same name.
	identity string
	// scope is the state of its key scope in the ledger (pinKeyScope).
	scope keyScopeState
}

// ParseUpstreamURL parses an upstream's base URL, which must be an
// absolute http:// or https:// URL without a query or fragment. Its error
// says what is wrong, to follow the name of what gave the URL ("url" in a
// file, --upstream on the command line).
func ParseUpstreamURL(raw string) (*url.URL, error) {
	base, err := url.Parse(raw)
	if ue, ok := errors.AsType[*url.Error](err); ok && strings.Contains(raw, "://") {
		// What does not parse in what is meant as an absolute URL,
		// without the URL, which may hold a password: a bad escape, a
		// host or port that cannot be one.
		return nil, fmt.Errorf("is not a URL: %v", ue.Err)
	}
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, errors.New("must be an absolute http:// or https:// URL")
	}
	if port := base.Port(); port != "" {
		// url.Parse takes any digits: a port no connection can reach
		// would make every request look like an upstream outage.
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return nil, fmt.Errorf("has port %s: a port is a number from 1 to 65535", port)
		}
	}
	if base.RawQuery != "" || base.ForceQuery || base.Fragment != "" || strings.Contains(raw, "#") {
		// An empty query ("?") is sent with every forward too.
		return nil, errors.New("must not carry a query or fragment")
	}
	if base.User != nil {
		// Not repeated: it may hold a password.
		return nil, errors.New("must not carry a user or password (user:password@): the caller's own headers carry its credential")
	}
	return base, nil
}

// maxNameLength keeps "proxy:<name>:<48 hex digits>" within
// opledger.MaxKeyLength.
const maxNameLength = opledger.MaxKeyLength - len("proxy:") - len(":") - 48

// destinationName is the ledger destination of an upstream's operations.
func destinationName(upstream string) string { return "proxy:" + upstream }

// build checks u and prepares its route.
func (u Upstream) build(transport http.RoundTripper) (*route, error) {
	if u.Name == "" {
		return nil, errors.New("upstream: name is required")
	}
	if err := opledger.ValidateKey(u.Name); err != nil {
		return nil, fmt.Errorf("upstream name %q: %w", u.Name, err)
	}
	if len(u.Name) > maxNameLength {
		return nil, fmt.Errorf("upstream name %q is longer than %d bytes: operation keys carry it", u.Name, maxNameLength)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("upstream %s: %s", u.Name, fmt.Sprintf(format, args...))
	}
	base, err := ParseUpstreamURL(u.URL)
	if err != nil {
		return nil, fail("url %v", err)
	}
	if err := opledger.CheckOwner(u.Owner); err != nil {
		return nil, fail("owner: %v", err)
	}
	if u.Prefix == "" {
		u.Prefix = "/"
	}
	if !strings.HasPrefix(u.Prefix, "/") {
		return nil, fail("prefix %q must start with /", u.Prefix)
	}
	if strings.Contains(u.Prefix, "%") {
		// Paths are routed segment by segment, decoded: a prefix
		// "/a%2Fb/" matched only a path escaping the escape
		// ("/a%252Fb/"), never the one it reads as.
		return nil, fail("prefix %q holds a percent-escape: write its segments as they read decoded", u.Prefix)
	}
	if strings.ContainsAny(u.Prefix, "?#") || hasDotDot(u.Prefix) {
		// A path ends before ? and #, and one with a .. segment is
		// refused (ServeHTTP): the route would take nothing, and its
		// requests would go to the upstream of a shorter prefix.
		return nil, fail("prefix %q holds ?, # or a .. segment: no request path can be under it", u.Prefix)
	}
	if strings.Contains(u.Prefix, "//") {
		// An empty segment: the route takes only paths that repeat the
		// slash, which clients and the proxies in front collapse, and
		// the paths it was meant for go to a shorter prefix's upstream.
		return nil, fail("prefix %q has an empty segment (//): no request path is routed as meant; write it with single slashes, as %q", u.Prefix, singleSlashes(u.Prefix))
	}
	// 0 is "not set" and takes the default; a negative value is a
	// mistake, never silently replaced.
	if u.MaxBodyBytes < 0 {
		return nil, fail("max_body_bytes is %d: it must be positive (0 or absent means the default, %d)", u.MaxBodyBytes, DefaultMaxBodyBytes)
	}
	if u.MaxResponseBytes < 0 {
		return nil, fail("max_response_bytes is %d: it must be positive (0 or absent means the default, %d)", u.MaxResponseBytes, DefaultMaxResponseBytes)
	}
	if u.Timeout < 0 {
		return nil, fail("timeout is %s: it must be positive (0 or absent means the default, %s)", time.Duration(u.Timeout), DefaultTimeout)
	}
	if destination.TimeoutTooShort(time.Duration(u.Timeout)) {
		return nil, fail("timeout is %s: it must be at least %s (0 or absent means the default, %s): "+
			"a shorter one leaves the upstream no time to answer, and every forward would end uncertain (504) though it may have acted",
			time.Duration(u.Timeout), MinTimeout, DefaultTimeout)
	}
	// A forward's claim lasts the timeout and a minute (route.lease).
	if maxTimeout := opledger.MaxLease - time.Minute; time.Duration(u.Timeout) > maxTimeout {
		return nil, fail("timeout is %s: it must be at most %s (a forward's lease, the timeout and a minute, is at most %s)", time.Duration(u.Timeout), maxTimeout, opledger.MaxLease)
	}
	if u.MaxBodyBytes == 0 {
		u.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if u.MaxResponseBytes == 0 {
		u.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if u.CredentialHeader == "" {
		u.CredentialHeader = DefaultCredentialHeader
	}
	if !destination.ValidHeaderName(u.CredentialHeader) {
		// No request carries such a header: every caller would share
		// the scope of callers without one, and see each other's saved
		// answers.
		return nil, fail("credential_header %q is not an HTTP header name (RFC 9110 token), so no request could carry it", u.CredentialHeader)
	}
	if c := http.CanonicalHeaderKey(u.CredentialHeader); !credentialCarrier(c) {
		// Every caller sends the same value (or the proxy sets it): all
		// would share one scope, and see each other's saved answers.
		return nil, fail("credential_header %s carries no caller's credential: every caller would share one key scope and get the others' saved answers; "+
			"name the header the upstream authenticates callers by (Authorization, Cookie, X-Api-Key, …)", c)
	}
	compared, err := u.compareHeaderNames()
	if err != nil {
		return nil, fail("%v", err)
	}
	if u.Ref == "" {
		u.Ref = DefaultRef
	}
	methods := u.ProtectedMethods
	if len(methods) == 0 {
		methods = DefaultProtectedMethods
	}
	r := &route{Upstream: u, base: base, protected: map[string]bool{}, credHdr: http.CanonicalHeaderKey(u.CredentialHeader),
		compared: compared}
	for _, m := range methods {
		m = strings.ToUpper(m)
		if !slices.Contains([]string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}, m) {
			return nil, fail("protected method %q: only POST, PUT, PATCH and DELETE can be protected", m)
		}
		r.protected[m] = true
	}
	if u.Idempotency != nil {
		// The upstream's key replaces the header's value: it would take
		// the place of the caller's credential.
		if c := http.CanonicalHeaderKey(u.Idempotency.Header); c == r.credHdr || slices.Contains([]string{"Authorization", "Proxy-Authorization", "Cookie"}, c) {
			return nil, fail("idempotency.header %s carries the caller's credential: the upstream's key would replace it; name the header the upstream reads its key from, e.g. Idempotency-Key", c)
		}
	}
	r.timeout = time.Duration(u.Timeout)
	if r.timeout == 0 {
		r.timeout = DefaultTimeout
	}
	if u.Prefix != "/" {
		r.prefix = strings.Split(strings.TrimSuffix(u.Prefix, "/"), "/")
	}
	r.identity = identity(base)
	retry := u.Retry
	if retry == nil {
		attempts, none := DefaultMaxAttempts, destination.Duration(0)
		retry = &destination.RetryConfig{MaxAttempts: &attempts, InitialDelay: &none, MaxDelay: &none, Deadline: &none}
	}
	// The capabilities, lookup and retry policy are a destination's: the
	// same checks and the same reconciler apply.
	r.dest, err = destination.NewHTTP(destination.HTTPConfig{
		Name: destinationName(u.Name), URL: u.URL, Ref: u.Ref, Timeout: destination.Duration(r.timeout),
		Idempotency: u.Idempotency, Lookup: u.Lookup, UniqueReference: u.UniqueReference, Retry: retry,
		UncertainStatuses: u.UncertainStatuses,
	}, destination.LoadOptions{Transport: transport, LookupHeaders: r.lookupHeaders})
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
	}
	// A redirect is the upstream's answer, passed to the caller.
	r.client = destination.NewClient(transport)
	r.policy = *r.dest.RetryPolicy()
	if u.Idempotency != nil {
		r.idemHdr = u.Idempotency.Header
	}
	return r, nil
}

// singleSlashes is prefix with its empty segments removed: "/a//" is
// "/a/", "//" is "/".
func singleSlashes(prefix string) string {
	var segs []string
	for _, s := range strings.Split(prefix, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	out := "/" + strings.Join(segs, "/")
	if len(segs) > 0 && strings.HasSuffix(prefix, "/") {
		out += "/"
	}
	return out
}

// notCredentials are headers that name no caller: the same for every
// caller of an upstream (Host, what the body is, what the answer may be,
// the client program), or set or handled by the proxy itself.
var notCredentials = []string{"Host", "Content-Type", "Content-Length", "Content-Encoding", "Content-Language", "Accept",
	"Accept-Encoding", "Accept-Language", "Accept-Charset", "User-Agent", "Expect", "Origin", "Referer", HeaderIdempotencyKey}

// credentialCarrier reports whether c, a canonical header name, may be an
// upstream's credential_header: not one of notCredentials, a hop-by-hop
// header other than Proxy-Authorization, or a forwarding header. (The
// header of the upstream's own idempotency key is refused as
// idempotency.header's mistake: that key would replace the credential.)
func credentialCarrier(c string) bool {
	if c == "Proxy-Authorization" {
		return true
	}
	return !slices.Contains(notCredentials, c) && !slices.Contains(hopByHop, c) && !slices.Contains(forwardingHeaders, c)
}

// compareHeaderNames checks CompareHeaders and returns them canonical,
// sorted and without repeats.
func (u Upstream) compareHeaderNames() ([]string, error) {
	var names []string
	for _, name := range u.CompareHeaders {
		if !destination.ValidHeaderName(name) {
			return nil, fmt.Errorf("compare_headers: %q is not an HTTP header name (RFC 9110 token)", name)
		}
		c := http.CanonicalHeaderKey(name)
		switch {
		case c == http.CanonicalHeaderKey(u.CredentialHeader) || slices.Contains([]string{"Authorization", "Proxy-Authorization", "Cookie"}, c):
			// Recorded in the payload, a credential would be stored;
			// the credential header scopes the keys already.
			return nil, fmt.Errorf("compare_headers: %s is a credential header: it would be stored with every operation (credential_header scopes the keys by it instead)", c)
		case c == HeaderIdempotencyKey || (u.Idempotency != nil && c == http.CanonicalHeaderKey(u.Idempotency.Header)):
			return nil, fmt.Errorf("compare_headers: %s carries the idempotency key, which names the operation: it cannot be part of its content", c)
		case slices.Contains(hopByHop, c) || slices.Contains(forwardingHeaders, c) || slices.Contains([]string{"Host", "Content-Length", "Accept-Encoding", "Expect"}, c):
			return nil, fmt.Errorf("compare_headers: %s is not passed on as the caller sends it, so it says nothing of what the upstream is asked", c)
		}
		if u.Lookup != nil {
			for name := range u.Lookup.Headers {
				if http.CanonicalHeaderKey(name) == c {
					// The lookup sends the value the request was
					// recorded with, for each operation.
					return nil, fmt.Errorf("compare_headers: %s is also in lookup.headers: a lookup sends each request's own %s, so leave it out of lookup.headers", c, c)
				}
			}
		}
		if !slices.Contains(names, c) {
			names = append(names, c)
		}
	}
	slices.Sort(names)
	return names, nil
}

// lookupHeaders are the values of the compared headers an operation of
// the route was recorded with: its lookups send them, so that the
// upstream looks where the request acted (the account Stripe-Account
// named), whatever the route compares now (a header removed from
// CompareHeaders since still says where that request acted). Those that
// describe the request's body or the answer it wanted (Content-*,
// Accept*) are not the lookup's: it sets its own.
func (r *route) lookupHeaders(op *opledger.Operation) (http.Header, error) {
	var req request
	if err := json.Unmarshal(op.Payload, &req); err != nil {
		return nil, fmt.Errorf("the operation's payload is not a proxied request: %w", err)
	}
	var out http.Header
	for name, values := range req.Headers {
		if strings.HasPrefix(name, "Content-") || strings.HasPrefix(name, "Accept") {
			continue
		}
		if out == nil {
			out = http.Header{}
		}
		out[name] = values
	}
	return out, nil
}

// identity names the API at base for the collision check of saved
// answers: host, port unless the scheme's default, and path, without
// scheme, credentials or a trailing slash, so that moving an upstream from
// http to https or adding a slash changes nothing.
func identity(base *url.URL) string {
	host, port := strings.ToLower(base.Hostname()), base.Port()
	if port != "" && !(base.Scheme == "http" && port == "80") && !(base.Scheme == "https" && port == "443") {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + strings.TrimSuffix(base.EscapedPath(), "/")
}

// lease is how long a claim of the route holds its operation: the
// upstream's timeout and a minute for the proxy's own work. Relaying a
// large answer extends it (keepLease).
func (r *route) lease() time.Duration { return r.timeout + time.Minute }

// target is the upstream URL of a request: rest is the escaped path after
// the route's prefix (as split returns it), appended to the base URL's
// escaped path exactly as received, so that an escaped slash (%2F) or any
// other escape reaches the upstream unchanged. An empty rest (the prefix
// itself, without its slash: /crm for /crm/) is the base URL as written,
// no slash added.
func (r *route) target(rest, rawQuery string) *url.URL {
	u := *r.base
	esc := r.base.EscapedPath()
	if rest != "" {
		esc = strings.TrimSuffix(esc, "/") + "/" + strings.TrimPrefix(rest, "/")
	}
	if p, err := url.PathUnescape(esc); err == nil {
		u.Path, u.RawPath = p, esc
	} else {
		// Not reached: both parts are escaped paths.
		u.Path, u.RawPath = esc, ""
	}
	u.RawQuery = rawQuery
	return &u
}

// split reports whether the escaped path escPath is under the route's
// prefix and returns the escaped rest, from the slash that follows the
// prefix: "/records" for /crm/records, "/" for /crm/, and "" for the
// prefix alone, /crm. Segments are compared unescaped, one by one:
// /crm%2Frecords is one segment, "crm/records", and not under the prefix
// /crm/.
func (r *route) split(escPath string) (string, bool) {
	if r.prefix == nil {
		return escPath, true
	}
	segs := strings.Split(escPath, "/")
	if len(segs) < len(r.prefix) {
		return "", false
	}
	for i, want := range r.prefix {
		got, err := url.PathUnescape(segs[i])
		if err != nil || got != want {
			return "", false
		}
	}
	if len(segs) == len(r.prefix) {
		return "", true
	}
	return "/" + strings.Join(segs[len(r.prefix):], "/"), true
}

package destination

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/configfile"
)

// Config is a destinations file (docs/destinations.md):
//
//	destinations:
//	  - name: crm
//	    url: https://crm.example.com/api/inquiries
//	    ...
type Config struct {
	Destinations []HTTPConfig `yaml:"destinations"`
}

// HTTPConfig configures one HTTP destination. Only Name, URL and Ref (or
// NoContentRef) are required; see docs/destinations.md for every field
// with examples.
type HTTPConfig struct {
	// Name is what operations carry in Intent.Destination.
	Name string `yaml:"name"`
	// Method of the call: POST (default), PUT, PATCH, DELETE or GET.
	Method string `yaml:"method"`
	// URL is a text/template over the operation (see the template data in
	// docs/destinations.md). Its scheme and host must be literal.
	URL string `yaml:"url"`
	// Headers are sent with every request, lookups included. A value may
	// reference environment variables as ${NAME}; headers that carry
	// credentials (Authorization, *-Key, *-Token, ...) must take their
	// value from one: secrets are never read from the file. Headers the
	// HTTP client sets or manages (Host, Content-Length, Accept-Encoding,
	// the hop-by-hop ones: clientHeader) are refused.
	Headers map[string]string `yaml:"headers"`
	// Body is a text/template over the operation. Empty: the stored
	// payload is sent as it is (not for GET). A ${NAME} reference is
	// refused: it would be sent as written (secrets go in Headers).
	Body string `yaml:"body"`
	// Ref is the RFC 6901 JSON pointer to the effect's reference in a 2xx
	// answer, e.g. /id. It may be left out when NoContentRef is set: a
	// 2xx answer with a body is then uncertain, and a lookup needs its
	// own LookupConfig.Ref.
	Ref string `yaml:"ref"`
	// NoContentRef is a text/template over the operation whose text is
	// the reference of a 2xx answer with no body (a DELETE's 204), which
	// has none at Ref to read: e.g. "deleted:{{.Payload.id}}". It is
	// rendered before the call, so an operation that cannot fill it is
	// refused with nothing sent. Unset: such a success is uncertain. An
	// answer with a body is always read at Ref.
	NoContentRef string `yaml:"no_content_ref"`
	// Timeout bounds one call or lookup. Default 10s (DefaultTimeout),
	// which a zero Timeout takes; a file's "timeout: 0s" is refused.
	// An executor takes the destination only if it is shorter than the
	// executor's call timeout (two thirds of its lease: 20s with the
	// default 30s lease); see executor.CheckConfig.
	Timeout Duration `yaml:"timeout"`
	// Idempotency declares the destination's idempotency key.
	Idempotency *IdempotencyConfig `yaml:"idempotency"`
	// Lookup declares how to find an effect and compare it with the intent.
	Lookup *LookupConfig `yaml:"lookup"`
	// UniqueReference declares that a duplicate create is refused.
	UniqueReference *UniqueReferenceConfig `yaml:"unique_reference"`
	// UncertainStatuses are answer statuses that mean "the call may have
	// had its effect" for this destination: a call answered with one is
	// uncertain, whatever the status means otherwise (a gateway's 503
	// sent after the backend acted). 4xx and 5xx statuses only, each
	// once, not UniqueReference's conflict status. Lookups are not
	// affected. See HTTPPolicy.UncertainStatuses.
	UncertainStatuses []int `yaml:"uncertain_statuses"`
	// Retry is the destination's retry policy; unset fields take
	// opledger.DefaultRetryPolicy's values. Without it, the ledger's
	// default policy (opledger.Options.RetryPolicy) applies.
	Retry *RetryConfig `yaml:"retry"`
	// Tenants, when set, are the only tenants whose operations the
	// destination serves (HTTP.Tenants); unset, it serves every
	// tenant. An empty list is refused, and so is a file's "tenants:"
	// without a value (Load refuses it, and the other sections written
	// without one: see emptyFields).
	Tenants []string `yaml:"tenants"`
}

// IdempotencyConfig declares an idempotency key.
type IdempotencyConfig struct {
	// Header carries the key, e.g. Idempotency-Key. Leave it empty when
	// the url or body template sends {{.IdempotencyKey}} instead (a path
	// segment, a query parameter, a field of the body). A
	// header the HTTP client sets or manages is refused, as in Headers.
	Header string `yaml:"header"`
	// Retention is how long the destination remembers a key. Required.
	Retention Duration `yaml:"retention"`
}

// LookupConfig declares a lookup by external reference.
type LookupConfig struct {
	// Method of the lookup request. Default GET.
	Method string `yaml:"method"`
	// URL is a text/template over the operation, like HTTPConfig.URL.
	URL string `yaml:"url"`
	// Body is an optional text/template for search endpoints that take one.
	Body string `yaml:"body"`
	// Headers are added to (or replace) the destination's headers.
	Headers map[string]string `yaml:"headers"`
	// Results points at the array of found records in the answer ("" for
	// an answer that is itself the array). Unset: the answer is the record
	// itself, and 404 means "not found" (see NotFound).
	Results *string `yaml:"results"`
	// NotFound, on a lookup without Results, names what the destination's
	// own "no such record" 404 carries, so that a gateway's JSON 404 is
	// not taken for it. Unset: a 404 whose body is empty, or JSON sent as
	// JSON, means "not found".
	NotFound *NotFoundConfig `yaml:"not_found"`
	// Ref points at the reference inside a found record. Default: the
	// destination's Ref; required when the destination has none.
	Ref string `yaml:"ref"`
	// Authoritative: "not found" proves absence once VisibilityDelay has
	// passed since the last call ended (opledger.LastCallEnd).
	Authoritative bool `yaml:"authoritative"`
	// VisibilityDelay is how long after a call ended a record it made may
	// still be missing from lookups: the time the destination may go on
	// with a request whose caller stopped waiting, plus its index's lag.
	// Unset: the destination's Timeout, as long again as a call may wait.
	VisibilityDelay *Duration `yaml:"visibility_delay"`
	// Match lists the fields a found record must share with the intent.
	// At least one is required.
	Match []MatchConfig `yaml:"match"`
}

// NotFoundConfig is the mark of a destination's own "no such record"
// answer: a 404 with a JSON body whose value at Field is Value (a string,
// or a number or boolean written as text). Any other 404 proves nothing.
type NotFoundConfig struct {
	// Field is a JSON pointer into the 404's body, e.g. /error/code.
	Field string `yaml:"field"`
	// Value is the text the field holds, e.g. "record_not_found".
	Value string `yaml:"value"`
}

// MatchConfig compares one field of a found record with the intent: the
// value at Record must equal the payload's value at Payload, or the text
// of the Value template.
type MatchConfig struct {
	// Record is a JSON pointer into the found record.
	Record string `yaml:"record"`
	// Payload is a JSON pointer into the operation's payload.
	Payload string `yaml:"payload"`
	// Value is a text/template over the operation, e.g. "{{.Key}}".
	Value string `yaml:"value"`
}

// UniqueReferenceConfig declares a unique external reference.
type UniqueReferenceConfig struct {
	// ConflictStatus answers a duplicate create. Default 409.
	ConflictStatus int `yaml:"conflict_status"`
}

// RetryConfig is a retry policy; unset fields take the defaults of
// opledger.DefaultRetryPolicy.
type RetryConfig struct {
	MaxAttempts *int `yaml:"max_attempts"`
	// InitialDelay is the backoff ceiling after the first attempt; "0s"
	// retries at once.
	InitialDelay *Duration `yaml:"initial_delay"`
	// MaxDelay caps the backoff ceiling; "0s" means no cap, as
	// opledger.RetryPolicy's zero MaxDelay does.
	MaxDelay *Duration `yaml:"max_delay"`
	// Deadline bounds the operation's life from its recording; "0s" means
	// no deadline.
	Deadline *Duration `yaml:"deadline"`
}

// Policy returns the retry policy with defaults filled in.
func (r *RetryConfig) Policy() opledger.RetryPolicy {
	p := opledger.DefaultRetryPolicy
	if r == nil {
		return p
	}
	if r.MaxAttempts != nil {
		p.MaxAttempts = *r.MaxAttempts
	}
	if r.InitialDelay != nil {
		p.InitialDelay = time.Duration(*r.InitialDelay)
	}
	if r.MaxDelay != nil {
		p.MaxDelay = time.Duration(*r.MaxDelay)
	}
	if r.Deadline != nil {
		p.Deadline = time.Duration(*r.Deadline)
	}
	return p
}

// Duration is a time.Duration written with its unit ("10s", "24h").
type Duration time.Duration

// UnmarshalYAML reads a duration; a bare number is refused, since "10"
// could mean seconds or nanoseconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	bad := func(format string, args ...any) error {
		return configfile.InvalidValue(n, fmt.Sprintf(format, args...))
	}
	if n.Kind != yaml.ScalarNode {
		return bad("a duration like 10s or 24h is expected")
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		if _, nerr := strconv.ParseFloat(n.Value, 64); nerr == nil {
			return bad("duration %q needs a unit, e.g. %ss", n.Value, n.Value)
		}
		return bad("%q is not a duration like 10s or 24h", n.Value)
	}
	if v < 0 {
		return bad("duration %q is negative", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration with its unit.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// LoadOptions tune Load and NewHTTP.
type LoadOptions struct {
	// LookupEnv resolves ${NAME} references in header values. Default
	// os.LookupEnv.
	LookupEnv func(name string) (string, bool)
	// Transport sends the requests. Default: a clone of
	// http.DefaultTransport for each destination.
	Transport http.RoundTripper
	// Now is the clock for Retry-After dates. Default time.Now.
	Now func() time.Time
	// LookupHeaders, when set, gives headers of an operation's own to
	// send with each of its lookups: the proxy sends the request headers
	// it compared (Stripe-Account), which choose where the upstream looks.
	// Each replaces a header of the same name the lookup would send (a
	// configured one, or one it sets itself such as Content-Type). An
	// error makes the lookup impossible (ErrNoLookup).
	LookupHeaders func(op *opledger.Operation) (http.Header, error)
}

// LoadFile reads a destinations file, a regular file of at most
// configfile.MaxSize (4 MiB) bytes; see Load.
func LoadFile(path string, opts LoadOptions) (*Set, error) {
	data, err := configfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("read destinations: %w", err)
	}
	s, err := Load(data, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Load parses a destinations file and builds its HTTP destinations. The
// YAML is decoded strictly: an unknown field is an error naming its line.
// Every problem found is reported, each with its line. Header values that
// reference environment variables are resolved now; a missing variable is
// an error. Resolved values are kept out of every error and log.
func Load(data []byte, opts LoadOptions) (*Set, error) {
	var cfg Config
	if err := configfile.DecodeYAML(data, &cfg); err != nil {
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("the file is empty: it needs a destinations list")
		case errors.Is(err, configfile.ErrSeveralDocuments):
			return nil, err
		}
		if kinds := kindErrors(data, err); kinds != nil {
			return nil, kinds
		}
		// The caller names the file, and it as the destinations file
		// ("config destinations: FILE:"): the decoder's words with their
		// line follow, without saying "destinations" again.
		return nil, err
	}
	if len(cfg.Destinations) == 0 {
		return nil, errors.New("no destinations: the file needs a non-empty destinations list")
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("decode destinations: %w", err)
	}
	entries := destinationNodes(&root)

	var errs []error
	var ds []Destination
	seen := map[string]int{}
	for i, c := range cfg.Destinations {
		var node *yaml.Node
		if i < len(entries) {
			node = entries[i]
		}
		label := fmt.Sprintf("destination %d", i+1)
		if c.Name != "" {
			label = "destination " + c.Name
		}
		// A name used twice is one problem of the entry: the rest of it
		// is checked all the same.
		h, problems := build(c, opts)
		problems = append(problems, writtenEmpty(node)...)
		if first, dup := seen[c.Name]; dup && c.Name != "" {
			problems = append(problems, problem{[]string{"name"}, fmt.Sprintf("is already used by the destination at line %d", first)})
		} else if c.Name != "" {
			seen[c.Name] = lineOf(node, "name")
		}
		sort.SliceStable(problems, func(a, b int) bool {
			return lineOf(node, problems[a].path...) < lineOf(node, problems[b].path...)
		})
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("line %d: %s: %s: %s", lineOf(node, p.path...), label, strings.Join(p.path, "."), p.msg))
		}
		if h != nil && len(problems) == 0 {
			ds = append(ds, h)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return NewSet(ds...)
}

// NewHTTP builds one HTTP destination from its configuration, with the
// same checks as Load.
func NewHTTP(c HTTPConfig, opts LoadOptions) (*HTTP, error) {
	h, problems := build(c, opts)
	if len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = fmt.Errorf("destination %s: %s: %s", c.Name, strings.Join(p.path, "."), p.msg)
		}
		return nil, errors.Join(errs...)
	}
	return h, nil
}

// problem is one configuration error at a field path.
type problem struct {
	path []string
	msg  string
}

// emptyFields are the fields of a destination entry that a file may not
// write without a value ("tenants:", "retry: ~"), with what to write
// instead. The decoder leaves such a field unset, which for each of them
// means something else than the file seems to say: no tenants list
// serves every tenant, no section declares nothing, no results reads the
// answer as one record.
var emptyFields = []struct {
	path []string
	msg  string
}{
	{[]string{"timeout"}, "has no value: a timeout must be above 0; leave it out for the default 10s"},
	{[]string{"idempotency"}, "has no value: it needs retention and a header (or {{.IdempotencyKey}} in the url or body), " +
		"e.g. {header: Idempotency-Key, retention: 24h}; leave it out if the destination takes no idempotency key"},
	{[]string{"no_content_ref"}, "has no value: write the template of the reference a success without a body stands on, " +
		"e.g. 'deleted:{{.Payload.id}}', or leave it out (such a success is then uncertain)"},
	{[]string{"lookup"}, "has no value: it needs url and match (docs/destinations.md#lookup); leave it out if the destination cannot be searched"},
	{[]string{"lookup", "results"}, `has no value: write results: "" for an answer that is itself the array of records, ` +
		"or leave it out when the answer is one record"},
	{[]string{"lookup", "not_found"}, "has no value: it needs field and value, the mark of the destination's own 404; leave it out to take any empty or JSON 404"},
	{[]string{"unique_reference"}, "has no value: write unique_reference: {} to declare it with the default conflict_status 409, " +
		"or leave it out if the destination does not refuse a duplicate create"},
	{[]string{"uncertain_statuses"}, "has no value: list the statuses that may come after the destination acted " +
		"(uncertain_statuses: [502, 503, 504]), or leave it out"},
	{[]string{"retry"}, "has no value: write retry: {} for the default policy (5 attempts, 1s, 5m, 24h), or leave it out"},
	{[]string{"tenants"}, "has no value, which would serve every tenant: list the tenants the destination serves (tenants: [acme]), " +
		"or leave it out to serve every tenant"},
}

// writtenEmpty returns a problem for each field of the destination entry
// node that is written without a value (emptyFields), and for a timeout
// of 0s.
func writtenEmpty(node *yaml.Node) []problem {
	var probs []problem
	for _, f := range emptyFields {
		n := node
		for _, p := range f.path {
			n = child(n, p)
		}
		if isNull(n) {
			probs = append(probs, problem{f.path, f.msg})
		}
	}
	// A timeout of 0s bounds nothing; NewHTTP's zero Timeout takes the
	// default, and the file gets it by leaving the field out.
	if n := child(node, "timeout"); n != nil && n.Kind == yaml.ScalarNode && !isNull(n) {
		if d, err := time.ParseDuration(n.Value); err == nil && d == 0 {
			probs = append(probs, problem{[]string{"timeout"}, "a timeout must be above 0; leave it out for the default 10s"})
		}
	}
	return probs
}

// EmptySections returns an error for each section of entry, the mapping
// node of one destination's settings (or of settings built on them, as a
// proxy upstream's), written without a value ("retry:", "lookup: ~"),
// which Load refuses too (a timeout apart: its zero is the caller's to
// read). at is the entry's path in its file:
// "line 7: upstreams.0.lookup: has no value: …".
func EmptySections(entry *yaml.Node, at string) []error {
	probs := writtenEmpty(entry)
	slices.SortStableFunc(probs, func(a, b problem) int { return lineOf(entry, a.path...) - lineOf(entry, b.path...) })
	var errs []error
	for _, p := range probs {
		if p.path[0] == "timeout" {
			continue // a timeout's zero is the settings' own: a proxy takes its default
		}
		errs = append(errs, fmt.Errorf("line %d: %s: %s", lineOf(entry, p.path...), strings.Join(append([]string{at}, p.path...), "."), p.msg))
	}
	return errs
}

// isNull reports whether n is a YAML null: a key with no value, ~ or
// null.
func isNull(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// destinationNodes returns the mapping nodes of the destinations list.
func destinationNodes(root *yaml.Node) []*yaml.Node {
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil
	}
	seq := child(root.Content[0], "destinations")
	if seq == nil || seq.Kind != yaml.SequenceNode {
		return nil
	}
	return seq.Content
}

// child returns the value node of key in a mapping node.
func child(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// lineOf returns the line of the deepest node on path below n (a mapping
// key or a sequence index), or n's own line.
func lineOf(n *yaml.Node, path ...string) int {
	if n == nil {
		return 0
	}
	line := n.Line
	cur := n
	for _, p := range path {
		var next *yaml.Node
		switch cur.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(cur.Content); i += 2 {
				if cur.Content[i].Value == p {
					line = cur.Content[i].Line
					next = cur.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(cur.Content) {
				next = cur.Content[i]
				line = next.Line
			}
		}
		if next == nil {
			break
		}
		cur = next
	}
	return line
}

// envRef is a ${NAME} reference in a header value.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces the ${NAME} references in v. It returns the values
// it put in their place (none: v had no reference), and an error naming
// (never showing) a variable that is unset or empty.
func expandEnv(v string, lookup func(string) (string, bool)) (string, []string, error) {
	refs := envRef.FindAllStringSubmatch(v, -1)
	if strings.Count(v, "${") != len(refs) {
		return "", nil, errors.New("malformed ${NAME} reference")
	}
	var missing error
	var values []string
	out := envRef.ReplaceAllStringFunc(v, func(m string) string {
		name := m[2 : len(m)-1]
		val, ok := lookup(name)
		switch {
		case !ok:
			missing = fmt.Errorf("environment variable %s is not set", name)
		case val == "":
			// Said apart from unset: the variable is there, and a
			// search for it would find it.
			missing = fmt.Errorf("environment variable %s is set but empty", name)
		}
		values = append(values, val)
		return val
	})
	if missing != nil {
		return "", values, missing
	}
	return out, values, nil
}

// sensitiveHeader reports whether a header carries a credential and must
// therefore take its value from the environment.
func sensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie":
		return true
	}
	for _, w := range []string{"token", "secret", "key", "auth", "password", "passwd", "signature", "credential", "session"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// validHeaderName is ValidHeaderName, under the name the package's
// other files use.
func validHeaderName(name string) bool { return ValidHeaderName(name) }

// ValidHeaderName reports whether name is an HTTP field name: an RFC 9110
// token (letters, digits and !#$%&'*+-.^_`|~), not empty. Every header
// name opledger's configuration files take is checked with it.
func ValidHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// unsendable returns what in v no HTTP field value may hold ("a line
// break", "a control character"), or "" when there is none. RFC 9110
// (section 5.5) allows visible ASCII, SP, HTAB and bytes from 0x80 up
// (obs-text); net/http refuses a request whose header holds anything
// else, so every call would fail.
func unsendable(v string) string {
	what := ""
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\r' || c == '\n':
			return "a line break"
		case c < ' ' && c != '\t', c == 0x7f:
			what = "a control character"
		}
	}
	return what
}

// clientHeader returns why the header name cannot be configured with
// value (the idempotency header: any value), or "": the HTTP client sets
// or manages it, and a value given for it would be ignored, or would
// change how answers are read or connections used. Two values keep what
// the client does: Accept-Encoding: identity (no compression at all) and
// Connection: close (a connection per call), which net/http honours.
func clientHeader(name, value string) string {
	value = strings.TrimSpace(value)
	switch strings.ToLower(name) {
	case "host", "content-length":
		return "is set by the HTTP client and cannot be configured"
	case "accept-encoding":
		if strings.EqualFold(value, "identity") {
			return ""
		}
		return "is set by the HTTP client, which then decompresses a gzip answer itself; " +
			"set here, compressed answers would arrive as they are, could not be read, and every success would be uncertain " +
			"(only identity, asking for no compression, may be set)"
	case "connection":
		if strings.EqualFold(value, "close") {
			return ""
		}
		return "is managed by the HTTP client (how a connection is used); only close, a connection per call, may be set"
	case "transfer-encoding", "trailer", "te", "upgrade", "keep-alive", "proxy-connection":
		return "is managed by the HTTP client (how a message is framed, how a connection is used) and cannot be configured"
	}
	return ""
}

// idempotencyKeyHeader reports whether name is one of the header names
// APIs read an idempotency key from. Header values are fixed (no
// templates), so such a header among a destination's headers would carry
// one key for every operation.
func idempotencyKeyHeader(name string) bool {
	return strings.EqualFold(name, "Idempotency-Key") || strings.EqualFold(name, "X-Idempotency-Key")
}

// resolveHeaders checks and resolves a header map. idem is the idempotency
// header, which opledger sets itself. It returns the secrets of the
// credential headers resolved (sensitiveHeader, secretsOf), to be masked
// in what is kept of answers.
func resolveHeaders(in map[string]string, idem string, lookup func(string) (string, bool), at []string) (http.Header, []string, []problem) {
	out := http.Header{}
	var secrets []string
	var probs []problem
	names := make([]string, 0, len(in))
	for name := range in {
		names = append(names, name)
	}
	sort.Strings(names)
	spelt := map[string]string{} // by canonical name, the first spelling met
	for _, name := range names {
		raw := in[name]
		path := append(append([]string(nil), at...), name)
		canonical := http.CanonicalHeaderKey(name)
		first, repeated := spelt[canonical]
		if !repeated {
			spelt[canonical] = name
		}
		switch {
		case !ValidHeaderName(name):
			probs = append(probs, problem{path, "not a valid header name"})
			continue
		case repeated:
			probs = append(probs, problem{path, fmt.Sprintf("is the header %s too (header names are the same in any case), "+
				"and only one of the two would be sent: keep one", first)})
			continue
		case idem != "" && strings.EqualFold(name, idem):
			probs = append(probs, problem{path, "is the idempotency header, which opledger sets for each operation; remove it from headers"})
			continue
		case strings.Contains(raw, "{{"):
			probs = append(probs, problem{path, "header values are not templates; only ${NAME} environment references are expanded"})
			continue
		case idempotencyKeyHeader(name):
			probs = append(probs, problem{path, "would send one fixed idempotency key with every operation, and a destination " +
				"that deduplicates by it would answer each later operation with the first one's result (nothing done); " +
				"declare it as idempotency: {header: " + canonical + ", retention: ...} so that each operation sends its own key"})
			continue
		case clientHeader(name, raw) != "":
			probs = append(probs, problem{path, clientHeader(name, raw)})
			continue
		}
		val, refs, err := expandEnv(raw, lookup)
		if err != nil {
			probs = append(probs, problem{path, err.Error()})
			continue
		}
		if sensitiveHeader(name) && len(refs) == 0 {
			probs = append(probs, problem{path, "carries a credential, so its value must come from an environment variable " +
				`(e.g. "Bearer ${CRM_TOKEN}"); secrets are never read from this file`})
			continue
		}
		if what := unsendable(val); what != "" {
			// Named by where it came from, never shown.
			from := "the value"
			names := envRef.FindAllStringSubmatch(raw, -1)
			for i, r := range refs {
				if unsendable(r) != "" && i < len(names) {
					from = "the value of environment variable " + names[i][1]
					break
				}
			}
			probs = append(probs, problem{path, from + " contains " + what + ", which no HTTP header value may hold"})
			continue
		}
		out.Set(name, val)
		if sensitiveHeader(name) {
			// A credential's header: the one whose value is a secret.
			// Another header's variable (X-Region: ${REGION}) is
			// configuration, and masking it could change a reference.
			secrets = append(secrets, secretsOf(val, refs)...)
		}
	}
	return out, secrets, probs
}

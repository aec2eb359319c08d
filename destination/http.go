package destination

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/readerr"
)

// HTTP is a destination called over HTTP, built from an HTTPConfig by Load
// or NewHTTP. It is safe for concurrent use. Its resolved header values
// (credentials) appear in no error, log or method result.
type HTTP struct {
	name     string
	caps     Capabilities
	method   string
	url      *template.Template
	origin   string
	body     *template.Template // nil: send the payload as it is
	sendBody bool
	headers  http.Header
	ref      pointer
	// noRef: no ref is declared (a destination with noContentRef
	// only), so an answer with a body has no reference.
	noRef bool
	// noContentRef renders the reference of a 2xx answer without a body
	// (HTTPConfig.NoContentRef); nil: such a success is uncertain.
	noContentRef *template.Template
	timeout      time.Duration
	client       *http.Client
	policy       HTTPPolicy
	idemHeader   string
	lookup       *httpLookup
	retry        *opledger.RetryPolicy // nil: the ledger's default
	// lookupHeaders adds an operation's own headers to its lookups
	// (LoadOptions.LookupHeaders); nil: none.
	lookupHeaders func(op *opledger.Operation) (http.Header, error)
	tenants       []string   // nil: every tenant
	secrets       secretList // masked in what is kept of answers
}

// httpLookup is a configured lookup.
type httpLookup struct {
	method  string
	url     *template.Template
	origin  string
	body    *template.Template
	headers http.Header
	results *pointer // nil: the answer is the record
	// notFound marks the destination's own 404 on a single-record lookup;
	// nil: an empty body, or JSON sent as JSON.
	notFound *notFoundMark
	ref      pointer
	match    []matchRule
}

// notFoundMark is a configured NotFoundConfig.
type notFoundMark struct {
	field pointer
	value string
}

// marks reports whether a 404's body is the destination's "no such
// record".
func (m *notFoundMark) marks(resp *http.Response, body []byte) bool {
	if m == nil {
		return len(bytes.TrimSpace(body)) == 0 || jsonMediaType(resp.Header.Get("Content-Type")) && json.Valid(body)
	}
	doc, err := decodeJSON(body)
	if err != nil {
		return false
	}
	v, ok := m.field.get(doc)
	s, isScalar := scalarString(v)
	return ok && isScalar && s == m.value
}

// matchRule compares one field of a found record with the intent.
type matchRule struct {
	record  pointer
	payload *pointer
	value   *template.Template
}

// DefaultTimeout bounds a call or lookup of an HTTP destination without a
// configured timeout.
const DefaultTimeout = 10 * time.Second

// MinTimeout is the shortest timeout a destination takes: a shorter one
// (1ms typed for 1m, 1ns) leaves the destination no time to answer, so
// that every call would end uncertain though it may have acted.
const MinTimeout = 100 * time.Millisecond

// Size limits for answers: what is read, and what is saved as the
// operation's response.
const (
	maxAnswerBytes = 1 << 20
	maxSavedBytes  = 64 << 10
)

// build checks c and builds the destination; it returns every problem.
func build(c HTTPConfig, opts LoadOptions) (*HTTP, []problem) {
	var probs []problem
	add := func(msg string, path ...string) { probs = append(probs, problem{path, msg}) }
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &HTTP{name: c.Name, timeout: DefaultTimeout, policy: HTTPPolicy{Now: opts.Now}, lookupHeaders: opts.LookupHeaders}

	if c.Name == "" {
		add("is required", "name")
	} else if err := opledger.ValidateKey(c.Name); err != nil {
		add(strings.TrimPrefix(err.Error(), "invalid key: "), "name")
	}
	h.method = strings.ToUpper(c.Method)
	if h.method == "" {
		h.method = http.MethodPost
	}
	switch h.method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodGet:
	default:
		add("must be POST, PUT, PATCH, DELETE or GET", "method")
	}
	var err error
	if h.url, h.origin, err = urlTemplate("url", c.URL); err != nil {
		add(err.Error(), "url")
	} else if err := checkURLTemplate(h.url, h.origin, c.Name); err != nil {
		add(err.Error(), "url")
	}
	switch {
	case c.Body != "" && h.method == http.MethodGet:
		add("a GET request has no body", "body")
	case c.Body != "":
		if err := envRefInTemplate(c.Body); err != nil {
			add(err.Error(), "body")
		} else if h.body, err = newTemplate("body", c.Body); err != nil {
			add(err.Error(), "body")
		} else if err := checkTemplate(h.body, c.Name); err != nil {
			add(err.Error(), "body")
		}
		h.sendBody = true
	default:
		h.sendBody = h.method != http.MethodGet && h.method != http.MethodDelete
	}
	switch {
	case c.Ref == "" && c.NoContentRef == "":
		add("is required: the JSON pointer to the effect's reference in the answer, e.g. /id "+
			"(a destination whose successes carry no body declares no_content_ref instead)", "ref")
	case c.Ref == "":
		// Only a success without a body has a reference (noContentRef).
		h.noRef = true
	default:
		if h.ref, err = parsePointer(c.Ref); err != nil {
			add(err.Error(), "ref")
		}
	}
	if c.NoContentRef != "" {
		if err := envRefInTemplate(c.NoContentRef); err != nil {
			add(strings.Replace(err.Error(), "would be sent as written", "would be kept as written in the reference", 1), "no_content_ref")
		} else if h.noContentRef, err = newTemplate("no_content_ref", c.NoContentRef); err != nil {
			add(err.Error(), "no_content_ref")
		} else if err := checkTemplate(h.noContentRef, c.Name); err != nil {
			add(err.Error(), "no_content_ref")
		}
	}
	switch {
	case c.Timeout < 0:
		add(fmt.Sprintf("is %s: it must be above 0 (leave it out for the default %s)", time.Duration(c.Timeout), DefaultTimeout), "timeout")
	case TimeoutTooShort(time.Duration(c.Timeout)):
		add(fmt.Sprintf("is %s: it must be at least %s (leave it out for the default %s): no call or lookup is answered "+
			"in less, so every call would end uncertain though the destination may have acted", time.Duration(c.Timeout), MinTimeout, DefaultTimeout), "timeout")
	case c.Timeout > 0:
		h.timeout = time.Duration(c.Timeout)
	}

	if k := c.Idempotency; k != nil {
		switch {
		case k.Header != "" && !validHeaderName(k.Header):
			add("not a valid header name", "idempotency", "header")
		case k.Header != "" && clientHeader(k.Header, "") != "":
			// net/http would send the key in no such header: protected
			// retries would go out without it.
			add(clientHeader(k.Header, "")+"; the key needs a header of its own, e.g. Idempotency-Key", "idempotency", "header")
		case k.Header == "" && h.url != nil && (c.Body == "" || h.body != nil) &&
			!readsField(h.url, "IdempotencyKey") && !readsField(h.body, "IdempotencyKey"):
			// (A template that did not parse has its own problem.)
			// Header values are no templates: the key travels in its own
			// header, or in the URL or the body, read there by an action
			// (a comment or literal text naming it sends nothing).
			add("is required unless the url or body template sends {{.IdempotencyKey}}", "idempotency", "header")
		}
		if k.Retention <= 0 {
			add("is required: how long the destination remembers a key, e.g. 24h", "idempotency", "retention")
		}
		h.idemHeader = k.Header
		h.caps.IdempotencyKey = &IdempotencyKey{Header: k.Header, Retention: time.Duration(k.Retention)}
	}

	var hp []problem
	var secrets []string
	h.headers, secrets, hp = resolveHeaders(c.Headers, h.idemHeader, opts.LookupEnv, []string{"headers"})
	probs = append(probs, hp...)
	if h.headers.Get("User-Agent") == "" {
		h.headers.Set("User-Agent", "opledger")
	}

	if u := c.UniqueReference; u != nil {
		status := u.ConflictStatus
		if status == 0 {
			status = http.StatusConflict
		}
		if status < 400 || status > 499 {
			add("must be a 4xx status", "unique_reference", "conflict_status")
		} else if why := retryStatusConflict(status); why != "" {
			add(why, "unique_reference", "conflict_status")
		}
		if c.Lookup == nil {
			add("needs a lookup: a conflict says a record exists, and only a lookup tells whether it is this operation's", "unique_reference")
		}
		h.caps.UniqueReference = &UniqueReference{ConflictStatus: status}
		h.policy.ExistsStatus = status
	}

	if c.UncertainStatuses != nil {
		if len(c.UncertainStatuses) == 0 {
			add("lists no status: list the statuses that may come after the destination acted, or leave it out", "uncertain_statuses")
		}
		for i, code := range c.UncertainStatuses {
			at := []string{"uncertain_statuses", strconv.Itoa(i)}
			switch {
			case code < 400 || code > 599:
				add(fmt.Sprintf("%d is not a 4xx or 5xx status: a 2xx is a success, and a 1xx or 3xx is uncertain already", code), at...)
			case slices.Contains(c.UncertainStatuses[:i], code):
				add(fmt.Sprintf("%d is listed twice", code), at...)
			case h.policy.ExistsStatus == code:
				add(fmt.Sprintf("%d is the unique_reference's conflict_status, which means \"the record exists\" (looked up as such): "+
					"a status cannot mean both", code), at...)
			}
		}
		h.policy.UncertainStatuses = slices.Clone(c.UncertainStatuses)
	}

	if l := c.Lookup; l != nil {
		lk, ls, lp := buildLookup(l, h, opts.LookupEnv)
		probs = append(probs, lp...)
		h.lookup = lk
		secrets = append(secrets, ls...)
		// Unset, the delay is as long again as the call could wait: a
		// destination that answered too late for its caller may still be
		// finishing the request.
		delay := h.timeout
		if l.VisibilityDelay != nil {
			delay = time.Duration(*l.VisibilityDelay)
		}
		h.caps.Lookup = &Lookup{Authoritative: l.Authoritative, VisibilityDelay: delay}
	}

	if c.Retry != nil {
		p := c.Retry.Policy()
		if err := validatePolicy(&p); err != nil {
			add(strings.TrimPrefix(err.Error(), "retry: "), "retry")
		}
		h.retry = &p
	}

	if c.Tenants != nil {
		if len(c.Tenants) == 0 {
			add("lists no tenant: list the tenants the destination serves, or leave it out to serve every tenant", "tenants")
		}
		for i, t := range c.Tenants {
			if err := opledger.ValidateKey(t); err != nil {
				add("not a tenant name: "+strings.TrimPrefix(err.Error(), "invalid key: "), "tenants", strconv.Itoa(i))
			}
		}
		h.tenants = slices.Clone(c.Tenants)
	}

	if len(probs) > 0 {
		return nil, probs
	}
	h.secrets = newSecretList(secrets)
	h.client = NewClient(opts.Transport)
	return h, nil
}

// buildLookup builds h's lookup from l; it returns the secrets of the
// lookup's own headers too.
func buildLookup(l *LookupConfig, h *HTTP, lookupEnv func(string) (string, bool)) (*httpLookup, []string, []problem) {
	var probs []problem
	add := func(msg string, path ...string) {
		probs = append(probs, problem{append([]string{"lookup"}, path...), msg})
	}
	lk := &httpLookup{method: strings.ToUpper(l.Method), ref: h.ref}
	if lk.method == "" {
		lk.method = http.MethodGet
	}
	switch lk.method {
	case http.MethodGet, http.MethodPost:
	default:
		add("must be GET or POST", "method")
	}
	var err error
	if lk.url, lk.origin, err = urlTemplate("lookup.url", l.URL); err != nil {
		add(err.Error(), "url")
	} else if err := checkURLTemplate(lk.url, lk.origin, h.name); err != nil {
		add(err.Error(), "url")
	}
	if l.Body != "" {
		if lk.method == http.MethodGet {
			add("a GET request has no body", "body")
		} else if err := envRefInTemplate(l.Body); err != nil {
			add(err.Error(), "body")
		} else if lk.body, err = newTemplate("lookup.body", l.Body); err != nil {
			add(err.Error(), "body")
		} else if err := checkTemplate(lk.body, h.name); err != nil {
			add(err.Error(), "body")
		}
	}
	extra, secrets, hp := resolveHeaders(l.Headers, h.idemHeader, lookupEnv, []string{"lookup", "headers"})
	probs = append(probs, hp...)
	lk.headers = h.headers.Clone()
	for k, v := range extra {
		lk.headers[k] = v
	}
	if l.Results != nil {
		p, err := parsePointer(*l.Results)
		if err != nil {
			add(err.Error(), "results")
		}
		lk.results = &p
	}
	if nf := l.NotFound; nf != nil {
		switch {
		case l.Results != nil:
			add("a search (results) finds nothing as an empty list; not_found is for a lookup whose answer is one record", "not_found")
		case nf.Field == "":
			add("is required: a JSON pointer into the body of the destination's 404, e.g. /error/code", "not_found", "field")
		case nf.Value == "":
			add("is required: the text the destination's 404 holds at not_found.field, e.g. record_not_found", "not_found", "value")
		default:
			p, err := parsePointer(nf.Field)
			if err != nil {
				add(err.Error(), "not_found", "field")
			}
			lk.notFound = &notFoundMark{field: p, value: nf.Value}
		}
	}
	switch {
	case l.Ref != "":
		if lk.ref, err = parsePointer(l.Ref); err != nil {
			add(err.Error(), "ref")
		}
	case h.noRef:
		add("is required: the destination declares no ref for it to default to (the JSON pointer to the reference in a found record, e.g. /id)", "ref")
	}
	if len(l.Match) == 0 {
		add("needs at least one entry: without a comparison, any record found would be trusted blindly", "match")
	}
	for i, m := range l.Match {
		at := []string{"match", strconv.Itoa(i)}
		var r matchRule
		if m.Record == "" {
			add("is required: a JSON pointer into the found record", append(at, "record")...)
		} else if r.record, err = parsePointer(m.Record); err != nil {
			add(err.Error(), append(at, "record")...)
		}
		switch {
		case (m.Payload == "") == (m.Value == ""):
			add("needs exactly one of payload (a JSON pointer into the payload) or value (a template)", at...)
		case m.Payload != "":
			p, err := parsePointer(m.Payload)
			if err != nil {
				add(err.Error(), append(at, "payload")...)
			}
			r.payload = &p
		default:
			if r.value, err = newTemplate("lookup.match.value", m.Value); err != nil {
				add(err.Error(), append(at, "value")...)
			} else if err := checkTemplate(r.value, h.name); err != nil {
				add(err.Error(), append(at, "value")...)
			}
		}
		lk.match = append(lk.match, r)
	}
	return lk, secrets, probs
}

// templateFuncs are the functions templates may call besides the
// text/template built-ins; urlquery replaces the built-in one.
var templateFuncs = template.FuncMap{
	// json encodes a value as JSON, e.g. {"email": {{json .Payload.email}}}.
	"json": func(v any) (string, error) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return "", err
		}
		return strings.TrimSuffix(b.String(), "\n"), nil
	},
	// pathescape escapes a value for one URL path segment. A value that
	// is no segment (empty, "." or "..", which a server resolves to
	// another path) and one no URL carries as it is (urlValue) are
	// refused.
	"pathescape": func(v any) (string, error) {
		s, err := urlValue(v)
		if err != nil {
			return "", err
		}
		switch s {
		case "":
			return "", errors.New("the value is empty, which leaves the path segment out")
		case ".", "..":
			return "", errors.New("the value is a dot segment, which names another path")
		}
		return url.PathEscape(s), nil
	},
	// urlquery escapes its arguments, joined as text/template's own
	// urlquery joins them, for a URL query; a value no URL carries as it
	// is (urlValue) is refused.
	"urlquery": func(args ...any) (string, error) {
		for _, a := range args {
			if _, err := urlValue(a); err != nil {
				return "", err
			}
		}
		if len(args) == 1 {
			if s, ok := args[0].(string); ok {
				return url.QueryEscape(s), nil
			}
		}
		return url.QueryEscape(fmt.Sprint(args...)), nil
	},
}

// urlValue is v as the text a URL carries: a string, a number or a
// boolean of the payload, or a value written in the template. A null,
// an object or an array is refused: text/template would write "<no
// value>", "map[…]" or "[…]", and a lookup would then ask the
// destination for another record than the operation's (an
// authoritative "none found" for it would resend the call).
func urlValue(v any) (string, error) {
	if what := unprintable(v); what != "" {
		return "", errors.New("the value is " + what + ", which a URL cannot carry")
	}
	if s, ok := scalarString(v); ok {
		return s, nil
	}
	return fmt.Sprint(v), nil
}

func newTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(templateFuncs).Funcs(comparisonFuncs).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	guardPrinting(t)
	return t, nil
}

// printedFunc names the function guardPrinting ends every printing
// action with. It is added after parsing, so no template can call it.
const printedFunc = "opledger_printed"

// guardPrinting ends every action of t that prints its value ({{.Payload.name}},
// not {{$x := …}}) with printedFunc, in every branch and defined template,
// so that a value text/template would write as no content of the
// operation (a null as "<no value>", an object as "map[…]", an array as
// "[…]") fails the rendering instead: the call is then rejected with
// nothing sent, a lookup not made, as for a missing field, rather than
// "<no value>" sent in a body or stored as a reference.
func guardPrinting(t *template.Template) {
	t.Funcs(template.FuncMap{printedFunc: printed})
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			guardList(tt.Tree, tt.Tree.Root)
		}
	}
}

// guardList guards the actions of list and of the branches within it.
func guardList(tree *parse.Tree, list *parse.ListNode) {
	if list == nil {
		return
	}
	for _, n := range list.Nodes {
		switch n := n.(type) {
		case *parse.ActionNode:
			if len(n.Pipe.Decl) > 0 {
				continue // {{$x := …}} prints nothing
			}
			action := n.String()
			n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos, Args: []parse.Node{
				parse.NewIdentifier(printedFunc).SetTree(tree).SetPos(n.Pos),
				&parse.StringNode{NodeType: parse.NodeString, Pos: n.Pos, Quoted: strconv.Quote(action), Text: action},
			}})
		case *parse.IfNode:
			guardList(tree, n.List)
			guardList(tree, n.ElseList)
		case *parse.RangeNode:
			guardList(tree, n.List)
			guardList(tree, n.ElseList)
		case *parse.WithNode:
			guardList(tree, n.List)
			guardList(tree, n.ElseList)
		}
	}
}

// printed is v, which the action (as the template writes it) prints,
// unless text/template would print it as something the operation does
// not hold (unprintedError).
func printed(action string, v any) (any, error) {
	if what := unprintable(v); what != "" {
		return nil, &unprintedError{action: action, what: what}
	}
	return v, nil
}

// unprintable says what v, a payload's value, is when text/template
// would write it as none of the payload's text ("<no value>", "map[…]",
// "[…]"): "null", "an object" or "an array"; "" for any other value.
func unprintable(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return ""
}

// unprintedError is printed's refusal of a value: the action that would
// have printed it and what the value is, never the value.
type unprintedError struct{ action, what string }

func (e *unprintedError) Error() string {
	return "the value is " + e.what + ", which would be written as no content of the operation; " +
		"write {{json …}} to send it as JSON"
}

// urlTemplate parses a URL template whose scheme and host are literal, so
// that no payload can send a request elsewhere. It returns the template
// and its origin (scheme://host).
func urlTemplate(name, text string) (*template.Template, string, error) {
	if text == "" {
		return nil, "", errors.New("is required")
	}
	if strings.Contains(text, "${") {
		return nil, "", errors.New("environment references are only expanded in headers; put credentials there")
	}
	scheme, rest, ok := strings.Cut(text, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return nil, "", errors.New("must start with http:// or https://")
	}
	hostEnd := strings.IndexAny(rest, "/?#")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	host := rest[:hostEnd]
	if host == "" || strings.Contains(host, "{{") || strings.Contains(host, "@") {
		return nil, "", errors.New("the scheme and host must be written out, without template actions or user info")
	}
	t, err := newTemplate(name, text)
	if err != nil {
		return nil, "", err
	}
	return t, scheme + "://" + host, nil
}

// requestURL parses u, a rendered URL template whose origin is origin,
// as a request is sent to it: a URL (url.Parse) on that origin, its port,
// if any, one from 1 to 65535. The error says what is wrong in the terms
// of the template's text, never quoting the rendered URL.
func requestURL(u, origin string) (*url.URL, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("is not a URL: %w", err)
	}
	if parsed.Scheme+"://"+parsed.Host != origin {
		return nil, fmt.Errorf("is not a URL on %s", origin)
	}
	if p := parsed.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("is not a URL: port %s is not one from 1 to 65535", p)
		}
	}
	return parsed, nil
}

// envRefInTemplate refuses a ${NAME} reference in a body template: it
// would be sent as written, since environment references are expanded
// in headers only, and a secret put there belongs in a header. A literal
// "${" is written {{"${"}}.
func envRefInTemplate(text string) error {
	m := envRef.FindString(text)
	if m == "" {
		return nil
	}
	return fmt.Errorf("%s would be sent as written: environment references are only expanded in headers, "+
		`where secrets belong (e.g. Authorization: "Bearer ${API_KEY}"); write {{"${"}} for a literal ${`, m)
}

// templateData is what templates see. Its fields, in this order, are
// those a configuration error lists (templateFields).
type templateData struct {
	Key string
	// Payload is the stored, approved payload, decoded.
	Payload        any
	Tenant         string
	Action         string
	Destination    string
	Version        int64
	IdempotencyKey string
}

func newTemplateData(op *opledger.Operation) (*templateData, error) {
	d := &templateData{Tenant: op.Tenant, Key: op.Key, Action: op.Action, Destination: op.Destination,
		Version: op.Version, IdempotencyKey: op.IdempotencyKey()}
	if len(op.Payload) > 0 {
		v, err := decodeJSON(op.Payload)
		if err != nil {
			return nil, fmt.Errorf("decode payload: %w", err)
		}
		d.Payload = v
	}
	return d, nil
}

func render(t *template.Template, d *templateData) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, d); err != nil {
		return "", fmt.Errorf("render %s: %s", t.Name(), renderErrorText(err))
	}
	return b.String(), nil
}

// newRequest renders a request. Its errors are configuration or payload
// problems found before anything was sent.
func newRequest(ctx context.Context, method string, urlT *template.Template, origin string, bodyT *template.Template, rawBody []byte, headers http.Header, d *templateData) (*http.Request, error) {
	u, err := render(urlT, d)
	if err != nil {
		return nil, err
	}
	parsed, err := requestURL(u, origin)
	if err != nil {
		return nil, fmt.Errorf("render %s: the result is not a URL on %s", urlT.Name(), origin)
	}
	var body io.Reader
	switch {
	case bodyT != nil:
		s, err := render(bodyT, d)
		if err != nil {
			return nil, err
		}
		body = strings.NewReader(s)
	case rawBody != nil:
		body = bytes.NewReader(rawBody)
	}
	req, err := http.NewRequestWithContext(ctx, method, parsed.String(), body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header = headers.Clone()
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	return req, nil
}

// Name is the destination's name.
func (h *HTTP) Name() string { return h.name }

// Capabilities are the declared capabilities.
func (h *HTTP) Capabilities() Capabilities { return h.caps }

var _ TenantLimiter = (*HTTP)(nil)

// Tenants returns the tenants HTTPConfig.Tenants lists, or nil when it
// lists none and the destination serves every tenant.
func (h *HTTP) Tenants() []string { return slices.Clone(h.tenants) }

// RetryPolicy is the destination's retry policy, or nil when the file
// sets none and the ledger's default applies.
func (h *HTTP) RetryPolicy() *opledger.RetryPolicy {
	if h.retry == nil {
		return nil
	}
	p := *h.retry
	return &p
}

// Close closes idle connections.
func (h *HTTP) Close() error {
	h.client.CloseIdleConnections()
	return nil
}

// Call sends the operation to the destination. A request that cannot be
// built from the payload is rejected (nothing was sent); the answer is
// classified by SendHTTP; a 2xx answer without a reference at the
// configured pointer is uncertain (something probably happened, but what
// cannot be confirmed). The idempotency key, if declared, is sent on every
// attempt. The values of its headers' environment references are masked
// in what it returns (see secretList): the answer kept as the response,
// the reference and the error's text.
func (h *HTTP) Call(ctx context.Context, call opledger.Call) (opledger.Result, error) {
	res, err := h.call(ctx, call)
	return h.secrets.maskResult(res), h.secrets.maskError(err, true)
}

// call is Call, unmasked.
func (h *HTTP) call(ctx context.Context, call opledger.Call) (opledger.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := h.request(ctx, call)
	if err != nil {
		return opledger.Result{}, err
	}
	standIn, err := h.noContentRefOf(call)
	if err != nil {
		return opledger.Result{}, err
	}
	resp, err := SendHTTP(h.client, req, h.policy)
	if resp == nil {
		return opledger.Result{}, err
	}
	defer resp.Body.Close()
	answer, readErr := readAnswer(resp)
	if err != nil {
		if readErr != nil {
			answer = nil
		}
		return opledger.Result{Response: savable(answer)}, err
	}
	refless := func() error {
		// No ref declared: only a success without a body has a
		// reference (noContentRef), and this one has a body.
		return opledger.Uncertain(fmt.Errorf("%s %s: %s with a body, but %w", req.Method, req.URL.Host, resp.Status, errNoRefDeclared))
	}
	if errors.Is(readErr, errAnswerTooLarge) {
		if h.noRef {
			return opledger.Result{}, refless()
		}
		// A success too large to keep: its reference decides, and the
		// answer is not saved.
		ref, err := h.largeAnswerRef(answer, resp.Body)
		if err != nil {
			return opledger.Result{}, opledger.Uncertain(fmt.Errorf("%s %s: %s, but %w", req.Method, req.URL.Host, resp.Status, err))
		}
		return opledger.Result{Ref: ref}, nil
	}
	if readErr != nil {
		return opledger.Result{}, opledger.Uncertain(fmt.Errorf("%s %s: %s, reading the answer failed: %w",
			req.Method, req.URL.Host, resp.Status, readErr))
	}
	if h.noContentRef != nil && len(bytes.TrimSpace(answer)) == 0 {
		// A success without a body: the declared stand-in is its
		// reference.
		return opledger.Result{Ref: standIn}, nil
	}
	if h.noRef {
		return opledger.Result{Response: savable(answer)}, refless()
	}
	ref, err := refAt(answer, h.ref)
	if err != nil {
		return opledger.Result{Response: savable(answer)}, opledger.Uncertain(fmt.Errorf("%s %s: %s, but %w",
			req.Method, req.URL.Host, resp.Status, err))
	}
	return opledger.Result{Ref: ref, Response: savable(answer)}, nil
}

var _ Preparer = (*HTTP)(nil)

// Prepare renders the request Call would send for call, without sending
// it: a template the payload cannot fill is refused (opledger.Rejected).
func (h *HTTP) Prepare(call opledger.Call) error {
	if _, err := h.request(context.Background(), call); err != nil {
		return err
	}
	_, err := h.noContentRefOf(call)
	return err
}

// noContentRefOf renders the reference a success without a body stands
// on (HTTPConfig.NoContentRef), or "" when none is declared. What cannot
// be rendered, or is no reference the ledger can store, is refused
// (opledger.Rejected) before anything is sent: the same content never
// renders otherwise, and a success without a reference would be
// uncertain.
func (h *HTTP) noContentRefOf(call opledger.Call) (string, error) {
	if h.noContentRef == nil {
		return "", nil
	}
	d, err := newTemplateData(call.Operation)
	if err != nil {
		return "", opledger.Rejected(err)
	}
	if call.IdempotencyKey != "" {
		d.IdempotencyKey = call.IdempotencyKey
	}
	ref, err := render(h.noContentRef, d)
	if err != nil {
		return "", opledger.Rejected(err)
	}
	if strings.TrimSpace(ref) == "" {
		return "", opledger.Rejected(errors.New("render no_content_ref: the reference is empty"))
	}
	if err := opledger.CheckDestinationRef(ref); err != nil {
		return "", opledger.Rejected(fmt.Errorf("render no_content_ref: not a reference the ledger can store: %w", err))
	}
	return ref, nil
}

// request renders the request of call: URL, headers and body from the
// templates, the idempotency key in its header. What cannot be rendered
// is refused (opledger.Rejected): the same content never renders.
func (h *HTTP) request(ctx context.Context, call opledger.Call) (*http.Request, error) {
	d, err := newTemplateData(call.Operation)
	if err != nil {
		return nil, opledger.Rejected(err)
	}
	if call.IdempotencyKey != "" {
		d.IdempotencyKey = call.IdempotencyKey
	}
	var raw []byte
	if h.sendBody && h.body == nil {
		raw = call.Operation.Payload
		if raw == nil {
			raw = []byte("null")
		}
	}
	req, err := newRequest(ctx, h.method, h.url, h.origin, h.body, raw, h.headers, d)
	if err != nil {
		return nil, opledger.Rejected(err)
	}
	if h.idemHeader != "" {
		req.Header.Set(h.idemHeader, d.IdempotencyKey)
	}
	return req, nil
}

// Lookup searches the destination for op's effect and compares the record
// found with the intent. 404 means "not found" when the answer is a single
// record; an empty results array means "not found" for a search. More than
// one record is reported as found with other content: the operation is
// then held, since the destination may hold a duplicate.
//
// The lookup is the configured request and does not read refs: an HTTP
// call reports a reference only with its success, so an operation of this
// destination has none unless another worker reported one (which still
// keeps a "not found" from proving absence; see Lookuper). The values of
// the headers' environment references are masked in the evidence, the
// reference and the error's text, as in Call's.
//
// A lookup answered 429, 503 (or another status a call would retry) with
// a Retry-After fails marked opledger.Retryable with that wait, so that
// the reconciler does not look again before it.
func (h *HTTP) Lookup(ctx context.Context, op *opledger.Operation, _ []string) (LookupResult, error) {
	res, err := h.find(ctx, op)
	res.Ref = h.secrets.mask(res.Ref)
	res.Evidence = h.secrets.mask(res.Evidence)
	return res, h.secrets.maskError(err, false)
}

// lookupFailed is the error of a lookup whose request failed with err
// (SendHTTP's): its text and, when the destination asked to wait
// (Retry-After on a retryable answer), that wait, marked
// opledger.Retryable.
func lookupFailed(err error) error {
	failed := fmt.Errorf("lookup: %s", opledger.ErrorText(err))
	if o, after := opledger.OutcomeOf(err); o == opledger.OutcomeRetryable && after > 0 {
		return opledger.Retryable(failed, after)
	}
	return failed
}

// find is Lookup, unmasked.
func (h *HTTP) find(ctx context.Context, op *opledger.Operation) (LookupResult, error) {
	l := h.lookup
	if l == nil {
		return LookupResult{}, errors.New("destination " + h.name + " has no lookup")
	}
	// An operation whose content cannot fill the lookup's templates never
	// will: ErrNoLookup, so that the reconciler holds it at once.
	d, err := newTemplateData(op)
	if err != nil {
		return LookupResult{}, fmt.Errorf("%w: %w", ErrNoLookup, err)
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := newRequest(ctx, l.method, l.url, l.origin, l.body, nil, l.headers, d)
	if err != nil {
		return LookupResult{}, fmt.Errorf("%w: %w", ErrNoLookup, err)
	}
	if h.lookupHeaders != nil {
		own, err := h.lookupHeaders(op)
		if err != nil {
			return LookupResult{}, fmt.Errorf("%w: %w", ErrNoLookup, err)
		}
		for name, values := range own {
			req.Header[http.CanonicalHeaderKey(name)] = slices.Clone(values)
		}
	}
	where := req.Method + " " + req.URL.Host
	resp, err := SendHTTP(h.client, req, HTTPPolicy{Now: h.policy.Now})
	if resp == nil {
		return LookupResult{}, fmt.Errorf("lookup: %s", opledger.ErrorText(err))
	}
	defer resp.Body.Close()
	if err != nil {
		if resp.StatusCode == http.StatusNotFound && l.results == nil {
			// The destination's "no such record" carries its declared
			// mark, or, without one, is empty or a JSON document it says
			// is JSON (its error); an HTML or text page is a gateway's, a
			// retired route's or a mistyped URL's, which proves nothing.
			body, rerr := readAnswer(resp)
			if rerr == nil && l.notFound.marks(resp, body) {
				return LookupResult{Evidence: "lookup " + where + ": 404, no record"}, nil
			}
			if l.notFound != nil {
				return LookupResult{}, fmt.Errorf("lookup %s: 404 without the destination's \"no record\" mark (%s = %q): a gateway's or an unknown route's answer, it proves nothing", where, l.notFound.field.String(), l.notFound.value)
			}
			return LookupResult{}, fmt.Errorf("lookup %s: 404 with an answer that is not JSON (a gateway's or an unknown route's page, not the destination's \"no record\"): it proves nothing", where)
		}
		return LookupResult{}, lookupFailed(err)
	}
	answer, err := readAnswer(resp)
	if err != nil {
		return LookupResult{}, fmt.Errorf("lookup %s: read the answer: %w", where, err)
	}
	doc, err := decodeJSON(answer)
	if err != nil {
		return LookupResult{}, fmt.Errorf("lookup %s: the answer is not JSON", where)
	}
	record := doc
	if l.results != nil {
		v, ok := l.results.get(doc)
		list, isList := v.([]any)
		if !ok || !isList {
			return LookupResult{}, fmt.Errorf("lookup %s: no array of results at %q", where, l.results.String())
		}
		switch len(list) {
		case 0:
			return LookupResult{Evidence: "lookup " + where + ": no record"}, nil
		case 1:
			record = list[0]
		default:
			return LookupResult{Found: true, Evidence: fmt.Sprintf(
				"lookup %s: %d records carry this operation's reference; the destination may hold a duplicate", where, len(list))}, nil
		}
	}
	refV, ok := l.ref.get(record)
	ref, isScalar := refString(refV)
	if !ok || !isScalar || strings.TrimSpace(ref) == "" {
		return LookupResult{}, fmt.Errorf("lookup %s: the record found has no reference at %q", where, l.ref.String())
	}
	tokens := l.ref.tokens
	if l.results != nil {
		tokens = slices.Concat(l.results.tokens, []string{"0"}, l.ref.tokens)
	}
	if opledger.CheckDestinationRef(ref) == nil && !heldAsWritten(answer, tokens, ref) {
		// Not a reference the destination sent: the record would be
		// settled under one it never made. Looking again finds the
		// same, so the reconciler holds the operation at once, as for a
		// reference the ledger refuses.
		return LookupResult{}, fmt.Errorf("%w: lookup %s: the record found has a reference at %q the ledger cannot store: %s",
			ErrNoLookup, where, l.ref.String(), notAsWritten)
	}
	var differ []string
	for _, m := range l.match {
		same, err := m.matches(record, d)
		if err != nil {
			// A match value the content cannot fill: no record found can
			// ever be compared with it (it was taken for one with other
			// content). A lookup that finds nothing still proves absence.
			return LookupResult{}, fmt.Errorf("%w: match of %s: %w", ErrNoLookup, m.record.String(), err)
		}
		if !same {
			differ = append(differ, m.record.String())
		}
	}
	if len(differ) > 0 {
		return LookupResult{Found: true, Ref: ref, Evidence: fmt.Sprintf(
			"lookup %s: record %s differs from the intent at %s", where, ref, strings.Join(differ, ", "))}, nil
	}
	return LookupResult{Found: true, Matches: true, Ref: ref,
		Evidence: "lookup " + where + ": record " + ref + " matches the intent"}, nil
}

// matches compares the record's field with the intent; an error when the
// rule's value cannot be rendered from the operation.
func (m matchRule) matches(record any, d *templateData) (bool, error) {
	want := ""
	if m.payload == nil {
		// Rendered first: a value the content cannot fill is an error
		// whatever the record holds.
		var err error
		if want, err = render(m.value, d); err != nil {
			return false, err
		}
	}
	got, ok := m.record.get(record)
	if !ok {
		return false, nil
	}
	if m.payload != nil {
		want, ok := m.payload.get(d.Payload)
		return ok && jsonEqual(want, got), nil
	}
	s, ok := scalarString(got)
	return ok && s == want, nil
}

// errAnswerTooLarge: an answer is larger than maxAnswerBytes.
var errAnswerTooLarge = fmt.Errorf("the answer is larger than %d bytes", maxAnswerBytes)

// jsonMediaType reports a Content-Type of JSON: application/json, or a
// +json type (application/problem+json).
func jsonMediaType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// readAnswer reads at most maxAnswerBytes of an answer. A larger one is
// errAnswerTooLarge, with the bytes read so far (the answer's head; the
// rest is still in resp.Body).
func readAnswer(resp *http.Response) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxAnswerBytes {
		return b, errAnswerTooLarge
	}
	return b, nil
}

// largeAnswerRef reads the reference of a 2xx answer too large to keep
// (head is what readAnswer read of it, body the rest) as it streams by,
// without holding the answer.
func (h *HTTP) largeAnswerRef(head []byte, body io.Reader) (string, error) {
	up := &readerr.Reader{R: body}
	ref, ok := scanRef(io.MultiReader(bytes.NewReader(head), up), h.ref.tokens)
	switch {
	case up.Err != nil:
		return "", fmt.Errorf("reading the answer failed: %w", up.Err)
	case !ok:
		return "", fmt.Errorf("the answer (larger than %d bytes, not kept) has no reference at %q", maxAnswerBytes, h.ref.String())
	}
	return ref, nil
}

// RefOf reads the effect's reference from a 2xx answer of this
// destination, at the JSON pointer configured as its Ref. It fails when
// the answer is not JSON or has no string or number there, or one the ledger cannot
// store as the answer holds it (opledger.CheckDestinationRef; invalid
// UTF-8 or a lone surrogate escape, which ScanRef refuses too).
func (h *HTTP) RefOf(answer []byte) (string, error) {
	if h.noRef {
		return "", errNoRefDeclared
	}
	return refAt(answer, h.ref)
}

// errNoRefDeclared: a destination without ref (HTTPConfig.Ref) has no
// reference in an answer with a body.
var errNoRefDeclared = errors.New("the destination declares no ref to read a reference at (no_content_ref stands only for an answer without a body)")

// refAt extracts the reference at p from a JSON answer.
func refAt(answer []byte, p pointer) (string, error) {
	doc, err := decodeJSON(answer)
	if err != nil {
		return "", errors.New("the answer is not JSON")
	}
	v, ok := p.get(doc)
	if !ok {
		return "", fmt.Errorf("the answer has no reference at %q", p.String())
	}
	s, ok := refString(v)
	if !ok || strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("the value at %q is not a reference", p.String())
	}
	if err := opledger.CheckDestinationRef(s); err != nil {
		return "", fmt.Errorf("the value at %q is not a reference the ledger can store: %w", p.String(), err)
	}
	if !heldAsWritten(answer, p.tokens, s) {
		return "", fmt.Errorf("the value at %q is not a reference the ledger can store: %s", p.String(), notAsWritten)
	}
	return s, nil
}

// notAsWritten says why heldAsWritten refused a reference.
const notAsWritten = "it is not UTF-8 text, or holds a lone surrogate escape (\\ud800), which decodes to a character the answer does not hold"

// heldAsWritten reports whether s, the string decoded at the pointer
// tokens of the JSON answer, is the text the answer holds there, as
// ScanRef judges a reference (storable): a U+FFFD the decoder put in
// for bytes that are not UTF-8 (Latin-1's "M\xfcller") or for a lone
// surrogate escape would make a reference the destination never sent.
// A string without U+FFFD is held as written.
func heldAsWritten(answer []byte, tokens []string, s string) bool {
	if !strings.ContainsRune(s, utf8.RuneError) {
		return true
	}
	got, ok := scanRef(bytes.NewReader(answer), tokens)
	return ok && got == s
}

// savable returns the answer if it can be saved as the operation's
// response: valid JSON in UTF-8 (opledger.SavableResponse) of modest size.
func savable(answer []byte) json.RawMessage {
	if len(answer) == 0 || len(answer) > maxSavedBytes || !opledger.SavableResponse(answer) {
		return nil
	}
	return json.RawMessage(answer)
}

package destination_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
)

// operation builds an operation as the ledger would hand it over.
func operation(key, payload string) *opledger.Operation {
	return &opledger.Operation{Tenant: "default", Key: key, Action: "crm.create", Destination: "crm",
		Version: 1, Payload: json.RawMessage(payload)}
}

func call(op *opledger.Operation) opledger.Call {
	return opledger.Call{Operation: op, AttemptID: "A1", IdempotencyKey: op.IdempotencyKey()}
}

// crmConfig is a destination on a fakedest server.
func crmConfig(url string) destination.HTTPConfig {
	results := "/items"
	return destination.HTTPConfig{
		Name: "crm", URL: url + "/records", Ref: "/id",
		Headers:     map[string]string{"Authorization": "Bearer ${CRM_TOKEN}"},
		Body:        `{"external_ref": {{json .Key}}, "name": {{json .Payload.name}}, "units": {{json .Payload.units}}}`,
		Idempotency: &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(24 * 3600e9)},
		Lookup: &destination.LookupConfig{
			URL: url + "/records?external_ref={{urlquery .Key}}", Results: &results, Authoritative: true,
			Match: []destination.MatchConfig{{Record: "/external_ref", Value: "{{.Key}}"}, {Record: "/units", Payload: "/units"}},
		},
	}
}

func newHTTP(t *testing.T, c destination.HTTPConfig) *destination.HTTP {
	t.Helper()
	h, err := destination.NewHTTP(c, destination.LoadOptions{LookupEnv: env(map[string]string{"CRM_TOKEN": "crm-s3cret"})})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	return h
}

// capture is a destination server that records what it received.
type capture struct {
	mu      sync.Mutex
	headers http.Header
	body    string
	method  string
	path    string
	status  int
	answer  string
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.headers, c.body, c.method, c.path = r.Header.Clone(), string(b), r.Method, r.URL.RequestURI()
	status, answer := c.status, c.answer
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, answer)
}

func TestHTTPCall(t *testing.T) {
	t.Parallel()
	c := &capture{status: 201, answer: `{"id": 4711, "state": "open"}`}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	h := newHTTP(t, crmConfig(srv.URL))
	op := operation("intake:I17:create", `{"name": "Ada \"the\" <first>", "units": 2}`)

	res, err := h.Call(context.Background(), call(op))
	require.NoError(t, err)
	require.Equal(t, "4711", res.Ref, "a number reference becomes text")
	require.JSONEq(t, `{"id": 4711, "state": "open"}`, string(res.Response))

	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, http.MethodPost, c.method)
	require.Equal(t, "/records", c.path)
	require.JSONEq(t, `{"external_ref": "intake:I17:create", "name": "Ada \"the\" <first>", "units": 2}`, c.body)
	require.Equal(t, "Bearer crm-s3cret", c.headers.Get("Authorization"))
	require.Equal(t, op.IdempotencyKey(), c.headers.Get("Idempotency-Key"))
	require.Equal(t, "application/json", c.headers.Get("Content-Type"))
	require.Equal(t, "opledger", c.headers.Get("User-Agent"))
}

func TestHTTPCallPayloadAsBody(t *testing.T) {
	t.Parallel()
	c := &capture{status: 200, answer: `{"message_id": "m-1"}`}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	h := newHTTP(t, destination.HTTPConfig{Name: "email", Method: "put", URL: srv.URL + "/send/{{pathescape .Payload.to}}", Ref: "/message_id"})
	res, err := h.Call(context.Background(), call(operation("mail:1", `{"to": "a b/c", "n": 1}`)))
	require.NoError(t, err)
	require.Equal(t, "m-1", res.Ref)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, http.MethodPut, c.method)
	require.Equal(t, "/send/a%20b%2Fc", c.path)
	require.JSONEq(t, `{"to": "a b/c", "n": 1}`, c.body, "no body template: the stored payload as it is")
	require.Empty(t, c.headers.Get("Idempotency-Key"), "no key declared, none sent")
}

func TestHTTPCallOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		answer string
		want   opledger.Outcome
		ref    string
		saved  bool
	}{
		{"no reference in a 2xx", 201, `{"state": "open"}`, opledger.OutcomeUncertain, "", true},
		{"not JSON", 200, `created`, opledger.OutcomeUncertain, "", false},
		{"object reference", 200, `{"id": {"a": 1}}`, opledger.OutcomeUncertain, "", true},
		{"rejected keeps the answer", 422, `{"error": "email invalid"}`, opledger.OutcomeRejected, "", true},
		{"an answer not in UTF-8 is not kept", 422, "{\"error\": \"nombre inv\xe1lido\"}", opledger.OutcomeRejected, "", false},
		{"server error", 502, `<html>bad gateway</html>`, opledger.OutcomeUncertain, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(&capture{status: tc.status, answer: tc.answer})
			t.Cleanup(srv.Close)
			h := newHTTP(t, crmConfig(srv.URL))
			res, err := h.Call(context.Background(), call(operation("k1", `{"name": "Ada", "units": 2}`)))
			require.Error(t, err)
			got, _ := opledger.OutcomeOf(err)
			require.Equal(t, tc.want, got, "%v", err)
			require.Equal(t, tc.saved, res.Response != nil)
			require.NotContains(t, err.Error(), "Ada")
			require.NotContains(t, err.Error(), "crm-s3cret")
		})
	}
}

// A destination that answers 421 (Misdirected Request) did not act: the
// call is retryable, its answer kept, and the next call goes out on a
// new connection, not on the HTTP/2 connection that answered 421.
func TestHTTPCallMisdirectedIsRetryable(t *testing.T) {
	t.Parallel()
	srv := newConnServer(t, true, http.StatusMisdirectedRequest)
	h, err := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id"},
		destination.LoadOptions{Transport: srv.Client().Transport})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	op := operation("k1", `{"name": "Ada"}`)

	res, err := h.Call(context.Background(), call(op))
	got, after := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRetryable, got, "%v", err)
	require.Zero(t, after)
	require.JSONEq(t, `{"id": "r-1"}`, string(res.Response))

	res, err = h.Call(context.Background(), call(op))
	require.NoError(t, err)
	require.Equal(t, "r-1", res.Ref)
	remotes := srv.Remotes()
	require.Len(t, remotes, 2)
	require.NotEqual(t, remotes[0], remotes[1], "the retry went out on the connection that answered 421")
}

func TestHTTPCallRejectsBadPayloadBeforeSending(t *testing.T) {
	t.Parallel()
	fd := fakedest.New(t, fakedest.Options{})
	h := newHTTP(t, crmConfig(fd.URL()))
	_, err := h.Call(context.Background(), call(operation("k1", `{"name": "Ada"}`)))
	got, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRejected, got)
	require.ErrorContains(t, err, `map has no entry for key "units"`)
	require.Zero(t, fd.Creates(), "nothing was sent")
}

// A payload that cannot fill the template is refused in the template's
// terms: the action and what is missing, never a Go type.
func TestHTTPCallTemplateErrorInOperationTerms(t *testing.T) {
	t.Parallel()
	fd := fakedest.New(t, fakedest.Options{})
	cfg := crmConfig(fd.URL())
	cfg.Body = `{"first": {{json .Payload.name.first}}}`
	h := newHTTP(t, cfg)
	_, err := h.Call(context.Background(), call(operation("k1", `{"name": "Ada"}`)))
	got, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRejected, got)
	require.ErrorContains(t, err, "render body: {{.Payload.name.first}}: the value has no field first")
	require.NotContains(t, err.Error(), "interface {}")
	require.NotContains(t, err.Error(), "executing")
	require.Zero(t, fd.Creates(), "nothing was sent")
}

func TestHTTPCallConflictMeansExists(t *testing.T) {
	t.Parallel()
	fd := fakedest.New(t, fakedest.Options{Unique: true})
	cfg := crmConfig(fd.URL())
	cfg.UniqueReference = &destination.UniqueReferenceConfig{}
	cfg.Idempotency = nil
	h := newHTTP(t, cfg)
	op := operation("k1", `{"name": "Ada", "units": 2}`)
	_, err := h.Call(context.Background(), call(op))
	require.NoError(t, err)
	_, err = h.Call(context.Background(), call(op))
	got, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeUncertain, got, "the record exists: look it up, do not fail")
	require.ErrorIs(t, err, destination.ErrExists)
	require.Equal(t, 1, fd.Effects())

	// Without a unique reference declared, the same 409 is a refusal.
	plain := crmConfig(fd.URL())
	plain.Name = "crm2"
	_, err = newHTTP(t, plain).Call(context.Background(), call(op))
	got, _ = opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRejected, got)
	require.False(t, errors.Is(err, destination.ErrExists))
}

func TestHTTPLookup(t *testing.T) {
	t.Parallel()
	fd := fakedest.New(t, fakedest.Options{})
	h := newHTTP(t, crmConfig(fd.URL()))
	ctx := context.Background()
	op := operation("intake:I17:create", `{"name": "Ada", "units": 2}`)

	res, err := h.Lookup(ctx, op, nil)
	require.NoError(t, err)
	require.Equal(t, destination.LookupResult{Evidence: "lookup GET " + strings.TrimPrefix(fd.URL(), "http://") + ": no record"}, res)

	_, err = h.Call(ctx, call(op))
	require.NoError(t, err)
	res, err = h.Lookup(ctx, op, nil)
	require.NoError(t, err)
	require.True(t, res.Found)
	require.True(t, res.Matches)
	require.Equal(t, "R1", res.Ref)
	require.Contains(t, res.Evidence, "record R1 matches the intent")

	// Same reference, other content: found, no match.
	other := operation("intake:I17:create", `{"name": "Ada", "units": 3.0}`)
	res, err = h.Lookup(ctx, other, nil)
	require.NoError(t, err)
	require.True(t, res.Found)
	require.False(t, res.Matches)
	require.Contains(t, res.Evidence, "differs from the intent at /units")
	require.NotContains(t, res.Evidence, "Ada", "evidence names fields, never values")

	// Numbers compare by value.
	res, err = h.Lookup(ctx, operation("intake:I17:create", `{"name": "Ada", "units": 2.0}`), nil)
	require.NoError(t, err)
	require.True(t, res.Matches)

	// Two records with one reference: a possible duplicate, never a match.
	fd.Put("intake:I17:create", map[string]any{"units": json.Number("2")})
	res, err = h.Lookup(ctx, op, nil)
	require.NoError(t, err)
	require.True(t, res.Found)
	require.False(t, res.Matches)
	require.Contains(t, res.Evidence, "2 records")

	// A failing lookup is an error, not "not found".
	fd.FailLookups(1)
	_, err = h.Lookup(ctx, op, nil)
	require.ErrorContains(t, err, "lookup: GET")
	require.ErrorContains(t, err, "502 Bad Gateway")
}

func TestHTTPLookupSingleRecord(t *testing.T) {
	t.Parallel()
	fd := fakedest.New(t, fakedest.Options{})
	ctx := context.Background()
	cfg := destination.HTTPConfig{Name: "crm", URL: fd.URL() + "/records", Ref: "/id",
		Lookup: &destination.LookupConfig{URL: fd.URL() + "/records/{{pathescape .Payload.id}}",
			Match: []destination.MatchConfig{{Record: "/name", Payload: "/name"}}}}
	h := newHTTP(t, cfg)
	res, err := h.Lookup(ctx, operation("k1", `{"id": "R1", "name": "Ada"}`), nil)
	require.NoError(t, err)
	require.False(t, res.Found, "404 on a single-record lookup means not found")

	fd.Put("", map[string]any{"name": "Ada"})
	res, err = h.Lookup(ctx, operation("k1", `{"id": "R1", "name": "Ada"}`), nil)
	require.NoError(t, err)
	require.Equal(t, destination.LookupResult{Found: true, Matches: true, Ref: "R1",
		Evidence: "lookup GET " + strings.TrimPrefix(fd.URL(), "http://") + ": record R1 matches the intent"}, res)

	// A record without a reference cannot be trusted.
	cfg.Name, cfg.Lookup.Ref = "crm2", "/missing"
	_, err = newHTTP(t, cfg).Lookup(ctx, operation("k1", `{"id": "R1", "name": "Ada"}`), nil)
	require.ErrorContains(t, err, `has no reference at "/missing"`)
}

// TestLargeSuccessAnswer: a 2xx answer larger than a response the ledger
// keeps is still a success when it holds the reference: the reference is
// read as the answer streams by, and the answer is not saved.
func TestLargeSuccessAnswer(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 2<<20)
	for name, tc := range map[string]struct {
		body    string
		outcome opledger.Outcome
	}{
		"ref first": {`{"id": "R1", "log": "` + pad + `"}`, opledger.OutcomeSucceeded},
		"ref last":  {`{"log": "` + pad + `", "id": "R2"}`, opledger.OutcomeSucceeded},
		"no ref":    {`{"log": "` + pad + `"}`, opledger.OutcomeUncertain},
		"not JSON":  {pad, opledger.OutcomeUncertain},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			// A timeout far above the call's few milliseconds: under the
			// race detector on a loaded machine, reading 2 MiB once took
			// more than 5 s, and the call ended uncertain.
			set, err := destination.Load([]byte("destinations:\n  - name: big\n    url: "+srv.URL+"/r\n    ref: /id\n    timeout: 60s\n"), destination.LoadOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { set.Close() })
			d, _ := set.Get("big")
			res, err := d.Call(context.Background(), opledger.Call{Operation: &opledger.Operation{Key: "k", Action: "a", Destination: "big"}})
			if tc.outcome == opledger.OutcomeSucceeded {
				require.NoError(t, err)
				require.NotEmpty(t, res.Ref)
				require.Nil(t, res.Response, "too large to keep")
				return
			}
			got, _ := opledger.OutcomeOf(err)
			require.Equal(t, tc.outcome, got, "%v", err)
		})
	}
}

// TestHTTPLookupAnswerWithTrailingBytes: a lookup answer with anything
// after its JSON document (a stray ']' or '}' included) is no JSON, so
// no authoritative "nothing found" either: the lookup fails.
func TestHTTPLookupAnswerWithTrailingBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, answer := range []string{`{"items":[]}]`, `{"items":[]}}`, `{"items":[]} x`, `{"items":[]}{}`} {
		c := &capture{status: http.StatusOK, answer: answer}
		srv := httptest.NewServer(c)
		t.Cleanup(srv.Close)
		h := newHTTP(t, crmConfig(srv.URL))
		res, err := h.Lookup(ctx, operation("intake:I17:create", `{"name": "Ada", "units": 2}`), nil)
		require.ErrorContains(t, err, "the answer is not JSON", answer)
		require.Equal(t, destination.LookupResult{}, res, answer)
	}
	// White space after the document is no more than white space.
	c := &capture{status: http.StatusOK, answer: "{\"items\":[]}\n\t "}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	res, err := newHTTP(t, crmConfig(srv.URL)).Lookup(ctx, operation("intake:I17:create", `{"name": "Ada", "units": 2}`), nil)
	require.NoError(t, err)
	require.False(t, res.Found)
}

// TestHTTPLookupMatchValueUnfillable: a match value the operation's
// content cannot fill makes a record found impossible to compare
// (ErrNoLookup, naming the match), so the reconciler holds it at once; it
// was taken for a record with other content. A lookup that finds nothing
// still says so: absence can still be proven.
func TestHTTPLookupMatchValueUnfillable(t *testing.T) {
	t.Parallel()
	var found atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !found.Load() {
			w.WriteHeader(http.StatusNotFound) // the API's "no such record", empty
			return
		}
		_, _ = io.WriteString(w, `{"id": "R1", "name": "Ada"}`)
	}))
	t.Cleanup(srv.Close)
	cfg := destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id",
		Lookup: &destination.LookupConfig{URL: srv.URL + "/records/{{pathescape .Payload.id}}",
			Match: []destination.MatchConfig{{Record: "/name", Value: "{{.Payload.person.name}}"}}}}
	h := newHTTP(t, cfg)
	op := operation("k1", `{"id": "R1", "name": "Ada"}`)
	res, err := h.Lookup(context.Background(), op, nil)
	require.NoError(t, err)
	require.False(t, res.Found, "nothing found: absence, as before")

	found.Store(true)
	_, err = h.Lookup(context.Background(), op, nil)
	require.ErrorIs(t, err, destination.ErrNoLookup)
	require.ErrorContains(t, err, "match of /name")
}

// TestHTTPLookup404NotJSON: on a single-record lookup, a 404 whose body
// is empty or JSON is the destination's "no such record"; one with an
// HTML or text page (a gateway's, a retired route's, a mistyped lookup
// URL's) proves nothing, and is a failed lookup, not absence.
func TestHTTPLookup404NotJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		contentType, body string
		absent            bool
	}{
		{"", "", true},
		{"application/json; charset=utf-8", `{"error":"not_found"}`, true},
		{"application/problem+json", `{"title":"Not Found"}`, true},
		{"text/html", "<html><body>404 Not Found</body></html>", false},
		{"text/plain; charset=utf-8", "404 page not found\n", false},
		// JSON, but not said to be: a page, whatever it reads as.
		{"text/plain", "404", false},
		{"text/plain", `{"message":"no Route matched with those values"}`, false},
	} {
		res, err := lookup404(t, c.contentType, c.body, nil)
		if c.absent {
			require.NoError(t, err, "%+v", c)
			require.False(t, res.Found)
			continue
		}
		require.ErrorContains(t, err, "404 with an answer that is not JSON", "%+v", c)
	}
}

// lookup404 looks an operation up at a destination whose single-record
// lookup (marked by notFound, if not nil) answers 404 with body, of
// contentType if not empty.
func lookup404(t *testing.T, contentType, body string, notFound *destination.NotFoundConfig) (destination.LookupResult, error) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	cfg := destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id", Lookup: &destination.LookupConfig{
		URL: srv.URL + "/records/{{pathescape .Payload.id}}", Authoritative: true, NotFound: notFound,
		Match: []destination.MatchConfig{{Record: "/name", Payload: "/name"}}}}
	return newHTTP(t, cfg).Lookup(context.Background(), operation("k1", `{"id": "R1", "name": "Ada"}`), nil)
}

// TestHTTPLookupNotFoundMark: with lookup.not_found declared, only a 404
// carrying the destination's mark proves absence; a gateway's JSON 404,
// an empty one or the mark with another value is a failed lookup.
func TestHTTPLookupNotFoundMark(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		contentType, body string
		absent            bool
	}{
		{"application/json", `{"error": {"code": "record_not_found"}}`, true},
		// The mark is the body's; its media type is not needed.
		{"text/plain", `{"error": {"code": "record_not_found"}}`, true},
		{"application/json", `{"message": "no Route matched with those values"}`, false},
		{"application/json", `{"message": "Not Found"}`, false},
		{"application/json", `{"error": {"code": "route_not_found"}}`, false},
		{"application/json", `{"error": {"code": {"name": "record_not_found"}}}`, false},
		{"", "", false},
		{"text/html", "<html>record_not_found</html>", false},
	} {
		res, err := lookup404(t, c.contentType, c.body, &destination.NotFoundConfig{Field: "/error/code", Value: "record_not_found"})
		if c.absent {
			require.NoError(t, err, "%+v", c)
			require.False(t, res.Found)
			continue
		}
		require.ErrorContains(t, err, `404 without the destination's "no record" mark (/error/code = "record_not_found")`, "%+v", c)
	}
}

// TestHTTPRefNotAsWritten: a reference that is not UTF-8 as the answer
// holds it (Latin-1 bytes) or that holds a lone surrogate escape decodes
// to U+FFFD, a reference the destination never sent. A 2xx answer with
// one is uncertain, as an answer over 1 MiB with the same reference is
// (ScanRef refuses it); a lookup that finds a record with one can make
// none that settles the operation (ErrNoLookup: held at once).
func TestHTTPRefNotAsWritten(t *testing.T) {
	t.Parallel()
	items := "/items"
	for _, ref := range []string{"M\xfcller-17", `\ud800-17`, `\udc00\ufffd`} {
		answer := `{"id": "` + ref + `"}`
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/x":
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, answer)
			case "/find":
				_, _ = io.WriteString(w, answer)
			case "/search":
				_, _ = io.WriteString(w, `{"items": [`+answer+`]}`)
			}
		}))
		t.Cleanup(srv.Close)
		h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/x", Ref: "/id"})
		_, ok := h.ScanRef(strings.NewReader(answer))
		require.False(t, ok, "the large-answer path takes no such reference")
		res, err := h.Call(context.Background(), call(operation("k1", `{}`)))
		got, _ := opledger.OutcomeOf(err)
		require.Equal(t, opledger.OutcomeUncertain, got, "%q: %v", ref, err)
		require.ErrorContains(t, err, `201 Created, but the value at "/id" is not a reference the ledger can store`)
		require.Empty(t, res.Ref)

		for _, lookup := range []destination.LookupConfig{
			{URL: srv.URL + "/find"},
			{URL: srv.URL + "/search", Results: &items},
		} {
			lookup.Match = []destination.MatchConfig{{Record: "/id", Value: "x"}}
			h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/x", Ref: "/id", Lookup: &lookup})
			res, err := h.Lookup(context.Background(), operation("k1", `{}`), nil)
			require.ErrorIs(t, err, destination.ErrNoLookup, "%q", ref)
			require.ErrorContains(t, err, `the record found has a reference at "/id" the ledger cannot store`)
			require.Equal(t, destination.LookupResult{}, res)
		}
	}
	// U+FFFD the answer holds, as such or escaped, is its own.
	for answer, want := range map[string]string{`{"id": "a\ufffd"}`: "a\uFFFD", `{"id": "a\uFFFD"}`: "a\uFFFD", `{"id": "a` + "\uFFFD" + `"}`: "a\uFFFD"} {
		srv := httptest.NewServer(&capture{status: http.StatusCreated, answer: answer})
		t.Cleanup(srv.Close)
		res, err := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/x", Ref: "/id"}).Call(context.Background(), call(operation("k1", `{}`)))
		require.NoError(t, err, answer)
		require.Equal(t, want, res.Ref)
	}
}

// TestHTTPBooleanIsNoReference: a boolean at the ref pointer (an answer's
// {"ok": true} pointed at by mistake) names no effect of its own: every
// answer of the kind carries the same one. A call so answered is
// uncertain, as one without a reference is, and a record found by a
// lookup with one is not trusted.
func TestHTTPBooleanIsNoReference(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"true", "false"} {
		answer := `{"id": ` + b + `}`
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/x" {
				w.WriteHeader(http.StatusCreated)
			}
			_, _ = io.WriteString(w, answer)
		}))
		t.Cleanup(srv.Close)
		h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/x", Ref: "/id"})
		_, err := h.RefOf([]byte(answer))
		require.ErrorContains(t, err, `the value at "/id" is not a reference`)
		_, ok := h.ScanRef(strings.NewReader(answer))
		require.False(t, ok, "the large-answer path takes no boolean either")
		res, err := h.Call(context.Background(), call(operation("k1", `{}`)))
		got, _ := opledger.OutcomeOf(err)
		require.Equal(t, opledger.OutcomeUncertain, got, "%s: %v", b, err)
		require.Empty(t, res.Ref)

		lookup := destination.LookupConfig{URL: srv.URL + "/find", Match: []destination.MatchConfig{{Record: "/id", Value: b}}}
		h = newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/x", Ref: "/id", Lookup: &lookup})
		_, err = h.Lookup(context.Background(), operation("k1", `{}`), nil)
		require.ErrorContains(t, err, `the record found has no reference at "/id"`)
	}
}

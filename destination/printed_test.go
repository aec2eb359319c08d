package destination_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// TestPrintedValueNotTheOperations: an action that prints a payload value
// text/template would write as no content of the operation (a null as
// "<no value>", an object as "map[…]", an array as "[…]") fails the
// rendering, in whichever template and branch it stands: before, a body
// sent "<no value>" as a name, a success without a body stored the
// reference "deleted:<no value>" (one for every operation whose field
// is null), and a lookup compared a record's field with "<no value>".
// The call is rejected with nothing sent, the lookup cannot be made
// (the operation is held), and the error names the action, never a
// value.
func TestPrintedValueNotTheOperations(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"items": [{"id": "r1", "key": "k1", "name": "Ada"}]}`))
	}))
	t.Cleanup(srv.Close)
	items := "/items"
	for _, c := range []struct {
		name, body, payload, action, says string
	}{
		{"null", `{"name": "{{.Payload.name}}"}`, `{"name": null, "n": 1}`, "{{.Payload.name}}", "the value is null"},
		{"object", `{{.Payload.name}}`, `{"name": {"first": "Ada"}}`, "{{.Payload.name}}", "the value is an object"},
		{"array", `x={{.Payload.name}}`, `{"name": ["Ada"]}`, "{{.Payload.name}}", "the value is an array"},
		{"the payload itself", `{{.Payload}}`, `{"name": "Ada"}`, "{{.Payload}}", "the value is an object"},
		{"in a branch", `{{if .Payload.n}}{{.Payload.name}}{{else}}none{{end}}`, `{"name": null, "n": 1}`, "{{.Payload.name}}", "the value is null"},
		{"in a range", `{{range .Payload.names}}{{.}},{{end}}`, `{"names": ["a", null]}`, "{{.}}", "the value is null"},
		{"in a defined template", `{{define "n"}}{{.name}}{{end}}{{template "n" .Payload}}`, `{"name": null}`, "{{.name}}", "the value is null"},
		{"through a variable", `{{$n := .Payload.name}}{{$n}}`, `{"name": null}`, "{{$n}}", "the value is null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			op := operation("k1", c.payload)
			h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Body: c.body, Ref: "/id",
				Lookup: &destination.LookupConfig{URL: srv.URL + "/records", Method: "POST", Body: c.body, Results: &items, Authoritative: true,
					Match: []destination.MatchConfig{{Record: "/key", Value: "{{.Key}}"}}}})
			_, err := h.Call(context.Background(), call(op))
			got, _ := opledger.OutcomeOf(err)
			require.Equal(t, opledger.OutcomeRejected, got, "%v", err)
			require.ErrorContains(t, err, "render body: "+c.action+": "+c.says)
			require.NotContains(t, err.Error(), "Ada")
			require.NotContains(t, err.Error(), "opledger_printed")
			_, err = h.Lookup(context.Background(), op, nil)
			require.ErrorIs(t, err, destination.ErrNoLookup)
			require.ErrorContains(t, err, c.action+": "+c.says)
		})
	}
	require.Zero(t, arrived.Load(), "nothing was sent")

	// A reference for a success without a body, and a lookup's match value.
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(empty.Close)
	h := newHTTP(t, destination.HTTPConfig{Name: "crm", Method: "DELETE", URL: empty.URL + "/records/r1", Ref: "/id", NoContentRef: "deleted:{{.Payload.name}}"})
	_, err := h.Call(context.Background(), call(operation("k1", `{"name": null}`)))
	got, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRejected, got, "%v", err)
	require.ErrorContains(t, err, "{{.Payload.name}}: the value is null")
	h = newHTTP(t, destination.HTTPConfig{Name: "crm2", URL: srv.URL + "/records", Ref: "/id",
		Lookup: &destination.LookupConfig{URL: srv.URL + "/records", Results: &items, Authoritative: true,
			Match: []destination.MatchConfig{{Record: "/name", Value: "{{.Payload.name}}"}}}})
	_, err = h.Lookup(context.Background(), operation("k1", `{"name": null}`), nil)
	require.ErrorIs(t, err, destination.ErrNoLookup)
	require.ErrorContains(t, err, "{{.Payload.name}}: the value is null")

	// Text, numbers, booleans and {{json …}} of anything print as before,
	// and so does a declaration, which prints nothing.
	c := &capture{status: 201, answer: `{"id": "r1"}`}
	ok := httptest.NewServer(c)
	t.Cleanup(ok.Close)
	h = newHTTP(t, destination.HTTPConfig{Name: "crm3", URL: ok.URL + "/records", Ref: "/id",
		Body: `{{$x := .Payload.gone}}{{.Payload.name}} {{.Payload.n}} {{.Payload.flag}} {{json .Payload.gone}} {{json .Payload.obj}} {{.Version}}`})
	res, err := h.Call(context.Background(), call(operation("k1", `{"name": "Ada", "n": 2.50, "flag": true, "gone": null, "obj": {"a": [1]}}`)))
	require.NoError(t, err)
	require.Equal(t, "r1", res.Ref)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, `Ada 2.50 true null {"a":[1]} 1`, c.body)
}

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

// TestURLEscapeRefusesWhatIsNoValue: pathescape and urlquery refuse a
// payload value that cannot stand in a URL as the value it is. A null
// rendered as text/template's "<no value>", an object or an array as
// Go's "map[…]" or "[…]", and pathescape let an empty value or a dot
// segment (".", "..") through, which changes the path's segments:
// ".../records/{{pathescape .Payload.id}}" with the id ".." is the
// collection's parent once the path is normalized, and with "" the
// collection. A lookup so made asked for another resource, and its 404
// (or an empty search for "<no value>") read as an authoritative "no
// record": the reconciler resent a create that may have had its effect.
// Now the lookup cannot be made (ErrNoLookup: the operation is held) and
// the call is rejected, nothing sent either way; the error names the
// action, never the value.
func TestURLEscapeRefusesWhatIsNoValue(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.RawQuery != "" {
			_, _ = w.Write([]byte(`{"items": []}`)) // a search that found nothing
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error": "not found"}`))
	}))
	t.Cleanup(srv.Close)
	items := "/items"
	for _, c := range []struct {
		name, url, payload, says string
		results                  *string
	}{
		{"empty path segment", "/records/{{pathescape .Payload.id}}", `{"id": ""}`, "is empty", nil},
		{"dot segment", "/records/{{pathescape .Payload.id}}", `{"id": "."}`, "a dot segment", nil},
		{"dot-dot segment", "/records/{{pathescape .Payload.id}}", `{"id": ".."}`, "a dot segment", nil},
		{"null in a path", "/records/{{pathescape .Payload.id}}", `{"id": null}`, "is null", nil},
		{"object in a path", "/records/{{pathescape .Payload.id}}", `{"id": {"n": 1}}`, "is an object", nil},
		{"null in a query", "/records?external_ref={{urlquery .Payload.ref}}", `{"ref": null}`, "is null", &items},
		{"array in a query", "/records?external_ref={{urlquery .Payload.ref}}", `{"ref": ["a"]}`, "is an array", &items},
		{"null among several", "/records?external_ref={{urlquery .Tenant \"|\" .Payload.ref}}", `{"ref": null}`, "is null", &items},
	} {
		t.Run(c.name, func(t *testing.T) {
			op := operation("k1", c.payload)
			h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + c.url, Ref: "/id",
				Lookup: &destination.LookupConfig{URL: srv.URL + c.url, Results: c.results, Authoritative: true,
					Match: []destination.MatchConfig{{Record: "/key", Value: "{{.Key}}"}}}})
			res, err := h.Lookup(context.Background(), op, nil)
			require.ErrorIs(t, err, destination.ErrNoLookup, "no lookup can be made: not %+v", res)
			require.ErrorContains(t, err, c.says)
			for what, err := range map[string]error{
				"Prepare": h.Prepare(call(op)),
				"Call":    func() error { _, err := h.Call(context.Background(), call(op)); return err }(),
			} {
				got, _ := opledger.OutcomeOf(err)
				require.Equal(t, opledger.OutcomeRejected, got, "%s: %v", what, err)
				require.ErrorContains(t, err, c.says, what)
			}
		})
	}
	require.Zero(t, arrived.Load(), "nothing was sent")

	// Text, numbers and booleans are escaped as before.
	c := &capture{status: 200, answer: `{"id": "r1"}`}
	ok := httptest.NewServer(c)
	t.Cleanup(ok.Close)
	h := newHTTP(t, destination.HTTPConfig{Name: "crm", Method: "PUT", Ref: "/id",
		URL: ok.URL + "/records/{{pathescape .Payload.id}}/{{pathescape .Payload.n}}?v={{urlquery .Payload.flag .Payload.n}}&w={{urlquery \"a b\" .Payload.n}}"})
	_, err := h.Call(context.Background(), call(operation("k1", `{"id": "a b/..", "n": 2.50, "flag": true}`)))
	require.NoError(t, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(t, "/records/a%20b%2F../2.50?v=true2.50&w=a+b2.50", c.path)
}

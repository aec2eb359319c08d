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

// TestRenderErrorsQuoteNoPayload: a template the payload cannot fill is
// refused before anything is sent, and the refusal names the template's
// action, never a value of the payload: text/template's own messages
// quote the value for a range over a scalar ("range can't iterate over
// <value>") and print both sides of a comparison of objects or arrays,
// and that text would become the attempt's error, the operation's last
// error or a held operation's reason, shown to every reader of it.
func TestRenderErrorsQuoteNoPayload(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	const secret = "PAYLOAD-VALUE-4111"
	for _, c := range []struct {
		name, template, payload, says string
	}{
		{"range over text", `[{{range .Payload.items}}{{json .}},{{end}}"end"]`,
			`{"items": "` + secret + `"}`, "{{.Payload.items}}: range can't iterate over the value"},
		{"range over a number", `[{{range .Payload.items}}{{json .}},{{end}}"end"]`,
			`{"items": 4111123412341234}`, "range can't iterate over the value"},
		{"objects compared", `{"same": {{if eq .Payload.billing .Payload.shipping}}true{{else}}false{{end}}}`,
			`{"billing": {"card": "` + secret + `"}, "shipping": {"street": "` + secret + `"}}`, "cannot be compared"},
		{"arrays compared", `{"same": {{if eq .Payload.a .Payload.b}}true{{else}}false{{end}}}`,
			`{"a": ["` + secret + `"], "b": ["` + secret + `"]}`, "cannot be compared"},
		{"a method of a number", `{"cents": {{.Payload.amount.Int64}}}`,
			`{"amount": 4111123412341234.5}`, "{{.Payload.amount.Int64}}: error calling Int64"},
		// Messages that quote nothing of the payload are kept as they are.
		{"a field of null", `{"first": {{json .Payload.name.first}}}`, `{"name": null}`,
			"{{.Payload.name.first}}: nil pointer evaluating value.first"},
		{"a missing field", `{"units": {{json .Payload.units}}}`, `{"name": "` + secret + `"}`,
			`{{.Payload.units}}: map has no entry for key "units"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			op := operation("k1", c.payload)
			body := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id", Body: c.template})
			for what, err := range map[string]error{
				"Prepare": body.Prepare(call(op)),
				"Call":    func() error { _, err := body.Call(context.Background(), call(op)); return err }(),
			} {
				require.Error(t, err, what)
				got, _ := opledger.OutcomeOf(err)
				require.Equal(t, opledger.OutcomeRejected, got, what)
				require.ErrorContains(t, err, c.says, what)
				require.NotContains(t, err.Error(), secret, what)
				require.NotContains(t, err.Error(), "4111123412341234", what)
			}
			lookup := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id",
				Lookup: &destination.LookupConfig{Method: "POST", URL: srv.URL + "/search", Body: c.template,
					Match: []destination.MatchConfig{{Record: "/key", Value: "{{.Key}}"}}}})
			_, err := lookup.Lookup(context.Background(), op, nil)
			require.ErrorIs(t, err, destination.ErrNoLookup)
			require.ErrorContains(t, err, c.says)
			require.NotContains(t, err.Error(), secret)
			require.NotContains(t, err.Error(), "4111123412341234")
		})
	}
	require.Zero(t, arrived.Load(), "nothing was sent")
}

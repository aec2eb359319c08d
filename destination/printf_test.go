package destination_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/destination"
)

// TestTemplatePrintfFormatsPayloadNumbers: printf formats a payload's
// number (json.Number) with a number's verbs as the number it is. It
// used to take it for text and send "%!f(json.Number=12)" to the
// destination as the amount, with no error; %s and %v still give the
// number as written.
func TestTemplatePrintfFormatsPayloadNumbers(t *testing.T) {
	t.Parallel()
	c := &capture{status: 201, answer: `{"id": "R1"}`}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ body, payload, sent string }{
		{`{"amount": "{{printf "%.2f" .Payload.amount}}"}`, `{"amount": 12.5}`, `{"amount": "12.50"}`},
		{`{"amount": "{{printf "%.2f" .Payload.amount}}"}`, `{"amount": 7}`, `{"amount": "7.00"}`},
		{`{"cents": {{printf "%d" .Payload.cents}}}`, `{"cents": 1250}`, `{"cents": 1250}`},
		{`{"id": "{{printf "%08d" .Payload.id}}"}`, `{"id": 4711}`, `{"id": "00004711"}`},
		{`{"big": {{printf "%d" .Payload.big}}}`, `{"big": 123456789012345678901234567890}`, `{"big": 123456789012345678901234567890}`},
		{`{"exp": {{printf "%d" .Payload.n}}}`, `{"n": 1e3}`, `{"exp": 1000}`},
		{`{"x": "{{printf "%x" .Payload.n}}"}`, `{"n": 255}`, `{"x": "ff"}`},
		{`{"e": "{{printf "%.3e" .Payload.n}}"}`, `{"n": 12345.678}`, `{"e": "1.235e+04"}`},
		{`{"f": "{{printf "%.1f" .Payload.n}}"}`, `{"n": -0.25e1}`, `{"f": "-2.5"}`},
		// As before: as text, the number as written.
		{`{"s": "{{printf "%s|%v|%q" .Payload.n .Payload.n .Payload.n}}"}`, `{"n": 2.50}`, `{"s": "2.50|2.50|"2.50""}`},
		{`{"s": "{{printf "%s-%d" .Payload.name .Payload.n}}"}`, `{"name": "Ada", "n": 3}`, `{"s": "Ada-3"}`},
	} {
		h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id", Body: tc.body})
		_, err := h.Call(context.Background(), call(operation("k1", tc.payload)))
		require.NoError(t, err, tc.body)
		c.mu.Lock()
		got := c.body
		c.mu.Unlock()
		require.Equal(t, tc.sent, got, tc.body)
	}
	// A vast exponent is formatted at once, not computed digit by digit.
	h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id",
		Body: `{"n": "{{printf "%d %.3g" .Payload.n .Payload.n}}"}`})
	_, err := h.Call(context.Background(), call(operation("k1", `{"n": 1e999999999}`)))
	require.NoError(t, err)
}

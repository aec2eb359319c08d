package destination_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/destination"
)

// TestTemplatesComparePayloadNumbers: the payload's numbers are kept
// exact (as written), yet a template compares them with a number as
// numbers: {{if lt .Payload.units 3}} is a template the file loads, and
// it must render for a payload with units 2, not refuse every operation
// with "incompatible types for comparison". Text still compares as text,
// and a payload number with text as before (as its digits).
func TestTemplatesComparePayloadNumbers(t *testing.T) {
	t.Parallel()
	c := &capture{status: 201, answer: `{"id": "R1"}`}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, body, payload, sent string
	}{
		{"lt, less", `{"size": {{if lt .Payload.units 3}}"small"{{else}}"big"{{end}}}`, `{"units": 2}`, `{"size": "small"}`},
		{"lt, more", `{"size": {{if lt .Payload.units 3}}"small"{{else}}"big"{{end}}}`, `{"units": 5}`, `{"size": "big"}`},
		{"lt, a fraction", `{"size": {{if lt .Payload.units 3}}"small"{{else}}"big"{{end}}}`, `{"units": 2.5}`, `{"size": "small"}`},
		{"le, equal", `{"ok": {{le .Payload.units 2}}}`, `{"units": 2.0}`, `{"ok": true}`},
		{"gt, with a fraction", `{"ok": {{gt .Payload.amount 99.5}}}`, `{"amount": 1e2}`, `{"ok": true}`},
		{"ge, two payload numbers", `{"ok": {{ge .Payload.a .Payload.b}}}`, `{"a": 10, "b": 9.99}`, `{"ok": true}`},
		{"eq, written otherwise", `{"ok": {{eq .Payload.units 2}}}`, `{"units": 2.00}`, `{"ok": true}`},
		{"eq, one of several", `{"ok": {{eq .Payload.units 1 2 3}}}`, `{"units": 3}`, `{"ok": true}`},
		{"ne", `{"ok": {{ne .Payload.units 2}}}`, `{"units": 2}`, `{"ok": false}`},
		{"huge numbers, exactly", `{"ok": {{lt .Payload.a .Payload.b}}}`, `{"a": 12345678901234567890, "b": 12345678901234567891}`, `{"ok": true}`},
		{"negative", `{"ok": {{lt .Payload.t -1}}}`, `{"t": -2}`, `{"ok": true}`},
		{"negative, greater", `{"ok": {{gt .Payload.t -3.5}}}`, `{"t": -2e0}`, `{"ok": true}`},
		{"zero", `{"ok": {{eq .Payload.z 0}}}`, `{"z": -0.0}`, `{"ok": true}`},
		{"a fraction as written", `{"ok": {{eq .Payload.p 0.1}}}`, `{"p": 0.10}`, `{"ok": true}`},
		{"a vast exponent", `{"ok": {{and (gt .Payload.h 3) (lt .Payload.s -3)}}}`, `{"h": 1e999999999, "s": -1e999999999}`, `{"ok": true}`},
		{"small, by position", `{"ok": {{lt .Payload.a .Payload.b}}}`, `{"a": 0.0099, "b": 0.01}`, `{"ok": true}`},
		// As before: text with text, and a payload number with text.
		{"text", `{"ok": {{eq .Payload.state "open" "new"}}}`, `{"state": "new"}`, `{"ok": true}`},
		{"text, lt", `{"ok": {{lt .Payload.state "b"}}}`, `{"state": "a"}`, `{"ok": true}`},
		{"a number with text", `{"ok": {{eq .Payload.units "2"}}}`, `{"units": 2}`, `{"ok": true}`},
		{"the number is sent as written", `{"units": {{json .Payload.units}}}`, `{"units": 2.50}`, `{"units": 2.50}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id", Body: tc.body})
			_, err := h.Call(context.Background(), call(operation("k1", tc.payload)))
			require.NoError(t, err)
			c.mu.Lock()
			defer c.mu.Unlock()
			require.Equal(t, tc.sent, c.body)
		})
	}
	// Still refused, and said without the values: what cannot be compared.
	h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + "/records", Ref: "/id",
		Body: `{"ok": {{lt .Payload.flag 3}}}`})
	err := h.Prepare(call(operation("k1", `{"flag": true}`)))
	require.ErrorContains(t, err, "render body: {{lt .Payload.flag 3}}: error calling lt: incompatible types for comparison")
}

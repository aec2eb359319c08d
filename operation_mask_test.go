package opledger_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A destination that echoes the payload must not carry a sensitive value
// into the operation's JSON through the saved response.
func TestMarshalMasksSensitiveEchoesInResponse(t *testing.T) {
	t.Parallel()
	op := opledger.Operation{
		Key:             "k",
		Payload:         json.RawMessage(`{"customer":{"email":"ann@example.invalid","phone":5551234},"cards":[{"pan":"4111"}],"units":2}`),
		SensitiveFields: []string{"customer", "cards.pan"},
		Response:        json.RawMessage(`{"id":"R1","echo":{"customer":{"email":"ann@example.invalid","phone":5551234}},"note":"4111","units":2,"list":["ann@example.invalid","x"]}`),
	}
	b, err := json.Marshal(op)
	require.NoError(t, err)
	out := string(b)
	for _, secret := range []string{"ann@example.invalid", "5551234", "4111"} {
		require.NotContains(t, out, secret)
	}
	var got struct {
		Response map[string]any `json:"response"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, "R1", got.Response["id"], "what is not sensitive stays")
	require.EqualValues(t, 2, got.Response["units"])
	require.Equal(t, []any{opledger.Mask, "x"}, got.Response["list"])
	require.Equal(t, `{"id":"R1","echo":{"customer":{"email":"ann@example.invalid","phone":5551234}},"note":"4111","units":2,"list":["ann@example.invalid","x"]}`,
		string(op.Response), "the library keeps the saved response as it is")

	// Nothing sensitive: the response is passed through byte for byte.
	op.SensitiveFields = nil
	b, err = json.Marshal(op)
	require.NoError(t, err)
	require.Contains(t, string(b), `"response":{"id":"R1","echo":`)
}

// Sensitive paths are masked wherever the payload's shape puts them: in an
// array at the top or on the way, in a member whose name holds the dots,
// and nested below one.
func TestMaskPayloadShapes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		payload string
		paths   []string
		want    string
	}{
		{`[{"email":"e@x.invalid","n":1},{"email":"f@x.invalid"}]`, []string{"email"},
			`[{"email":"***","n":1},{"email":"***"}]`},
		{`{"customer.email":"e@x.invalid","customer":{"email":"f@x.invalid","id":7}}`, []string{"customer.email"},
			`{"customer":{"email":"***","id":7},"customer.email":"***"}`},
		{`{"a.b":{"c":"s1"},"a":{"b.c":"s2","b":{"c":"s3"}}}`, []string{"a.b.c"},
			`{"a":{"b":{"c":"***"},"b.c":"***"},"a.b":{"c":"***"}}`},
		{`{"rows":[[{"iban":"DE89"}],[{"iban":"FR76"}]],"keep":"x"}`, []string{"rows.iban"},
			`{"keep":"x","rows":[[{"iban":"***"}],[{"iban":"***"}]]}`},
		{`{"card":["4111","4242"]}`, []string{"card"}, `{"card":"***"}`},
		{`{"absent":1}`, []string{"email"}, `{"absent":1}`},
		{`"just a string"`, []string{"email"}, `"just a string"`},
	}
	for _, c := range cases {
		got := opledger.MaskPayload(json.RawMessage(c.payload), c.paths)
		require.JSONEq(t, c.want, string(got), c.payload)
	}

	// What the payload hides, an echo in the response does not show either.
	op := opledger.Operation{
		Payload:         json.RawMessage(`[{"customer.email":"erin@example.invalid"}]`),
		SensitiveFields: []string{"customer.email"},
		Response:        json.RawMessage(`{"to":"erin@example.invalid"}`),
	}
	b, err := json.Marshal(op)
	require.NoError(t, err)
	require.NotContains(t, string(b), "erin@example.invalid")
}

// Numbers are shown as they were written, however long, and a long
// integer that is sensitive is masked where the response echoes it; the
// response is masked at the payload's sensitive paths too.
func TestMaskKeepsNumbersAndMasksResponsePaths(t *testing.T) {
	t.Parallel()
	op := opledger.Operation{
		Key:             "k",
		Payload:         json.RawMessage(`{"acct":12345678901234567891,"order":98765432109876543219,"price":1.10,"customer":{"email":"e@x.invalid"}}`),
		SensitiveFields: []string{"acct", "customer"},
		Response: json.RawMessage(`{"id":"R1","account":12345678901234567891,"acct_str":"12345678901234567891","near":12345678901234567890,` +
			`"price":1.1,"customer":{"id":7,"tier":"gold"},"order":98765432109876543219}`),
	}
	b, err := json.Marshal(op)
	require.NoError(t, err)
	var got struct {
		Payload  json.RawMessage `json:"payload"`
		Response json.RawMessage `json:"response"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.JSONEq(t, `{"acct":"***","order":98765432109876543219,"price":1.10,"customer":"***"}`, string(got.Payload))
	require.Contains(t, string(got.Payload), `98765432109876543219`, "not rounded")
	require.JSONEq(t, `{"id":"R1","account":"***","acct_str":"***","near":12345678901234567890,"price":1.1,"customer":"***","order":98765432109876543219}`,
		string(got.Response), "echoes masked exactly, the sensitive path masked, the rest as written")
	require.Contains(t, string(got.Response), `12345678901234567890`)
}

// sensitive_fields is [] when there are none, never null: the same
// operation reads back from the store with an empty list, and a client
// should not see the field change type between a 201 and a 200.
func TestMarshalSensitiveFieldsNeverNull(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(opledger.Operation{Key: "k"})
	require.NoError(t, err)
	require.Contains(t, string(b), `"sensitive_fields":[]`)
}

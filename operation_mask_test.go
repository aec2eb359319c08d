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

package opledger

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/marker"
	"github.com/opledger/opledger/internal/store"
)

// TestSecretsMemo checks that a memo's secretText follows the operation it
// masks for: built once while the payload and the sensitive fields stay,
// built again when a repeat adds a field or a revision changes the
// payload (and so the fingerprint).
func TestSecretsMemo(t *testing.T) {
	op := &store.Operation{Fingerprint: "f1",
		Payload:         []byte(`{"email":"ana@example.invalid","iban":"ES7620770024003102575766"}`),
		SensitiveFields: []string{"email"}}
	var m secretsMemo
	first := m.of(op)
	if got := first.mask("to ana@example.invalid"); got != "to "+Mask {
		t.Fatalf("masked %q", got)
	}
	if again := m.of(op); again != first {
		t.Fatal("the memo built its secretText again for the same operation")
	}

	op.SensitiveFields = append(op.SensitiveFields, "iban")
	if got := m.of(op).mask("ES7620770024003102575766"); got != Mask {
		t.Fatalf("after a field was added, masked %q", got)
	}

	op.Fingerprint, op.Payload = "f2", []byte(`{"email":"bo@example.invalid","iban":"x"}`)
	st := m.of(op)
	if got := st.mask("to bo@example.invalid"); got != "to "+Mask {
		t.Fatalf("after a revision, masked %q", got)
	}
	if got := st.mask("to ana@example.invalid"); got != "to ana@example.invalid" {
		t.Fatalf("after a revision, the old value is still masked: %q", got)
	}

	var none secretsMemo
	if st := none.of(&store.Operation{Fingerprint: "f", Payload: []byte(`{"a":1}`)}); st != nil {
		t.Fatal("an operation without sensitive fields has something to mask")
	}
}

// TestAppendEarlierPayloadOnce: a payload is kept once, however it is
// spaced, and as written ("<" stays "<").
func TestAppendEarlierPayloadOnce(t *testing.T) {
	t.Parallel()
	var earlier json.RawMessage
	for _, p := range []string{`{"to": "a@example.com", "note": "<b>"}`, `{"to":"a@example.com","note":"<b>"}`, `{"to": "b@example.com"}`,
		` {"to": "a@example.com",  "note": "<b>"} `} {
		var err error
		earlier, err = appendEarlierPayload(earlier, json.RawMessage(p))
		require.NoError(t, err)
	}
	require.Equal(t, `[{"to":"a@example.com","note":"<b>"},{"to":"b@example.com"}]`, string(earlier))
}

// TestScrubTextWithoutSecretCopiesNothing checks that free text holding
// no sensitive value is kept as it is, without a copy or a run of the
// replacers (every timeline entry of an operation with sensitive fields
// is scrubbed), and that text holding one is still masked, a marker
// phrase kept whole.
func TestScrubTextWithoutSecretCopiesNothing(t *testing.T) {
	st := newSecretText(json.RawMessage(`{"card":"4111 1111 1111 1111","email":"ana@example.invalid","query":"api_key=s3cr3t"}`), nil,
		[]string{"card", "email", "query"})
	require.NotNil(t, st)
	for s, want := range map[string]string{
		"card 4111 1111 1111 1111 refused":                                 "card *** refused",
		"to ANA@example.invalid, " + marker.Exists:                         "to ***, " + marker.Exists,
		"GET /?api_key=s3cr3t: " + marker.LookupFailed + " api_key=s3cr3t": "GET /?***: " + marker.LookupFailed + " ***",
	} {
		require.Equal(t, want, scrubText(st, s))
	}
	for _, s := range []string{"claimed by proxy-1, dispatched", "HTTP 201 from the upstream", "x " + marker.Exists + " y"} {
		require.Equal(t, s, scrubText(st, s))
		// At most the text in ASCII lower case, for the e-mail address,
		// matched in any case, when the text has upper-case letters.
		require.LessOrEqual(t, testing.AllocsPerRun(50, func() { _ = scrubText(st, s) }), 1.0, "%q", s)
	}
}

package opledger_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(payload string) string {
		t.Helper()
		s, err := opledger.Fingerprint("crm.create", "crm", json.RawMessage(payload), 1)
		require.NoError(t, err)
		return s
	}
	base := fp(`{"a":1,"b":[1,2],"c":"x"}`)
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, base)
	// RFC 8785: key order, whitespace, number spelling and escapes don't matter.
	require.Equal(t, base, fp(` { "c" : "x", "b":[1, 2.0], "a":1e0 } `))
	require.Equal(t, base, fp(`{"a":1,"b":[1,2],"c":"\u0078"}`))
	// Content does.
	require.NotEqual(t, base, fp(`{"a":1,"b":[2,1],"c":"x"}`))
	require.NotEqual(t, base, fp(`{"a":2,"b":[1,2],"c":"x"}`))

	// The known value of one document, so a change of canonical form is noticed:
	// sha256 of {"action":"a","destination":"d","payload":{"n":1},"version":1}.
	got, err := opledger.Fingerprint("a", "d", json.RawMessage(`{"n":1.0}`), 1)
	require.NoError(t, err)
	require.Equal(t, "sha256:"+sha256Hex(`{"action":"a","destination":"d","payload":{"n":1},"version":1}`), got)

	_, err = opledger.Fingerprint("a", "d", json.RawMessage(`{"n":`), 1)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
}

// FuzzFingerprint checks that any input either fingerprints or fails with
// ErrInvalidInput, never panics, and that re-encoding a valid payload does
// not change its fingerprint.
func FuzzFingerprint(f *testing.F) {
	for _, seed := range []string{`{"a":1}`, `[1,2,3]`, `"x"`, `null`, `{"a":`, `1e400`, `{"\u00e9":"é"}`, `{"b":1,"a":{"d":[true,false,null],"c":0.1}}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		got, err := opledger.Fingerprint("act", "dest", json.RawMessage(payload), 1)
		if err != nil {
			if !errors.Is(err, opledger.ErrInvalidInput) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		var v any
		if json.Unmarshal([]byte(payload), &v) != nil {
			return
		}
		again, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return
		}
		got2, err := opledger.Fingerprint("act", "dest", again, 1)
		if err == nil && got2 != got {
			t.Fatalf("re-encoded payload changed the fingerprint: %s vs %s", payload, again)
		}
	})
}

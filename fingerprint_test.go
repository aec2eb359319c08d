package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
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

// Numbers a double cannot tell apart are different content: JCS alone
// would print both as the nearest double, and a changed account number
// would pass for a repeat. Any spelling of the same value is still the
// same content, and a number a double holds keeps its JCS form.
func TestFingerprintExactNumbers(t *testing.T) {
	t.Parallel()
	fp := func(payload string) string {
		t.Helper()
		s, err := opledger.Fingerprint("bank.transfer", "bank", json.RawMessage(payload), 1)
		require.NoError(t, err, payload)
		return s
	}
	for _, pair := range [][2]string{
		{`{"to":9007199254740993}`, `{"to":9007199254740992}`},
		{`{"to":12345678901234567890}`, `{"to":12345678901234567891}`},
		{`{"x":0.10000000000000001}`, `{"x":0.1}`},
		{`{"x":1e-400}`, `{"x":0}`},
		{`[-9007199254740993]`, `[-9007199254740992]`},
	} {
		require.NotEqual(t, fp(pair[0]), fp(pair[1]), "%s vs %s", pair[0], pair[1])
	}
	for _, same := range [][2]string{
		{`{"to":9007199254740993}`, `{"to":9007199254740993.0}`},
		{`{"to":9007199254740993}`, `{"to":90071992547409930e-1}`},
		{`{"x":0.10000000000000001,"a":1}`, `{"a":1,"x":1.0000000000000001e-1}`},
		{`{"x":1e-400}`, `{"x":10e-401}`},
		{`{"x":1.5}`, `{"x":15e-1}`},
		{`{"x":-0.0}`, `{"x":0}`},
		{`{"s":"9007199254740993","n":9007199254740993}`, `{"n":9007199254740993,"s":"9007199254740993"}`},
	} {
		require.Equal(t, fp(same[0]), fp(same[1]), "%s vs %s", same[0], same[1])
	}
	// A string that spells the stand-in of an exact number is a string.
	require.NotEqual(t, fp(`{"n":9007199254740993}`), fp(`{"n":"9007199254740993e0"}`))
	// Numbers a double holds keep their JCS form (fingerprints recorded
	// before exact numbers are unchanged).
	require.Equal(t, "sha256:"+sha256Hex(`{"action":"bank.transfer","destination":"bank","payload":[4503599627370497,0.1,1e+21],"version":1}`),
		fp(`[4503599627370497, 0.1, 1000000000000000000000]`))
	for _, out := range []string{`{"n":1e99999999999}`, `{"n":1e400}`, `{"n":-1.8e308}`} {
		_, err := opledger.Fingerprint("a", "d", json.RawMessage(out), 1)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "beyond a double's range: %s", out)
	}
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
		dec := json.NewDecoder(strings.NewReader(payload))
		dec.UseNumber() // exactly: a float64 would round large integers, and change the content
		if dec.Decode(&v) != nil || dec.More() {
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

// TestFingerprintErrorsValueFree: a payload the fingerprint cannot
// canonicalize is refused in words that repeat none of its values or
// member names, which may be sensitive (a card number, an e-mail address):
// by Fingerprint, by a recorded intent (the API's PUT answers with this
// text) and by a workflow's steps.
func TestFingerprintErrorsValueFree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	for _, c := range []struct{ payload, secret, reason string }{
		{`{"card":1e99999}`, "99999", "a number is beyond the range of a double"},
		{`{"card":-4111111111111111e400}`, "4111111111111111", "a number is beyond the range of a double"},
		{`{"card":[1,4111111111111111e99999999999]}`, "4111111111111111", "a number has an exponent out of range (beyond ±1000000000)"},
		{`{"ana@example.invalid":1,"ana@example.invalid":2}`, "ana@", "an object has two members of the same name"},
		{`{"pin":"4711\ud800"}`, "4711", "a string holds text that is not valid Unicode (invalid UTF-8 or an escaped lone surrogate)"},
		{"{\"pin\":\"4711\xff\"}", "4711", "a string holds text that is not valid Unicode (invalid UTF-8 or an escaped lone surrogate)"},
	} {
		_, err := opledger.Fingerprint("a", "d", json.RawMessage(c.payload), 1)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, c.payload)
		require.EqualError(t, err, "invalid input: payload cannot be canonicalized: "+c.reason, c.payload)

		_, _, err = l.Record(ctx, opledger.Intent{Key: "k1", Action: "a", Destination: "d", Payload: json.RawMessage(c.payload),
			SensitiveFields: []string{"card", "pin"}})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, c.payload)
		require.NotContains(t, err.Error(), c.secret, c.payload)

		_, _, err = l.PutWorkflow(ctx, "w1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "a", Action: "a", Destination: "d", Payload: json.RawMessage(c.payload)}}})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, c.payload)
		require.NotContains(t, err.Error(), c.secret, c.payload)
	}
}

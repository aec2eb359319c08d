package httpapi

import (
	"reflect"
	"testing"

	"github.com/opledger/opledger"
)

// bodyTypes make a fresh value of each type a route decodes its body into.
var bodyTypes = []func() any{
	func() any { return new(intentBody) }, func() any { return new(claimBody) },
	func() any { return new(attemptBody) }, func() any { return new(releaseBody) },
	func() any { return new(extendLeaseBody) }, func() any { return new(outcomeBody) },
	func() any { return new(reconcileBody) }, func() any { return new(opledger.Decision) },
	func() any { return new(opledger.Approval) }, func() any { return new(opledger.Revision) },
	func() any { return new(opledger.Event) }, func() any { return new(opledger.WorkflowSpec) },
	func() any { return new(opledger.WorkflowCancel) },
}

// decodeSeeds are bodies decodeJSON takes at once and bodies it leaves
// to decodeStrict: case, duplicates, escapes, unknown and nested members,
// type errors, trailing data, malformed text.
var decodeSeeds = []string{
	`{"worker":"w","lease_seconds":30,"intent":{"action":"noop","destination":"bench","payload":{"order":"A-1","amount":120}},"dispatch":true}`,
	`{"fencing_token":1,"outcome":"succeeded","destination_ref":"noop","response":{"a":[1,2,{"b":null}]}}`,
	`{"fencing_token":1,"outcome":"succeeded","fencing_token":2}`,
	`{"Worker":"w"}`, `{"WORKER":"w"}`, `{"w\u006frker":"w"}`, `{"nope":1}`,
	`{"intent":{"action":"a","ACTION":"b"}}`, `{"intent":{"action":"a","zzz":1}}`,
	`{"intent":[1,2]}`, `{"intent":"x"}`, `{"intent":null}`, `{"lease_seconds":"x"}`,
	`{"lease_seconds":1e999}`, `{"lease_seconds":12}  `, `{"lease_seconds":12} x`, `{"lease_seconds":12}}`,
	`{"worker":"w",}`, `{"worker":"w"`, `{"worker" "w"}`, `{"worker":tru}`, `{"worker":"w\"}`,
	`{}`, ` { } `, `{"looked_at":"2026-12-04T10:00:00Z","found":true}`, `{"looked_at":12}`,
	`{"looked_at":"yesterday"}`, `{"steps":[{"name":"a","action":"x","destination":"d","payload":{}}]}`,
	`{"steps":[{"name":"a","nope":1}]}`, `{"steps":{"name":"a"}}`, `{"steps":[[1]]}`,
	`{"payload":{"Payload":1,"payload":2}}`, `{"fencing_token":-0.5e+3}`, `{"fencing_token":01}`,
	`{"response":[{"x":"}"},"]"]}`, `{"response":{"a":"\\"}}`, `{"error":"a\\"}`,
}

// checkDecodeSame fails unless decodeJSON decodes body into each body
// type as decodeStrict does: the same value, or the same refusal.
func checkDecodeSame(t *testing.T, body []byte) {
	for _, mk := range bodyTypes {
		fast, strict := mk(), mk()
		errFast, errStrict := decodeJSON(body, fast), decodeStrict(body, strict)
		if (errFast == nil) != (errStrict == nil) || errFast != nil && errFast.Error() != errStrict.Error() {
			t.Fatalf("%T of %q: decodeJSON says %v, decodeStrict %v", fast, body, errFast, errStrict)
		}
		if errFast == nil && !reflect.DeepEqual(fast, strict) {
			t.Fatalf("%T of %q: decodeJSON gives %+v, decodeStrict %+v", fast, body, fast, strict)
		}
	}
}

// TestDecodeJSONAsStrict checks decodeJSON's quick path against the full
// one on bodies of both kinds.
func TestDecodeJSONAsStrict(t *testing.T) {
	t.Parallel()
	for _, s := range decodeSeeds {
		checkDecodeSame(t, []byte(s))
	}
	if _, ok := plainMembers([]byte(decodeSeeds[0]), reflect.TypeFor[*claimBody]()); !ok {
		t.Fatal("a claim's plain body is not taken at once")
	}
}

// FuzzDecodeJSONAsStrict checks it on any body.
func FuzzDecodeJSONAsStrict(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkDecodeSame)
}

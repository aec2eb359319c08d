package opledger_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/opledger/opledger"
)

// FuzzParseRulesAndMap parses arbitrary rule files and maps arbitrary
// event payloads with them: both fail, if at all, with ErrInvalidInput
// (never a panic); what a rule maps is a valid key and a payload the
// ledger can fingerprint; and a refused event's error repeats none of
// its payload's values (errors name the path, never the value).
func FuzzParseRulesAndMap(f *testing.F) {
	f.Add(ruleYAML, `{"submission_id":"847","units":2,"rev":3,"lines":[{"sku":"A"}],"applicant":{"name":"Ana","email":"ana@example.com"}}`)
	f.Add(ruleYAML, `{"submission_id":"ana@example.invalid","units":2,"rev":3,"lines":[],"applicant":null}`)
	f.Add(ruleYAML, `{"submission_id":{"secret-object-value":1},"units":2}`)
	f.Add(ruleYAML, `{"submission_id":"8 47 secret value","units":2,"rev":3,"lines":["x"],"applicant":1}`)
	f.Add(ruleYAML, `{"submission_id":"847","units":1e400,"rev":3,"lines":["x"],"applicant":1}`)
	f.Add(`
rules:
  - name: shop
    type: submission.accepted
    object: {id: "{data.shop}-{data.id}", order_by: data.version}
    operations:
      - key: "order:{data.id}"
        action: a
        destination: d
        payload: "{data}"
        sensitive_fields: [card]
`, `{"shop":"s1","id":"o1","version":"1e999999","card":"4111"}`)
	f.Add("rules: [{name: x, type: submission.accepted, operations: [{key: \"{data.k}\", action: a, destination: d, payload: {a: .nan}}]}]", `{"k":"v"}`)
	f.Add("rules:\n  - name: x\n    type: submission.accepted\n    operations:\n      - {key: \"k:{event.id}\", action: \"a\\0\", destination: d}\n", `null`)
	f.Add("rules: [{name: \"\", type: t}]", `[]`)
	f.Add("rules: &a [*a]", `{}`)
	f.Add("", `{}`)
	f.Fuzz(func(t *testing.T, doc, payload string) {
		rules, err := opledger.ParseRules([]byte(doc))
		if err != nil {
			if !errors.Is(err, opledger.ErrInvalidInput) {
				t.Fatalf("ParseRules: %v does not match ErrInvalidInput", err)
			}
			return
		}
		for _, r := range rules.List() {
			ev := opledger.Event{Source: "forms", EventID: "e1", Type: r.Type, Payload: json.RawMessage(payload)}
			if r.Source != "" {
				ev.Source = r.Source
			}
			m, err := rules.Map(ev)
			if err != nil {
				if !errors.Is(err, opledger.ErrInvalidInput) && !errors.Is(err, opledger.ErrEventPayloadTooLarge) {
					t.Fatalf("Map: %v does not match ErrInvalidInput", err)
				}
				for _, v := range payloadStrings(payload) {
					if len(v) >= 8 && strings.Contains(err.Error(), v) && !strings.Contains(doc, v) {
						t.Fatalf("Map's error %q repeats the payload's value %q", err, v)
					}
				}
				continue
			}
			for i, in := range m.Intents {
				if err := opledger.ValidateKey(in.Key); err != nil {
					t.Fatalf("intent %d: key %q: %v", i, in.Key, err)
				}
				if !json.Valid(in.Payload) || !utf8.Valid(in.Payload) {
					t.Fatalf("intent %d: payload %q", i, in.Payload)
				}
				if _, err := opledger.Fingerprint(in.Action, in.Destination, in.Payload, 1); err != nil {
					t.Fatalf("intent %d: payload %s: %v", i, in.Payload, err)
				}
				if u := m.Updates[i]; u != nil && (opledger.ValidateKey(u.Key) != nil || !u.RequiresApproval) {
					t.Fatalf("intent %d: update %+v", i, u)
				}
			}
		}
	})
}

// payloadStrings returns the strings and numbers in a JSON document, as
// text; none when it is not JSON.
func payloadStrings(doc string) []string {
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case json.Number:
			out = append(out, x.String())
		case []any:
			for _, el := range x {
				walk(el)
			}
		case map[string]any:
			for _, el := range x {
				walk(el)
			}
		}
	}
	walk(v)
	return out
}

package opledger_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

const ruleYAML = `
rules:
  - name: intake
    source: forms
    type: submission.accepted
    object: {kind: submission, id: "{data.submission_id}", order_by: event.occurred_at}
    operations:
      - key: "intake:{data.submission_id}:create"
        action: crm.create_inquiry
        destination: crm
        owner: intake-team
        requires_approval: true
        payload:
          submission: "{data.submission_id}"
          units: "{data.units}"
          first_line: "{data.lines.0}"
          label: "S{data.submission_id} x{data.units} {{literal}}"
          applicant: "{data.applicant}"
          fixed: [1, true, null, "plain"]
          when: "{event.occurred_at}"
        sensitive_fields: [applicant.email]
        update_key: "intake:{data.submission_id}:update:{data.rev}"
`

func TestParseRulesAndMap(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(ruleYAML))
	require.NoError(t, err)
	require.Len(t, rules.List(), 1)
	at := time.Date(2026, 3, 1, 9, 30, 0, 0, time.FixedZone("CET", 3600))
	m, err := rules.Map(opledger.Event{Source: "forms", EventID: "e1", Type: "submission.accepted", OccurredAt: at,
		Payload: json.RawMessage(`{"submission_id":"847","units":2,"rev":3,"lines":[{"sku":"A"}],"applicant":{"name":"Ana","email":"ana@example.com"}}`)})
	require.NoError(t, err)
	require.Equal(t, "intake", m.Rule)
	require.Equal(t, "submission:847", m.ObjectKey)
	require.Equal(t, "2026-03-01T08:30:00Z", m.OrderValue)
	require.Len(t, m.Intents, 1)
	in := m.Intents[0]
	require.Equal(t, "intake:847:create", in.Key)
	require.Equal(t, "crm.create_inquiry", in.Action)
	require.Equal(t, "intake-team", in.Owner)
	require.True(t, in.RequiresApproval)
	require.Equal(t, "forms:e1", in.SourceEvent)
	require.Equal(t, []string{"applicant.email"}, in.SensitiveFields)
	require.JSONEq(t, `{"submission":"847","units":2,"first_line":{"sku":"A"},"label":"S847 x2 {literal}",
		"applicant":{"name":"Ana","email":"ana@example.com"},"fixed":[1,true,null,"plain"],"when":"2026-03-01T08:30:00Z"}`, string(in.Payload),
		"a whole placeholder keeps its JSON type")
	require.Equal(t, "intake:847:update:3", m.Updates[0].Key)
	require.True(t, m.Updates[0].RequiresApproval)

	// No rule for the type: an empty mapping.
	m, err = rules.Map(opledger.Event{Source: "forms", EventID: "e2", Type: "other"})
	require.NoError(t, err)
	require.Empty(t, m.Rule)
	require.Empty(t, m.Intents)
	// The source must match too.
	m, err = rules.Map(opledger.Event{Source: "shop", EventID: "e2", Type: "submission.accepted"})
	require.NoError(t, err)
	require.Empty(t, m.Rule)
}

func TestMapRefusals(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(ruleYAML))
	require.NoError(t, err)
	at := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	cases := []struct {
		name, payload, want string
		noTime              bool
	}{
		{"missing field", `{"units":2,"rev":1,"lines":[1]}`, `object.id: data.submission_id is missing`, false},
		{"not a scalar in a key", `{"submission_id":{"a":1},"units":2,"rev":1,"lines":[1]}`, `data.submission_id is not a string, number or boolean`, false},
		{"null in a key", `{"submission_id":null,"units":2,"rev":1,"lines":[1]}`, `data.submission_id is null`, false},
		{"index out of range", `{"submission_id":"1","units":2,"rev":1,"lines":[],"applicant":{}}`, `data.lines.0 is missing`, false},
		{"personal data in the key", `{"submission_id":"ana@example.com","units":2,"rev":1,"lines":[1]}`, `object.id: the produced object key is invalid`, false},
		{"space in the key", `{"submission_id":"a b","units":2,"rev":1,"lines":[1]}`, `the produced object key is invalid`, false},
		{"no occurred_at to order by", `{"submission_id":"1","units":2,"rev":1,"lines":[1]}`, `object.order_by: event.occurred_at is missing`, true},
		{"payload not an object", `[1,2]`, `object.id: data.submission_id is missing`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := opledger.Event{Source: "forms", EventID: "e1", Type: "submission.accepted", OccurredAt: at, Payload: json.RawMessage(tc.payload)}
			if tc.noTime {
				ev.OccurredAt = time.Time{}
			}
			_, err := rules.Map(ev)
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			var re *opledger.RuleError
			require.True(t, errors.As(err, &re), "%v", err)
			require.Equal(t, "intake", re.Rule)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "ana@example.com", "values never appear in errors")
			require.NotContains(t, err.Error(), "a b")
		})
	}
}

// Two operations of one event that produce the same key would be one
// operation written twice; the event is refused, naming both.
func TestMapRefusesOneKeyTwice(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: twice
    source: forms
    type: t
    object: {id: data.a, order_by: event.id}
    operations:
      - {key: "k:{data.a}", action: a, destination: d, payload: {n: 1}}
      - {key: "k:{data.b}", action: a, destination: d, payload: {n: 2}, update_key: "k:{data.u}"}
      - {key: "k:{data.c}", action: a, destination: d, payload: {n: 3}, update_key: "u:{data.c}"}
`))
	require.NoError(t, err)
	cases := []struct{ payload, want string }{
		{`{"a":"1","b":"1","c":"3","u":"u"}`, `rule "twice": operations[1].key: produced the same key as operations[0].key`},
		{`{"a":"1","b":"2","c":"1","u":"u"}`, `rule "twice": operations[2].key: produced the same key as operations[0].key`},
		{`{"a":"1","b":"2","c":"3","u":"1"}`, `rule "twice": operations[1].update_key: produced the same key as operations[0].key`},
		{`{"a":"1","b":"2","c":"3","u":"2"}`, `rule "twice": operations[1].update_key: produced the same key as operations[1].key`},
		{`{"a":"1","b":"2","c":"3","u":"u"}`, ``},
	}
	for _, tc := range cases {
		_, err := rules.Map(opledger.Event{Source: "forms", EventID: "e1", Type: "t", Payload: json.RawMessage(tc.payload)})
		if tc.want == "" {
			require.NoError(t, err, tc.payload)
			continue
		}
		require.ErrorIs(t, err, opledger.ErrInvalidInput, tc.payload)
		require.EqualError(t, err, tc.want, tc.payload)
	}
}

func TestParseRulesRefusesBadRules(t *testing.T) {
	t.Parallel()
	op := "\n    operations:\n      - {key: \"k:{data.id}\", action: a, destination: d}"
	cases := map[string]struct{ yaml, want string }{
		"unknown field":         {"rules:\n  - name: r\n    type: t\n    colour: red" + op, "field colour not found"},
		"unknown op field":      {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, retry: 3}", "field retry not found"},
		"empty":                 {"", "empty"},
		"two documents":         {"rules: []\n---\nrules: []", "one YAML document"},
		"no name":               {"rules:\n  - type: t" + op, `rule "#1": name: is required`},
		"same name twice":       {"rules:\n  - name: r\n    type: t" + op + "\n  - name: r\n    type: u" + op, "name is used by another rule"},
		"no type":               {"rules:\n  - name: r" + op, "type: is required"},
		"no operations":         {"rules:\n  - name: r\n    type: t", "at least one operation"},
		"no action":             {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, destination: d}", "operations[0].action"},
		"no key":                {"rules:\n  - name: r\n    type: t\n    operations:\n      - {action: a, destination: d}", "operations[0].key: is required"},
		"unknown root":          {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{payload.id}\", action: a, destination: d}", "must start with data, event"},
		"unclosed brace":        {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.id\", action: a, destination: d}", "unclosed '{'"},
		"bad payload template":  {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, payload: {x: \"{data..id}\"}}", "payload: x: placeholder"},
		"order without id":      {"rules:\n  - name: r\n    type: t\n    object: {order_by: data.v}" + op, "object.id: is required"},
		"id without order":      {"rules:\n  - name: r\n    type: t\n    object: {id: data.id}" + op, "object.order_by: is required"},
		"update key = key":      {"rules:\n  - name: r\n    type: t\n    object: {id: data.id, order_by: data.v}\n    operations:\n      - {key: \"k:{data.id}\", update_key: \"k:{data.id}\", action: a, destination: d}", "must differ from key"},
		"update key, no object": {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.id}\", update_key: \"u:{data.id}\", action: a, destination: d}", "need the rule's object"},
		"same key twice":        {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.id}\", action: a, destination: d}\n      - {key: \"k:{data.id}\", action: b, destination: d}", "operations[1].key: is the key of operations[0] too"},
		"covered by earlier":    {"rules:\n  - name: r\n    type: t" + op + "\n  - name: s\n    source: forms\n    type: t" + op, `rule "s": never applies: rule "r", before it, takes every event of type "t" from any source`},
		"same source and type":  {"rules:\n  - name: r\n    source: forms\n    type: t" + op + "\n  - name: s\n    source: forms\n    type: t" + op, `from source "forms"`},
		// No event has such a source (sources take the key syntax): the
		// rule would never apply.
		"source outside the key syntax": {"rules:\n  - name: r\n    source: \"shop ify\"\n    type: t" + op, `rule "r": source: takes an event source, in the key syntax (no event could match): key may contain only letters`},
		"bad object kind":               {"rules:\n  - name: r\n    type: t\n    object: {kind: \"a b\", id: data.id, order_by: data.v}" + op, "object.kind"},
		// Names recorded with every event and operation the rule produces:
		// text PostgreSQL cannot store is refused when the rules load.
		"NUL in a name":                     {"rules:\n  - name: \"r\\0\"\n    type: t" + op, `rule "r\x00": name: must be UTF-8 text without NUL bytes`},
		"NUL in a type":                     {"rules:\n  - name: r\n    type: \"t\\0\"" + op, `rule "r": type: must be UTF-8`},
		"NUL in a source":                   {"rules:\n  - name: r\n    source: \"s\\0\"\n    type: t" + op, `rule "r": source: must be UTF-8`},
		"NUL in an action":                  {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: \"a\\0\", destination: d}", `rule "r": operations[0].action: must be UTF-8`},
		"NUL in an update":                  {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, update_key: u, update_action: \"a\\0\", action: a, destination: d}", `rule "r": operations[0].update_action: must be UTF-8`},
		"NUL in a destination":              {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: \"d\\0\"}", `rule "r": operations[0].destination: must be UTF-8`},
		"NUL in an owner":                   {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, owner: \"o\\0\"}", `rule "r": operations[0].owner: must be UTF-8`},
		"destination as free text":          {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: \"ana@example.com\"}", `rule "r": operations[0].destination: destination names take letters, digits`},
		"JSON pointer as a sensitive field": {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, sensitive_fields: [/to]}", `rule "r": operations[0].sensitive_fields: "/to" is a JSON pointer: entries are dotted paths`},
		"NUL in sensitive field":            {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, sensitive_fields: [\"x\\0\"]}", `rule "r": operations[0].sensitive_fields: entries must be`},
		"misspelt sensitive field":          {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, payload: {email: \"{data.email}\"}, sensitive_fields: [emial]}", `rule "r": operations[0].sensitive_fields: "emial" names nothing in the payload template`},
		"sensitive field into text":         {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, payload: {to: \"<{data.email}>\"}, sensitive_fields: [to.x]}", `"to.x" names nothing`},
		"sensitive field, no payload":       {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, sensitive_fields: [to]}", `"to" names nothing`},
		"sensitive field, empty segment":    {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, payload: {email: x}, sensitive_fields: [email.]}", `"email." has an empty segment`},
		// A key, update key, object id or ordering value that takes a
		// value an operation marks sensitive would show it unmasked.
		"key from a sensitive field":        {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.name}:x\", action: a, destination: d, payload: {name: \"{data.name}\"}, sensitive_fields: [name]}", `rule "r": operations[0].key: takes {data.name}, which operations[0].sensitive_fields marks sensitive (name)`},
		"key from under a sensitive object": {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.customer.email}\", action: a, destination: d, payload: {customer: \"{data.customer}\"}, sensitive_fields: [customer]}", `takes {data.customer.email}, which operations[0].sensitive_fields marks sensitive (customer)`},
		"key from the object of a field":    {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.customer}\", action: a, destination: d, payload: {c: \"{data.customer}\"}, sensitive_fields: [c.email]}", `takes {data.customer}, which operations[0].sensitive_fields marks sensitive (c.email)`},
		"key from a field in text":          {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.name}\", action: a, destination: d, payload: {note: \"Dear {data.name}\"}, sensitive_fields: [note]}", `operations[0].key: takes {data.name}`},
		"key from a field in an array":      {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.pin}\", action: a, destination: d, payload: {items: [{pin: \"{data.pin}\"}]}, sensitive_fields: [items.pin]}", `operations[0].key: takes {data.pin}`},
		"key from an element by index":      {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.items.0.card}\", action: a, destination: d, payload: {items: \"{data.items}\"}, sensitive_fields: [items.card]}", `operations[0].key: takes {data.items.0.card}, which operations[0].sensitive_fields marks sensitive (items.card)`},
		"key from a dotted member":          {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.mail}\", action: a, destination: d, payload: {\"a.mail\": \"{data.mail}\"}, sensitive_fields: [a.mail]}", `operations[0].key: takes {data.mail}`},
		"key marked by another operation":   {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.email}\", action: a, destination: d}\n      - {key: \"m:{data.id}\", action: b, destination: d, payload: {to: \"{data.email}\"}, sensitive_fields: [to]}", `operations[0].key: takes {data.email}, which operations[1].sensitive_fields marks sensitive (to)`},
		"update key from a sensitive field": {"rules:\n  - name: r\n    type: t\n    object: {id: data.id, order_by: data.v}\n    operations:\n      - {key: \"k:{data.id}\", update_key: \"u:{data.email}\", action: a, destination: d, payload: {to: \"{data.email}\"}, sensitive_fields: [to]}", `operations[0].update_key: takes {data.email}`},
		"object id from a sensitive field":  {"rules:\n  - name: r\n    type: t\n    object: {id: data.email, order_by: data.v}\n    operations:\n      - {key: \"k:{data.id}\", action: a, destination: d, payload: {to: \"{data.email}\"}, sensitive_fields: [to]}", `object.id: takes {data.email}`},
		// A sensitive value copied where no sensitive_fields path can
		// name it would be shown unmasked.
		"sensitive value as the payload":   {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.id}\", action: a, destination: d, payload: {to: \"{data.email}\"}, sensitive_fields: [to]}\n      - {key: \"m:{data.id}\", action: b, destination: d, payload: \"Dear {data.email}\"}", `rule "r": operations[1].payload: the payload itself takes {data.email}, which operations[0].sensitive_fields marks sensitive (to)`},
		"sensitive value in a member \"\"": {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: \"k:{data.id}\", action: a, destination: d, payload: {to: \"{data.email}\", \"\": \"{data.email}\"}, sensitive_fields: [to]}", `rule "r": operations[0].payload: payload member "" takes {data.email}`},
		// JSON has no NaN or infinities: such a payload could never be
		// encoded, so every matching event would be refused.
		"NaN in a payload":       {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, payload: {x: [1, .nan]}}", `rule "r": operations[0].payload: x: 1: NaN is not a JSON number`},
		"infinity in a payload":  {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, payload: {x: .inf}}", `rule "r": operations[0].payload: x: +Inf is not a JSON number`},
		"-infinity as a payload": {"rules:\n  - name: r\n    type: t\n    operations:\n      - {key: k, action: a, destination: d, payload: -.Inf}", `rule "r": operations[0].payload: -Inf is not a JSON number`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := opledger.ParseRules([]byte(tc.yaml))
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// A payload field that copies a value the rule marks sensitive is
// masked too, as a workflow step's field filled from an earlier step's
// masked value is: the value whole, inside text, in an object copied
// whole (its member), in an array, and in another operation of the
// rule, and in the update operation of a correction.
func TestMapMasksCopiedSensitiveValues(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: intake
    type: submission.accepted
    object: {id: data.submission_id, order_by: data.rev}
    operations:
      - key: "intake:{data.submission_id}:create"
        action: crm.create
        destination: crm
        payload:
          applicant: "{data.applicant}"
          copy: "{data.applicant.email}"
          greeting: "Hello {data.applicant.email}"
          again: "{data.applicant}"
          lines: [{to: "{data.applicant}"}]
          plain: "{data.applicant.name}"
        sensitive_fields: [applicant.email]
        update_key: "intake:{data.submission_id}:update:{data.rev}"
      - key: "intake:{data.submission_id}:welcome"
        action: email.send
        destination: email
        payload: {subject: "Welcome {data.applicant.name}", to: "<{data.applicant.email}>"}
`))
	require.NoError(t, err)
	m, err := rules.Map(opledger.Event{Source: "forms", EventID: "e1", Type: "submission.accepted",
		Payload: json.RawMessage(`{"submission_id":"1","rev":1,"applicant":{"name":"Vic","email":"vic.secret@example.invalid"}}`)})
	require.NoError(t, err)
	require.Len(t, m.Intents, 2)
	want := []string{"applicant.email", "again.email", "copy", "greeting", "lines.to.email"}
	require.Equal(t, want, m.Intents[0].SensitiveFields, "the fields given, then those that copy a sensitive value")
	require.Equal(t, want, m.Updates[0].SensitiveFields, "a correction masks the same")
	require.Equal(t, []string{"to"}, m.Intents[1].SensitiveFields, "marked by another operation of the rule")
	for i, in := range m.Intents {
		shown := string(opledger.MaskPayload(in.Payload, in.SensitiveFields))
		require.NotContains(t, shown, "vic.secret", "intent %d", i)
	}
	require.JSONEq(t, `{"applicant":{"name":"Vic","email":"***"},"copy":"***","greeting":"***","again":{"name":"Vic","email":"***"},
		"lines":[{"to":{"name":"Vic","email":"***"}}],"plain":"Vic"}`, string(opledger.MaskPayload(m.Intents[0].Payload, m.Intents[0].SensitiveFields)),
		"only what holds the sensitive value")
	require.JSONEq(t, `{"subject":"Welcome Vic","to":"***"}`, string(opledger.MaskPayload(m.Intents[1].Payload, m.Intents[1].SensitiveFields)))

	// What the rule lists is as given.
	require.Equal(t, []string{"applicant.email"}, rules.List()[0].Operations[0].SensitiveFields)
	require.Empty(t, rules.List()[0].Operations[1].SensitiveFields)
}

func TestNewRulesInGo(t *testing.T) {
	t.Parallel()
	rules, err := opledger.NewRules(opledger.Rule{Name: "paid", Type: "orders/paid", Operations: []opledger.OperationRule{{
		Key: "pay:{event.id}", Action: "email.send", Destination: "email",
		Payload: map[string]any{"order": "{data.id}", "tags": []any{"{event.type}"}},
	}}})
	require.NoError(t, err)
	m, err := rules.Map(opledger.Event{Source: "shop", EventID: "p1", Type: "orders/paid", Payload: json.RawMessage(`{"id":12345678901234567890}`)})
	require.NoError(t, err)
	require.Equal(t, "pay:p1", m.Intents[0].Key)
	require.JSONEq(t, `{"order":12345678901234567890,"tags":["orders/paid"]}`, string(m.Intents[0].Payload), "big numbers stay exact")
	require.Nil(t, m.Updates[0])
	_, err = rules.Map(opledger.Event{Source: "shop", EventID: strings.Repeat("x", 300), Type: "orders/paid"})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
}

// Rules built in Go are checked the same way: a payload value JSON cannot
// encode is refused when the rules are compiled, not on every event.
func TestNewRulesRefusesNonFiniteNumbers(t *testing.T) {
	t.Parallel()
	for _, v := range []any{math.NaN(), math.Inf(1), float32(math.Inf(-1)), map[string]any{"n": []any{math.NaN()}}} {
		_, err := opledger.NewRules(opledger.Rule{Name: "r", Type: "t", Operations: []opledger.OperationRule{{
			Key: "k", Action: "a", Destination: "d", Payload: map[string]any{"x": v}}}})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "%v", v)
		var re *opledger.RuleError
		require.True(t, errors.As(err, &re), "%v", err)
		require.Equal(t, "r", re.Rule)
		require.Equal(t, "operations[0].payload", re.Field)
		require.Contains(t, err.Error(), "is not a JSON number")
	}
}

// orderRule orders the versions of an object by a payload field.
const orderRule = `
rules:
  - name: order-updated
    type: orders/updated
    object: {kind: order, id: data.id, order_by: data.version}
    operations:
      - key: "order:{data.id}:sync"
        action: erp.upsert_order
        destination: erp
        payload: {order: "{data.id}", version: "{data.version}", total: "{data.total}"}
`

// Text PostgreSQL cannot store (a NUL byte) in the values an event
// produces outside its payload is refused while mapping, naming the field,
// so that both stores refuse it alike and nothing is recorded.
func TestMapRefusesUnstorableText(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(orderRule))
	require.NoError(t, err)
	cases := []struct{ payload, field, want string }{
		{`{"id":"1","version":"a\u0000","total":1}`, "object.order_by", "UTF-8 text without NUL bytes"},
		{`{"id":"1","version":"\u0000","total":1}`, "object.order_by", "UTF-8 text without NUL bytes"},
		{`{"id":"1\u0000","version":2,"total":1}`, "object.id", "the produced object key is invalid"},
	}
	for _, tc := range cases {
		_, err := rules.Map(opledger.Event{Source: "shop", EventID: "e1", Type: "orders/updated", Payload: json.RawMessage(tc.payload)})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, tc.payload)
		var re *opledger.RuleError
		require.True(t, errors.As(err, &re), "%s: %v", tc.payload, err)
		require.Equal(t, "order-updated", re.Rule)
		require.Equal(t, tc.field, re.Field, tc.payload)
		require.Contains(t, err.Error(), tc.want)
		require.NotContains(t, err.Error(), "\x00")
	}
	m, err := rules.Map(opledger.Event{Source: "shop", EventID: "e1", Type: "orders/updated", Payload: json.RawMessage(`{"id":"1","version":"a\u00e9","total":1}`)})
	require.NoError(t, err, "other text is taken")
	require.Equal(t, "a\u00e9", m.OrderValue)
}

// A payload the ledger cannot canonicalise (a number beyond float64) is
// refused naming the rule and the field, never the value.
func TestMapRefusesUncanonicalizablePayload(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(orderRule))
	require.NoError(t, err)
	for _, total := range []string{"1e400", "-1e400", `{"big":[1e400]}`} {
		_, err := rules.Map(opledger.Event{Source: "shop", EventID: "e1", Type: "orders/updated",
			Payload: json.RawMessage(`{"id":"1","version":2,"total":` + total + `}`)})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, total)
		var re *opledger.RuleError
		require.True(t, errors.As(err, &re), "%v", err)
		require.EqualError(t, err, `rule "order-updated": operations[0].payload: invalid input: payload cannot be canonicalized: a number is beyond the range of a double`)
		require.ErrorIs(t, re.Err, opledger.ErrInvalidInput, "the cause still matches, as the canonicaliser's did")
		require.NotContains(t, err.Error(), "1e400", "values never appear in errors")
	}
}

// TestParseRulesNamesTheLine: a rule refused when the rules are loaded
// is named with the line its entry begins on, as the other configuration
// files' errors are; the rule's name alone left a long file to be
// searched, and "#2" for a rule without a name said nothing of where.
func TestParseRulesNamesTheLine(t *testing.T) {
	t.Parallel()
	const good = "rules:\n  - name: a\n    type: t\n    operations:\n      - {key: \"k:{data.id}\", action: x, destination: d}\n"
	for _, tc := range []struct{ yaml, want string }{
		{good + "  - name: b\n    type: u\n    operations:\n      - {key: \"k:{dat.id}\", action: x, destination: d}\n",
			`line 6: rule "b": operations[0].key: placeholder {dat.id} must start with data, event`},
		{good + "  - name: a\n    type: u\n    operations:\n      - {key: \"m:{data.id}\", action: x, destination: d}\n",
			`line 6: rule "a": name is used by another rule`},
		{good + "  - type: u\n    operations:\n      - {key: \"m:{data.id}\", action: x, destination: d}\n",
			`line 6: rule "#2": name: is required`},
		{good + "  - name: c\n    type: t\n    operations:\n      - {key: \"m:{data.id}\", action: x, destination: d}\n",
			`line 6: rule "c": never applies: rule "a", before it, takes every event of type "t" from any source`},
	} {
		_, err := opledger.ParseRules([]byte(tc.yaml))
		require.EqualError(t, err, tc.want, tc.yaml)
		var re *opledger.RuleError
		require.ErrorAs(t, err, &re)
		require.Equal(t, 6, re.Line)
	}
	// Rules given in Go have no line.
	_, err := opledger.NewRules(opledger.Rule{Type: "t"})
	require.EqualError(t, err, `rule "#1": name: is required`)
}

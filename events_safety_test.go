package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// spellingRules write a number into a key, an object id and a payload
// text, and take it whole into a payload field.
const spellingRules = `
rules:
  - name: intake
    type: accepted
    object: {kind: submission, id: data.n, order_by: data.v}
    operations:
      - key: "intake:{data.n}:create"
        action: crm.create
        destination: crm
        payload: {n: "{data.n}", label: "S{data.n}"}
`

// mapN maps an accepted event whose n is the JSON number text n.
func mapN(t *testing.T, rules *opledger.Rules, n string) (*opledger.Mapping, error) {
	t.Helper()
	return rules.Map(opledger.Event{Source: "forms", EventID: "e1", Type: "accepted",
		Payload: json.RawMessage(`{"n":` + n + `,"v":1}`)})
}

// A number written into text takes one exact decimal form whatever its
// spelling, so that one submission gives one key: 850, 850.0 and 8.5e2
// gave three keys, three effects.
func TestNumbersInTextAreCanonical(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(spellingRules))
	require.NoError(t, err)
	for want, spellings := range map[string][]string{
		"850":                    {"850", "850.0", "8.5e2", "8.5E+2", "85e1", "850.000", "0.85e3", "85000e-2"},
		"1.5":                    {"1.5", "1.50", "15e-1", "0.15E1"},
		"0.001":                  {"0.001", "1e-3", "0.0010", "10e-4"},
		"0":                      {"0", "-0", "0.0", "-0.0e5", "0e-7"},
		"-12":                    {"-12", "-1.2e1", "-12.00"},
		"1000000000000000000000": {"1e21", "1000000000000000000000"},
		// Exact: never through a double, in which these are one value.
		"12345678901234567890123": {"12345678901234567890123", "1.2345678901234567890123e22"},
		"12345678901234567890124": {"12345678901234567890124"},
		"0.30000000000000000001":  {"0.30000000000000000001", "30000000000000000001e-20"},
	} {
		for _, n := range spellings {
			m, err := mapN(t, rules, n)
			require.NoError(t, err, n)
			require.Equal(t, "intake:"+want+":create", m.Intents[0].Key, n)
			require.Equal(t, "submission:"+want, m.ObjectKey, n)
			var p struct {
				N     json.RawMessage `json:"n"`
				Label string          `json:"label"`
			}
			require.NoError(t, json.Unmarshal(m.Intents[0].Payload, &p))
			require.Equal(t, "S"+want, p.Label, n)
			require.Equal(t, n, string(p.N), "a whole placeholder keeps the number as sent")
		}
	}

	// A long number as sent is written out; an exponent may not make
	// one longer than maxNumberText, and is refused before it is built.
	long := "7" + strings.Repeat("0", 999)
	m, err := rules.Map(opledger.Event{Source: "forms", EventID: "e1", Type: "accepted",
		Payload: json.RawMessage(`{"n":1,"v":1,"x":` + long + `}`)})
	require.NoError(t, err)
	require.Equal(t, "intake:1:create", m.Intents[0].Key)
	textOnly, err := opledger.ParseRules([]byte(strings.Replace(spellingRules, `label: "S{data.n}"`, `label: "S{data.x}"`, 1)))
	require.NoError(t, err)
	m, err = textOnly.Map(opledger.Event{Source: "forms", EventID: "e1", Type: "accepted",
		Payload: json.RawMessage(`{"n":1,"v":1,"x":` + long + `}`)})
	require.NoError(t, err)
	require.Contains(t, string(m.Intents[0].Payload), `"S`+long+`"`)
	m, err = textOnly.Map(opledger.Event{Source: "forms", EventID: "e1", Type: "accepted",
		Payload: json.RawMessage(`{"n":1,"v":1,"x":1e399}`)})
	require.NoError(t, err, "400 characters are written out")
	require.Contains(t, string(m.Intents[0].Payload), `"S1`+strings.Repeat("0", 399)+`"`)
	for _, n := range []string{"1e400", "1e-399", "-1e999999999", "1e99999999999999999999", "1e-99999999999999999999"} {
		_, err := textOnly.Map(opledger.Event{Source: "forms", EventID: "e1", Type: "accepted",
			Payload: json.RawMessage(`{"n":1,"v":1,"x":` + n + `}`)})
		var re *opledger.RuleError
		require.True(t, errors.As(err, &re), "%s: %v", n, err)
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.Equal(t, "operations[0].payload", re.Field, n)
		require.EqualError(t, err, `rule "intake": operations[0].payload: data.x is a number whose decimal form would be longer than 400 characters`, n)
		_, err = mapN(t, rules, n)
		require.True(t, errors.As(err, &re), "%s: %v", n, err)
		require.Equal(t, "object.id", re.Field, "the object id is written first")
	}
}

// Three spellings of one submission are one operation in the ledger.
func TestNumberSpellingsRecordOneOperation(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: intake
    type: accepted
    operations:
      - key: "intake:{data.submission_id}:create"
        action: crm.create
        destination: crm
        payload: {submission: "{data.submission_id}"}
`))
	require.NoError(t, err)
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			for i, n := range []string{"850", "850.0", "8.5e2"} {
				res, err := l.ReceiveEvent(ctx, rules, opledger.Event{Source: "forms", EventID: fmt.Sprintf("e%d", i), Type: "accepted",
					Payload: json.RawMessage(`{"submission_id":` + n + `}`)})
				require.NoError(t, err, n)
				require.Equal(t, opledger.EventApplied, res.Status, n)
				require.Len(t, res.Operations, 1)
				require.Equal(t, "intake:850:create", res.Operations[0].Key, n)
			}
			page, err := l.List(ctx, opledger.ListOptions{})
			require.NoError(t, err)
			require.Len(t, page.Items, 1, "one submission, one operation")
		})
	}
}

// An ordering value beyond a double's range would stay newer than every
// real version after it: refused while mapping, naming the path only.
func TestMapRefusesOrderValueOutOfRange(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(orderRule))
	require.NoError(t, err)
	for _, v := range []string{"1.5e400", "-1.5e400", `"1e999999"`, "1e99999999999999999999"} {
		_, err := rules.Map(opledger.Event{Source: "shop", EventID: "e1", Type: "orders/updated",
			Payload: json.RawMessage(`{"id":"1","version":` + v + `,"total":1}`)})
		var re *opledger.RuleError
		require.True(t, errors.As(err, &re), "%s: %v", v, err)
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.EqualError(t, err, `rule "order-updated": object.order_by: data.version is a number beyond the range of a double`, v)
	}
	for _, v := range []string{"1.7e308", "1e-400", "12345678901234567890123456789", `"v10"`, `"2026-03-01T10:00:00Z"`} {
		m, err := rules.Map(opledger.Event{Source: "shop", EventID: "e1", Type: "orders/updated",
			Payload: json.RawMessage(`{"id":"1","version":` + v + `,"total":1}`)})
		require.NoError(t, err, v)
		require.Equal(t, strings.Trim(v, `"`), m.OrderValue, "the ordering value keeps its spelling")
	}
}

// A placeholder written without quotes is a YAML object: refused when the
// rules load, naming the rule, the field and the line, and saying how to
// write it.
func TestLoadRulesRefusesUnquotedPlaceholder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`rules:
  - name: order-paid
    source: shop
    type: orders/paid
    operations:
      - key: "shop:payment:{event.id}:receipt"
        action: email.send_receipt
        destination: email
        payload: {order: {data.id}, amount: "{data.amount}"}
`), 0o600))
	_, err := opledger.LoadRules(path)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	var re *opledger.RuleError
	require.True(t, errors.As(err, &re), "%v", err)
	require.Equal(t, "order-paid", re.Rule)
	require.Equal(t, "operations[0].payload.order", re.Field)
	require.EqualError(t, err, path+`: rule "order-paid": operations[0].payload.order: line 9: the YAML object {"data.id": null} is what the placeholder {data.id} becomes without quotes; placeholders must be quoted: order: "{data.id}"`)

	for name, tc := range map[string]struct{ payload, field, want string }{
		"whole payload":   {`{data.customer}`, "operations[0].payload", `payload: "{data.customer}"`},
		"in a list":       {"\n          lines: [1, {data.lines.0}]", "operations[0].payload.lines.1", `- "{data.lines.0}"`},
		"root alone":      {`{x: {event}}`, "operations[0].payload.x", `x: "{event}"`},
		"block, no value": {"\n          a:\n            b:\n              data.id:", "operations[0].payload.a.b", `b: "{data.id}"`},
	} {
		_, err := opledger.ParseRules([]byte("rules:\n  - name: r\n    type: t\n    operations:\n      - key: k\n        action: a\n        destination: d\n        payload: " + tc.payload + "\n"))
		require.True(t, errors.As(err, &re), "%s: %v", name, err)
		require.Equal(t, "r", re.Rule, name)
		require.Equal(t, tc.field, re.Field, name)
		require.ErrorContains(t, err, "placeholders must be quoted: "+tc.want, name)
	}
	// Nulls elsewhere, and members that only begin like a root, are data.
	rules, err := opledger.ParseRules([]byte("rules:\n  - name: r\n    type: t\n    operations:\n      - key: k\n        action: a\n        destination: d\n        payload: {database: null, note: ~, eventual: null, list: [null], data.id: \"{data.id}\", data: null, event: ~}\n"))
	require.NoError(t, err, "a member named data or event whose null is written is data too")
	m, err := rules.Map(opledger.Event{Source: "s", EventID: "e1", Type: "t", Payload: json.RawMessage(`{"id":7}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"database":null,"note":null,"eventual":null,"list":[null],"data.id":7,"data":null,"event":null}`, string(m.Intents[0].Payload))
}

// copyRules copy the applicant's e-mail address, which they mark
// sensitive, into other fields: whole, inside text, and with the
// applicant copied whole.
const copyRules = `
rules:
  - name: intake
    type: submission.accepted
    operations:
      - key: "intake:{data.submission_id}:create"
        action: crm.create
        destination: crm
        payload:
          applicant: "{data.applicant}"
          copy: "{data.applicant.email}"
          greeting: "Hello {data.applicant.email}"
          again: "{data.applicant}"
        sensitive_fields: [applicant.email]
`

// A sensitive value a rule copies into another field of its payload is
// masked there too, wherever the operation is shown, on both stores; an
// operation recorded with only the fields the rule lists (as releases
// before this one recorded it) gains the others when its event comes
// again.
func TestRuleCopiesOfSensitiveValuesMasked(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(copyRules))
	require.NoError(t, err)
	event := func(id, submission string) opledger.Event {
		return opledger.Event{Source: "forms", EventID: id, Type: "submission.accepted",
			Payload: json.RawMessage(`{"submission_id":"` + submission + `","applicant":{"name":"Vic","email":"vic.secret@example.invalid"}}`)}
	}
	const shown = `{"applicant":{"name":"Vic","email":"***"},"copy":"***","greeting":"***","again":{"name":"Vic","email":"***"}}`
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })

			res, err := l.ReceiveEvent(ctx, rules, event("e1", "1"))
			require.NoError(t, err)
			require.Equal(t, opledger.EventApplied, res.Status)
			op, err := l.Get(ctx, "intake:1:create")
			require.NoError(t, err)
			require.Equal(t, []string{"applicant.email", "again.email", "copy", "greeting"}, op.SensitiveFields)
			require.Contains(t, string(op.Payload), "vic.secret@example.invalid", "stored as the rule made it, to be sent")
			require.JSONEq(t, shown, string(op.Masked().Payload))
			for what, v := range map[string]any{"the operation": op, "the answer to the event": res} {
				b, err := json.Marshal(v)
				require.NoError(t, err)
				require.NotContains(t, string(b), "vic.secret", what)
			}
			page, err := l.List(ctx, opledger.ListOptions{})
			require.NoError(t, err)
			b, err := json.Marshal(page)
			require.NoError(t, err)
			require.NotContains(t, string(b), "vic.secret", "the list")
			detail, err := l.GetEvent(ctx, "forms", "e1")
			require.NoError(t, err)
			b, err = json.Marshal(detail)
			require.NoError(t, err)
			require.NotContains(t, string(b), "vic.secret", "the event's detail")

			// Recorded before with the listed field only: the event's
			// operation is the same, and gains what it lacks.
			m, err := rules.Map(event("e2", "2"))
			require.NoError(t, err)
			in := m.Intents[0]
			in.SensitiveFields = []string{"applicant.email"}
			_, _, err = l.Record(ctx, in)
			require.NoError(t, err)
			res, err = l.ReceiveEvent(ctx, rules, event("e2", "2"))
			require.NoError(t, err)
			require.Equal(t, opledger.EventApplied, res.Status)
			op, err = l.Get(ctx, "intake:2:create")
			require.NoError(t, err)
			require.JSONEq(t, shown, string(op.Masked().Payload))
		})
	}
}

// TestEditedKeyTemplateWithdrawsNoFirstOperation: only an update
// operation the object's previous event recorded as its correction is
// withdrawn by a newer version. After a rule's key template was edited,
// the previous event's own first operation sits in that place, recorded
// by it with the same action (no update_action): it is not a correction,
// and stays as it was.
func TestEditedKeyTemplateWithdrawsNoFirstOperation(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			rules := func(key string) *opledger.Rules {
				r, err := opledger.ParseRules([]byte(`
rules:
  - name: order
    source: shop
    type: order.updated
    object: {kind: order, id: data.id, order_by: data.v}
    operations:
      - key: "` + key + `"
        update_key: "` + key + `:update:v{data.v}"
        action: crm.upsert
        destination: crm
        payload: {id: "{data.id}", v: "{data.v}"}
`))
				require.NoError(t, err)
				return r
			}
			event := func(id string, v int) opledger.Event {
				return opledger.Event{Source: "shop", EventID: id, Type: "order.updated",
					Payload: json.RawMessage(fmt.Sprintf(`{"id":"7","v":%d}`, v))}
			}
			first, err := l.ReceiveEvent(ctx, rules("a:{data.id}"), event("e1", 1))
			require.NoError(t, err)
			require.Equal(t, []string{"a:7"}, first.Event.OperationKeys)

			second, err := l.ReceiveEvent(ctx, rules("b:{data.id}"), event("e2", 2))
			require.NoError(t, err)
			require.Equal(t, opledger.EventApplied, second.Status, second.Reason)
			require.Empty(t, second.Reason, "nothing withdrawn")
			op, err := l.Get(ctx, "a:7")
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State, "e1's own operation, not a correction: left as it was")
		})
	}
}

package opledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/internal/configfile"
)

// Rule maps one type of inbound event to one or more operation intents
// (DESIGN.md section 5). Rules are usually written in YAML and read with
// ParseRules or LoadRules; see docs/events-and-workflows.md.
//
// Templates take values from the event: "{data.…}" is the event payload,
// "{event.source}", "{event.id}", "{event.type}" and "{event.occurred_at}"
// (RFC 3339) describe the event itself.
type Rule struct {
	// Name identifies the rule in errors and on recorded events.
	Name string `yaml:"name" json:"name"`
	// Source limits the rule to events of one source; empty matches any.
	Source string `yaml:"source,omitempty" json:"source,omitempty"`
	// Type is the event type the rule maps, e.g. "submission.accepted".
	Type string `yaml:"type" json:"type"`
	// Object, when set, names the object the event concerns and its
	// ordering, so that out-of-order events are flagged and newer versions
	// become corrections instead of conflicts.
	Object *ObjectRule `yaml:"object,omitempty" json:"object,omitempty"`
	// Operations are the intents the event produces, in order.
	Operations []OperationRule `yaml:"operations" json:"operations"`
}

// ObjectRule identifies the object an event concerns and orders its
// events.
type ObjectRule struct {
	// Kind groups objects across rules ("order"); default the rule's name.
	Kind string `yaml:"kind,omitempty" json:"kind,omitempty"`
	// ID is a path ("data.order.id") or a template ("{data.shop}-{data.id}")
	// giving the object's identifier. It must satisfy the key syntax.
	ID string `yaml:"id" json:"id"`
	// OrderBy is the path of the ordering value: "event.occurred_at", or a
	// version or timestamp in the payload ("data.version"). Numbers compare
	// as numbers, RFC 3339 times as times, anything else as text; a value
	// of another kind than the one recorded for the object, or a number
	// beyond a double's range, is refused (a *RuleError).
	OrderBy string `yaml:"order_by" json:"order_by"`
}

// OperationRule is the template of one operation intent.
type OperationRule struct {
	// Key is the operation key template, e.g. "intake:{data.submission_id}:create".
	// The produced key must satisfy ValidateKey.
	Key string `yaml:"key" json:"key"`
	// Action is the action of the operations it records (Intent.Action),
	// as written: required.
	Action string `yaml:"action" json:"action"`
	// Destination is their destination (Intent.Destination), as written:
	// required.
	Destination string `yaml:"destination" json:"destination"`
	// Owner is their owner (Intent.Owner), as written; empty for none.
	Owner string `yaml:"owner,omitempty" json:"owner,omitempty"`
	// RequiresApproval records the operation as awaiting_approval.
	RequiresApproval bool `yaml:"requires_approval,omitempty" json:"requires_approval,omitempty"`
	// Payload is the payload template: any YAML value whose strings may
	// hold placeholders. A string that is exactly one placeholder
	// ("{data.customer}") takes the value at that path with its type.
	Payload any `yaml:"payload,omitempty" json:"payload,omitempty"`
	// SensitiveFields are dotted paths into the produced payload that are
	// stored but never shown. A payload field of any operation of the
	// rule that copies a value they name (whole, inside text, or in an
	// object copied whole) is masked too: its intents list those paths
	// after these.
	SensitiveFields []string `yaml:"sensitive_fields,omitempty" json:"sensitive_fields,omitempty"`
	// UpdateKey is the key template of the update operation that a newer
	// version of the object produces once the original operation may have
	// reached its destination, e.g. "order:{data.id}:update:v{data.version}".
	// Update operations always require approval. Without UpdateKey such a
	// correction is recorded as a conflict for a person to handle.
	UpdateKey string `yaml:"update_key,omitempty" json:"update_key,omitempty"`
	// UpdateAction is the action of update operations; default Action.
	UpdateAction string `yaml:"update_action,omitempty" json:"update_action,omitempty"`
}

// rulesDocument is the YAML layout of a rules file.
type rulesDocument struct {
	Rules []Rule `yaml:"rules"`
}

// Rules is a compiled, immutable set of mapping rules, safe for concurrent
// use. The first rule whose source and type match an event applies.
type Rules struct {
	list []*compiledRule
}

// RuleError reports a rule that is malformed, or that cannot map a given
// event (a missing field, a produced key that is invalid, an ordering
// value or a payload the ledger cannot store). It names the rule and the
// field, never the event's values. It matches ErrInvalidInput.
type RuleError struct {
	Rule  string // the rule's name
	Field string // e.g. "operations[0].key"
	// Err is what is wrong with the field (or the rule), in words that
	// name paths, never the event's values.
	Err error
	// Line is the line the rule's entry begins on in a rules file
	// (ParseRules); 0 for rules given in Go.
	Line int
}

// Error names the line, the rule, the field and the cause.
func (e *RuleError) Error() string {
	msg := fmt.Sprintf("rule %q", e.Rule)
	if e.Line > 0 {
		msg = fmt.Sprintf("line %d: %s", e.Line, msg)
	}
	if e.Field != "" {
		msg += ": " + e.Field
	}
	if e.Err == nil { // a RuleError a program made itself, without a cause
		return msg
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the underlying cause.
func (e *RuleError) Unwrap() error { return e.Err }

// Is matches ErrInvalidInput.
func (e *RuleError) Is(target error) bool { return target == ErrInvalidInput }

// eventRoots are the roots event templates may use.
var eventRoots = []string{"data", "event"}

type compiledRule struct {
	Rule
	kind    string
	objID   *tmpl
	orderBy []string
	ops     []compiledOpRule
}

type compiledOpRule struct {
	OperationRule
	key       *tmpl
	updateKey *tmpl
	payload   *valueTmpl
	// sensitive is SensitiveFields and the payload paths that copy a
	// value the rule's operations mark sensitive (copiedSensitive): what
	// its intents mask.
	sensitive []string
}

// ParseRules reads mapping rules from YAML:
//
//	rules:
//	  - name: intake-accepted
//	    type: submission.accepted
//	    operations:
//	      - key: "intake:{data.submission_id}:create"
//	        action: crm.create_inquiry
//	        destination: crm
//	        payload: {submission: "{data.submission_id}"}
//
// Decoding is strict: unknown fields are refused, and so is a placeholder
// written without quotes, which YAML reads as an object
// (`order: {data.id}` for `order: "{data.id}"`).
func ParseRules(data []byte) (*Rules, error) {
	var doc rulesDocument
	if err := configfile.DecodeYAML(data, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &rulesDecodeError{errors.New("the file is empty: it needs a rules list")}
		}
		return nil, &rulesDecodeError{err}
	}
	r, at, err := newRules(doc.Rules)
	if err != nil {
		if re, ok := errors.AsType[*RuleError](err); ok {
			re.Line = ruleLine(data, at)
		}
		return nil, err
	}
	if err := unquotedPlaceholders(data); err != nil {
		return nil, err
	}
	return r, nil
}

// rulesDecodeError is a rules document that cannot be decoded (empty, not
// YAML, an unknown field, a value of the wrong kind): it matches
// ErrInvalidInput and says the decoder's words with their line, as a
// RuleError does, without "invalid input: rules:" before them, which
// the caller's "config rules: FILE:" would repeat.
type rulesDecodeError struct{ err error }

func (e *rulesDecodeError) Error() string        { return e.err.Error() }
func (e *rulesDecodeError) Unwrap() error        { return e.err }
func (e *rulesDecodeError) Is(target error) bool { return target == ErrInvalidInput }

// unquotedPlaceholders refuses a payload in which YAML read a placeholder
// written without quotes as an object: `order: {data.id}` is the flow
// mapping {"data.id": null}, which would be sent as it is, an object,
// on every event. A member named like a placeholder path ("data",
// "event", or one under them) with no value at all ({data.id}) is taken
// for one, with the line it is on; one whose value is written (`data:
// null`, `data: ~`) is not. data has been decoded strictly already.
func unquotedPlaceholders(data []byte) error {
	var doc struct {
		Rules []struct {
			Name       string `yaml:"name"`
			Operations []struct {
				Payload yaml.Node `yaml:"payload"`
			} `yaml:"operations"`
		} `yaml:"rules"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil // not reached: configfile.DecodeYAML read it
	}
	for i, r := range doc.Rules {
		name := r.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		for j, op := range r.Operations {
			if err := findUnquoted(&op.Payload, "payload", nil); err != nil {
				field := fmt.Sprintf("operations[%d].payload", j)
				if len(err.path) > 0 {
					field += "." + strings.Join(err.path, ".")
				}
				return &RuleError{Rule: name, Field: field, Err: err}
			}
		}
	}
	return nil
}

// unquotedError is a placeholder YAML read as an object: the line, the
// path to the object in the payload, and the name of the member that
// holds it ("" for an element of a list).
type unquotedError struct {
	line        int
	path        []string
	parent, key string
}

// Error says what YAML made of the placeholder, and how to write it.
func (e *unquotedError) Error() string {
	quoted := fmt.Sprintf("%s: \"{%s}\"", e.parent, e.key)
	if e.parent == "" {
		quoted = fmt.Sprintf("- \"{%s}\"", e.key) // an element of a list
	}
	return fmt.Sprintf("line %d: the YAML object {%q: null} is what the placeholder {%s} becomes without quotes; placeholders must be quoted: %s",
		e.line, e.key, e.key, quoted)
}

// findUnquoted walks a payload node for a placeholder read as an object
// (see unquotedPlaceholders). Aliases are not followed: what they name
// is walked where it is defined.
func findUnquoted(n *yaml.Node, parent string, path []string) *unquotedError {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			// `{data.id}`: a member with no value at all. One written
			// `{data: null}` means what it says.
			if k.Kind == yaml.ScalarNode && placeholderLike(k.Value) &&
				v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" && v.Value == "" {
				return &unquotedError{line: k.Line, path: path, parent: parent, key: k.Value}
			}
			if k.Kind == yaml.ScalarNode {
				if err := findUnquoted(v, k.Value, append(path[:len(path):len(path)], k.Value)); err != nil {
					return err
				}
			}
		}
	case yaml.SequenceNode:
		for i, el := range n.Content {
			if err := findUnquoted(el, "", append(path[:len(path):len(path)], strconv.Itoa(i))); err != nil {
				return err
			}
		}
	}
	return nil
}

// placeholderLike reports whether a member name is spelled like a
// placeholder path of a rule: "data", "event", or a path under them.
func placeholderLike(name string) bool {
	for _, root := range eventRoots {
		if name == root || strings.HasPrefix(name, root+".") {
			return true
		}
	}
	return false
}

// LoadRules reads mapping rules from a YAML file (see ParseRules): a
// regular file of at most 4 MiB.
func LoadRules(path string) (*Rules, error) {
	b, err := configfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	r, err := ParseRules(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// NewRules checks and compiles rules given in Go.
func NewRules(rules ...Rule) (*Rules, error) {
	r, _, err := newRules(rules)
	return r, err
}

// ruleLine is the line the i-th entry of the rules list of a rules file
// begins on; 0 when it cannot be found.
func ruleLine(data []byte, i int) int {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return 0
	}
	top := root.Content[0].Content
	for k := 0; k+1 < len(top); k += 2 {
		if top[k].Value == "rules" && top[k+1].Kind == yaml.SequenceNode && i < len(top[k+1].Content) {
			return top[k+1].Content[i].Line
		}
	}
	return 0
}

// newRules is NewRules, which also returns the index of the rule refused.
func newRules(rules []Rule) (*Rules, int, error) {
	out := &Rules{}
	seen := map[string]bool{}
	for i, r := range rules {
		if r.Name == "" {
			return nil, i, &RuleError{Rule: fmt.Sprintf("#%d", i+1), Field: "name", Err: errors.New("is required")}
		}
		if seen[r.Name] {
			return nil, i, &RuleError{Rule: r.Name, Err: errors.New("name is used by another rule")}
		}
		seen[r.Name] = true
		c, err := compileRule(r)
		if err != nil {
			return nil, i, err
		}
		// The first rule for an event's source and type maps it (match):
		// a later one that an earlier rule covers would never apply.
		for _, before := range out.list {
			if before.Type == c.Type && (before.Source == "" || before.Source == c.Source) {
				return nil, i, &RuleError{Rule: r.Name, Err: fmt.Errorf("never applies: rule %q, before it, takes every event of type %q%s",
					before.Name, c.Type, map[bool]string{true: " from any source", false: " from source " + strconv.Quote(c.Source)}[before.Source == ""])}
			}
		}
		out.list = append(out.list, c)
	}
	return out, 0, nil
}

func compileRule(r Rule) (*compiledRule, error) {
	fail := func(field string, err error) error { return &RuleError{Rule: r.Name, Field: field, Err: err} }
	if len(r.Name) > maxNameLength {
		return nil, fail("name", fmt.Errorf("is longer than %d bytes", maxNameLength))
	}
	if r.Type == "" || len(r.Type) > maxNameLength {
		return nil, fail("type", fmt.Errorf("is required (at most %d bytes)", maxNameLength))
	}
	if len(r.Operations) == 0 {
		return nil, fail("operations", errors.New("at least one operation is required"))
	}
	// Names the ledger records with every event and operation the rule
	// produces: text PostgreSQL cannot store is refused here, when the
	// rules are loaded, not on the first event that matches.
	if field, ok := storableText("name", r.Name, "source", r.Source, "type", r.Type); !ok {
		return nil, fail(field, errUnstorableText)
	}
	// An event's source takes the key syntax (Event.validate): a rule
	// for a source outside it would never apply.
	if r.Source != "" {
		if err := ValidateKey(r.Source); err != nil {
			reason := err.Error()
			if ke, ok := errors.AsType[*KeyError](err); ok {
				reason = ke.Reason
			}
			return nil, fail("source", fmt.Errorf("takes an event source, in the key syntax (no event could match): %s", reason))
		}
	}
	c := &compiledRule{Rule: r}
	if o := r.Object; o != nil {
		c.kind = o.Kind
		if c.kind == "" {
			c.kind = r.Name
		}
		if ValidateKey(c.kind) != nil || strings.Contains(c.kind, "/") {
			return nil, fail("object.kind", errors.New("must satisfy the key syntax"))
		}
		src := o.ID
		if src == "" {
			return nil, fail("object.id", errors.New("is required"))
		}
		if !strings.Contains(src, "{") {
			src = "{" + src + "}"
		}
		t, err := parseTemplate(src, eventRoots, true)
		if err != nil {
			return nil, fail("object.id", err)
		}
		if len(t.placeholders()) == 0 {
			return nil, fail("object.id", errors.New("must take a value from the event"))
		}
		c.objID = t
		if o.OrderBy == "" {
			return nil, fail("object.order_by", errors.New("is required: without an order, newer and older events cannot be told apart"))
		}
		if c.orderBy, err = parsePath(strings.Trim(o.OrderBy, "{}"), eventRoots); err != nil {
			return nil, fail("object.order_by", err)
		}
	}
	for i, op := range r.Operations {
		field := func(f string) string { return fmt.Sprintf("operations[%d].%s", i, f) }
		co := compiledOpRule{OperationRule: op}
		if op.Action == "" || len(op.Action) > maxNameLength || len(op.UpdateAction) > maxNameLength {
			return nil, fail(field("action"), fmt.Errorf("is required (at most %d bytes)", maxNameLength))
		}
		if op.Destination == "" || len(op.Destination) > maxNameLength {
			return nil, fail(field("destination"), fmt.Errorf("is required (at most %d bytes)", maxNameLength))
		}
		if len(op.Owner) > maxNameLength {
			return nil, fail(field("owner"), fmt.Errorf("is longer than %d bytes", maxNameLength))
		}
		if name, ok := storableText("action", op.Action, "update_action", op.UpdateAction,
			"destination", op.Destination, "owner", op.Owner); !ok {
			return nil, fail(field(name), errUnstorableText)
		}
		if err := checkDestinationName(op.Destination); err != nil {
			return nil, fail(field("destination"), errors.New(InvalidInputDetail(err)))
		}
		if op.Key == "" {
			return nil, fail(field("key"), errors.New("is required"))
		}
		var err error
		if co.key, err = parseTemplate(op.Key, eventRoots, true); err != nil {
			return nil, fail(field("key"), err)
		}
		for j := range i {
			if r.Operations[j].Key == op.Key {
				return nil, fail(field("key"), fmt.Errorf("is the key of operations[%d] too: one event would make one operation of both", j))
			}
		}
		if (op.UpdateKey != "" || op.UpdateAction != "") && r.Object == nil {
			return nil, fail(field("update_key"), errors.New("update_key and update_action need the rule's object: a correction replaces the operation of an older version of an object"))
		}
		if op.UpdateKey != "" {
			if co.updateKey, err = parseTemplate(op.UpdateKey, eventRoots, true); err != nil {
				return nil, fail(field("update_key"), err)
			}
			if op.UpdateKey == op.Key {
				return nil, fail(field("update_key"), errors.New("must differ from key"))
			}
		}
		if co.payload, err = compileValue(op.Payload, eventRoots, true); err != nil {
			return nil, fail(field("payload"), err)
		}
		for _, f := range op.SensitiveFields {
			if err := checkSensitiveField(f); err != nil {
				return nil, fail(field("sensitive_fields"), err)
			}
			if !co.payload.reaches(strings.Split(f, ".")) {
				return nil, fail(field("sensitive_fields"), fmt.Errorf("%q names nothing in the payload template (a misspelt member?), so it would mask nothing", f))
			}
		}
		c.ops = append(c.ops, co)
	}
	if err := checkKeysNotSensitive(c, fail); err != nil {
		return nil, err
	}
	sources := sensitiveSources(c)
	for i := range c.ops {
		op := &c.ops[i]
		copied, err := copiedSensitive(op.payload, sources, op.SensitiveFields)
		if err != nil {
			return nil, fail(fmt.Sprintf("operations[%d].payload", i), err)
		}
		op.sensitive = append(slices.Clone(op.SensitiveFields), copied...)
	}
	return c, nil
}

// List returns the rules as given, in matching order.
func (r *Rules) List() []Rule {
	if r == nil {
		return nil
	}
	out := make([]Rule, len(r.list))
	for i, c := range r.list {
		out[i] = c.Rule
	}
	return out
}

// match returns the first rule for the event's source and type, or nil.
func (r *Rules) match(source, typ string) *compiledRule {
	if r == nil {
		return nil
	}
	for _, c := range r.list {
		if c.Type == typ && (c.Source == "" || c.Source == source) {
			return c
		}
	}
	return nil
}

// Mapping is what a rule makes of one event, before the ledger is
// consulted.
type Mapping struct {
	// Rule is the matching rule's name; empty when no rule matched.
	Rule string `json:"rule,omitempty"`
	// ObjectKey is "<kind>:<id>" when the rule declares an object.
	ObjectKey string `json:"object_key,omitempty"`
	// OrderValue is the object's ordering value in this event.
	OrderValue string `json:"order_value,omitempty"`
	// orderBy is the path OrderValue was read from, for errors.
	orderBy string
	// Intents are the operation intents, in the rule's order.
	Intents []Intent `json:"intents"`
	// Updates[i] is the update operation that intent i becomes when it
	// corrects an operation that may already have reached its
	// destination; nil when the rule declares no update_key. Update
	// operations always require approval.
	Updates []*Intent `json:"updates"`
}

// Map applies the rules to an event without recording anything: the
// matching rule's name, the object and the intents it produces. An event
// no rule matches gives an empty Mapping. A rule that cannot map the event
// returns a *RuleError.
func (r *Rules) Map(ev Event) (*Mapping, error) {
	if err := ev.validate(); err != nil {
		return nil, err
	}
	return r.mapEvent(&ev)
}

func (r *Rules) mapEvent(ev *Event) (*Mapping, error) {
	c := r.match(ev.Source, ev.Type)
	if c == nil {
		return &Mapping{Intents: []Intent{}, Updates: []*Intent{}}, nil
	}
	ctx, err := ev.templateContext()
	if err != nil {
		return nil, err
	}
	fail := func(field string, err error) error { return &RuleError{Rule: c.Name, Field: field, Err: err} }
	m := &Mapping{Rule: c.Name, Intents: []Intent{}, Updates: []*Intent{}}
	if c.objID != nil {
		id, err := c.objID.renderString(ctx)
		if err != nil {
			return nil, fail("object.id", err)
		}
		m.ObjectKey = c.kind + ":" + id
		if err := ValidateKey(m.ObjectKey); err != nil {
			return nil, fail("object.id", fmt.Errorf("the produced object key is invalid: %w", err))
		}
		v, err := lookupPath(ctx, c.orderBy)
		if err != nil {
			return nil, fail("object.order_by", err)
		}
		// A number keeps the sender's spelling here: ordering values
		// compare by value (compareOrder), never as text.
		if n, ok := v.(json.Number); ok {
			m.OrderValue = n.String()
		} else if m.OrderValue, err = scalarText(v, c.orderBy); err != nil {
			return nil, fail("object.order_by", err)
		}
		if len(m.OrderValue) > maxNameLength {
			return nil, fail("object.order_by", fmt.Errorf("the value is longer than %d bytes", maxNameLength))
		}
		// The order value is stored as text, and repeated in reasons and
		// the timeline. (The object id needs no such check: the key
		// syntax above admits neither NUL bytes nor invalid UTF-8.)
		if err := checkText(strings.Join(c.orderBy, "."), m.OrderValue); err != nil {
			return nil, fail("object.order_by", err)
		}
		if orderKindOf(m.OrderValue) == orderNumber && !orderNumberInRange(m.OrderValue) {
			return nil, fail("object.order_by", fmt.Errorf("%s is a number beyond the range of a double", strings.Join(c.orderBy, ".")))
		}
		m.orderBy = strings.Join(c.orderBy, ".")
	}
	// producedBy names the field that produced each key: two operations
	// of one event with the same key would be one operation written
	// twice, the second time with other content.
	producedBy := map[string]string{}
	produced := func(key, field string) error {
		if other, ok := producedBy[key]; ok {
			return fail(field, fmt.Errorf("produced the same key as %s", other))
		}
		producedBy[key] = field
		return nil
	}
	for i, op := range c.ops {
		field := func(f string) string { return fmt.Sprintf("operations[%d].%s", i, f) }
		key, err := op.key.renderString(ctx)
		if err != nil {
			return nil, fail(field("key"), err)
		}
		if err := ValidateKey(key); err != nil {
			return nil, fail(field("key"), fmt.Errorf("the produced key is invalid: %w", err))
		}
		if err := produced(key, field("key")); err != nil {
			return nil, err
		}
		payload, err := op.payload.renderJSON(ctx)
		if err != nil {
			return nil, fail(field("payload"), err)
		}
		// The fingerprint canonicalises the payload; what cannot be (a
		// number beyond float64) is refused here, with Fingerprint's
		// error, which does not repeat the value.
		if _, err := Fingerprint(op.Action, op.Destination, payload, 1); err != nil {
			return nil, fail(field("payload"), err)
		}
		in := Intent{
			Key: key, Action: op.Action, Destination: op.Destination, Payload: payload,
			Owner: op.Owner, SourceEvent: ev.Source + ":" + ev.EventID,
			RequiresApproval: op.RequiresApproval, SensitiveFields: slices.Clone(op.sensitive),
		}
		var update *Intent
		if op.updateKey != nil {
			up := in
			if up.Key, err = op.updateKey.renderString(ctx); err != nil {
				return nil, fail(field("update_key"), err)
			}
			if err := ValidateKey(up.Key); err != nil {
				return nil, fail(field("update_key"), fmt.Errorf("the produced key is invalid: %w", err))
			}
			if err := produced(up.Key, field("update_key")); err != nil {
				return nil, err
			}
			if op.UpdateAction != "" {
				up.Action = op.UpdateAction
			}
			up.RequiresApproval = true
			up.SensitiveFields = slices.Clone(op.sensitive)
			update = &up
		}
		m.Intents = append(m.Intents, in)
		m.Updates = append(m.Updates, update)
	}
	return m, nil
}

// templateContext is what event templates can read.
func (ev *Event) templateContext() (map[string]any, error) {
	data, err := decodeJSON(ev.Payload)
	if err != nil {
		return nil, invalidInput("event payload is not valid JSON")
	}
	meta := map[string]any{"source": ev.Source, "id": ev.EventID, "type": ev.Type}
	if !ev.OccurredAt.IsZero() {
		meta["occurred_at"] = ev.OccurredAt.UTC().Format(time.RFC3339Nano)
	}
	return map[string]any{"data": data, "event": meta}, nil
}

// orderKind is the kind of an ordering value. The values of one object
// compare only with values of the kind first recorded for it: a number
// is never compared with text (after "abc", every real version would
// compare as older as text), nor a time with a number.
type orderKind string

const (
	orderNumber orderKind = "a number"
	orderTime   orderKind = "an RFC 3339 time"
	orderText   orderKind = "other text"
)

// orderKindOf tells the kind of an ordering value: a number when
// compareOrder compares it as one (a decimal, or a form big.Rat reads
// cheaply: "3/4", "0x1F"), a time when it is an RFC 3339 time, else text.
func orderKindOf(s string) orderKind {
	if _, ok := parseDecimal(s); ok {
		return orderNumber
	}
	if ratOf(s) != nil {
		return orderNumber
	}
	if _, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return orderTime
	}
	return orderText
}

// orderNumberInRange reports whether the number s is within a double's
// range, as a payload's numbers must be: beyond it, a value such as
// 1.5e400 would stay newer than every real version that follows.
func orderNumberInRange(s string) bool {
	if _, ok := parseDecimal(s); ok {
		// Linear in s whatever its exponent; an overflow is ±Inf.
		f, err := strconv.ParseFloat(s, 64)
		return err == nil || !math.IsInf(f, 0)
	}
	if r := ratOf(s); r != nil {
		f, _ := r.Float64()
		return !math.IsInf(f, 0)
	}
	return false
}

// sameOrderKind refuses, as a rule that cannot map the event, an
// ordering value of another kind than the one recorded for the object.
// The error names the path and the kinds, never the values.
func sameOrderKind(m *Mapping, recorded string) error {
	got, want := orderKindOf(m.OrderValue), orderKindOf(recorded)
	if got == want {
		return nil
	}
	return &RuleError{Rule: m.Rule, Field: "object.order_by", Err: fmt.Errorf(
		"%s is %s, but the ordering value recorded for this object is %s: values of one object must all be numbers, all RFC 3339 times or all other text",
		m.orderBy, got, want)}
}

// compareOrder compares two ordering values: as numbers when both are
// numbers, as times when both are RFC 3339 times, otherwise as text.
// Decimal numbers are compared exactly by their digits and exponents
// (compareDecimal): big.Rat would build 10 to the power of an exponent
// the event chose, which for "1e999999" takes a large part of a second
// while the event's transaction holds the store, and it refuses larger
// exponents, which then compared as text. The other forms big.Rat reads
// (fractions "3/4", "0x1F") are compared by it, and with a decimal by
// compareDecimalRat, whatever the decimal's exponent.
func compareOrder(a, b string) int {
	x, xok := parseDecimal(a)
	y, yok := parseDecimal(b)
	switch {
	case xok && yok:
		return compareDecimal(x, y)
	case xok:
		if ry := ratOf(b); ry != nil {
			return compareDecimalRat(x, ry)
		}
	case yok:
		if rx := ratOf(a); rx != nil {
			return -compareDecimalRat(y, rx)
		}
	default:
		if rx := ratOf(a); rx != nil {
			if ry := ratOf(b); ry != nil {
				return rx.Cmp(ry)
			}
		}
	}
	if x, err := time.Parse(time.RFC3339Nano, a); err == nil {
		if y, err := time.Parse(time.RFC3339Nano, b); err == nil {
			return x.Compare(y)
		}
	}
	return strings.Compare(a, b)
}

// ratOf reads s with big.Rat when it has no exponent (ratCheap); nil
// otherwise.
func ratOf(s string) *big.Rat {
	if !ratCheap(s) {
		return nil
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil
	}
	return r
}

// ratCheap reports whether big.Rat reads s without an exponent for it to
// raise 10 or 2 to (an e of hex digits is none): its value then takes
// no more bits than s has characters, which bounds compareDecimalRat.
func ratCheap(s string) bool {
	s = strings.TrimLeft(s, "+-")
	if strings.ContainsAny(s, "pP") {
		return false
	}
	return !strings.ContainsAny(s, "eE") || strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X")
}

// compareDecimalRat compares a decimal with a rational exactly. y lies
// strictly between 10^-k and 10^k, k its numerator's and denominator's
// bit lengths together: a decimal whose exponent is beyond that is
// larger or smaller by its exponent alone, and any other is made a
// big.Rat at a cost bounded by y's size, not by the exponent.
func compareDecimalRat(x decimal, y *big.Rat) int {
	sx := 0
	if x.digits != "" {
		sx = 1
		if x.neg {
			sx = -1
		}
	}
	if sy := y.Sign(); sx != sy || sx == 0 {
		return cmpInt(sx, sy)
	}
	// 10^(exp-1) <= |x| < 10^exp.
	k := int64(y.Num().BitLen() + y.Denom().BitLen() + 1)
	switch {
	case x.exp.Cmp(big.NewInt(k+1)) >= 0:
		return sx // |x| >= 10^k > |y|
	case x.exp.Cmp(big.NewInt(-k)) <= 0:
		return -sx // |x| < 10^-k < |y|
	}
	xr, ok := new(big.Rat).SetString(x.text())
	if !ok {
		return strings.Compare(x.text(), y.String()) // not reached: x.text() is a decimal
	}
	return xr.Cmp(y)
}

// text writes d as "[-]0.digits" with an exponent, which big.Rat reads.
func (d decimal) text() string {
	sign := ""
	if d.neg {
		sign = "-"
	}
	return sign + "0." + d.digits + "e" + d.exp.String()
}

// decimal is a decimal number as 0.digits × 10^exp, with digits
// without leading or trailing zeros (none for zero).
type decimal struct {
	neg    bool
	digits string
	exp    *big.Int
}

// parseDecimal reads s as a decimal number: an optional sign, digits
// with an optional point (at least one digit), and an optional exponent
// ("-1.5e3", ".5", "7.").
func parseDecimal(s string) (decimal, bool) {
	var d decimal
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		d.neg = s[i] == '-'
		i++
	}
	var digits []byte
	point, seen := -1, false
mantissa:
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits, seen = append(digits, c), true
		case c == '.' && point < 0:
			point = len(digits)
		default:
			break mantissa
		}
	}
	if !seen {
		return d, false
	}
	if point < 0 {
		point = len(digits)
	}
	d.exp = big.NewInt(0)
	if i < len(s) {
		if s[i] != 'e' && s[i] != 'E' {
			return d, false
		}
		e := s[i+1:]
		unsigned := e
		if e != "" && (e[0] == '+' || e[0] == '-') {
			unsigned = e[1:]
		}
		if unsigned == "" || strings.IndexFunc(unsigned, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
			return d, false
		}
		d.exp.SetString(unsigned, 10)
		if e[0] == '-' {
			d.exp.Neg(d.exp)
		}
	}
	// 0.digits × 10^point, then without leading and trailing zeros.
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	d.digits = strings.TrimRight(string(digits[lead:]), "0")
	if d.digits == "" {
		d.neg = false // -0 is 0
		return d, true
	}
	d.exp.Add(d.exp, big.NewInt(int64(point-lead)))
	return d, true
}

// compareDecimal compares two decimals exactly.
func compareDecimal(x, y decimal) int {
	sign := func(d decimal) int {
		switch {
		case d.digits == "":
			return 0
		case d.neg:
			return -1
		}
		return 1
	}
	sx, sy := sign(x), sign(y)
	if sx != sy || sx == 0 {
		return cmpInt(sx, sy)
	}
	// Of one sign: the larger exponent, then the larger digits, is the
	// larger magnitude.
	c := x.exp.Cmp(y.exp)
	if c == 0 {
		c = strings.Compare(x.digits, y.digits)
	}
	return c * sx
}

// cmpInt compares two ints.
func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

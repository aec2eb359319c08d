package destination

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/opledger/opledger"
)

// Templates are checked when a destination is built, so that one that
// parses but cannot run (a field the operation does not have, a function
// given the wrong arguments) is a configuration error naming the
// destination and the field, not a rejection of every operation later.
//
// Two checks, because the payload's shape is the caller's and unknown
// here:
//
//   - every field read from the operation (.Key, $.Tenant, …), in every
//     branch, must be one of templateData's: checked on the parse tree;
//   - the template is executed once against a sample operation whose
//     payload is empty, with missing payload fields left empty rather
//     than errors: what fails then fails for every operation. A failure
//     at an action that reads the payload (or a variable, which may hold
//     it) may come from the sample's empty payload and is left to the
//     executor, which rejects the operations whose payload cannot fill
//     the template (docs/destinations.md#templates).

// templateFields are the names of templateData's fields, in its order.
var templateFields = func() []string {
	t := reflect.TypeFor[templateData]()
	names := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		names = append(names, f.Name)
	}
	return names
}()

// templateFieldList lists the fields for a message: ".Key, .Payload, …".
func templateFieldList() string {
	return "." + strings.Join(templateFields, ", .")
}

// sampleTemplateData is the operation templates are tried on: every field
// filled with a plausible value, the payload an empty object.
func sampleTemplateData(dest string) *templateData {
	const tenant, key = "acme", "sample:1:create"
	return &templateData{Key: key, Payload: map[string]any{}, Tenant: tenant, Action: "sample.create",
		Destination: dest, Version: 1, IdempotencyKey: opledger.DestinationIdempotencyKey(tenant, key, 1)}
}

// checkTemplate returns why t cannot run for any operation sent to the
// destination dest, or nil.
func checkTemplate(t *template.Template, dest string) error {
	if err := checkTemplateFields(t); err != nil {
		return err
	}
	try, err := t.Clone()
	if err != nil {
		return nil // not reached: a parsed template that was never executed clones
	}
	// A payload field the sample does not have is empty, not an error.
	try.Option("missingkey=default")
	err = try.Execute(io.Discard, sampleTemplateData(dest))
	if err == nil {
		return nil
	}
	if _, isUnprinted := errors.AsType[*unprintedError](err); isUnprinted {
		// A null, object or array printed comes from the sample's empty
		// payload (a missing field is null here), even where dot holds
		// it ({{template "t" .Payload}}): the operation's own may fill it.
		return nil
	}
	if action, _, ok := splitExecError(err); ok && readsPayload(action) {
		return nil
	}
	return errors.New(templateErrorText(err))
}

// checkURLTemplate is checkTemplate for a URL template whose origin is
// origin, which also parses its literal text as a request's URL is parsed
// (requestURL), each action standing for "25" (a path segment, a port,
// the digits after a %): what the literal text gets wrong (a port that
// is no number or out of range, a space in the host, a % that is no
// escape) fails for every operation. What the actions render is each
// operation's own (a printf of a field the sample lacks is no URL).
func checkURLTemplate(t *template.Template, origin, dest string) error {
	if err := checkTemplate(t, dest); err != nil {
		return err
	}
	if t.Tree == nil || t.Tree.Root == nil {
		return nil
	}
	var b strings.Builder
	for _, n := range t.Tree.Root.Nodes {
		if text, ok := n.(*parse.TextNode); ok {
			b.Write(text.Text)
		} else {
			b.WriteString("25")
		}
	}
	_, err := requestURL(b.String(), origin)
	return err
}

// readsPayload reports whether the action a template failed at reads the
// payload, directly or through a variable.
func readsPayload(action string) bool {
	return strings.Contains(action, "Payload") || strings.Contains(action, "$")
}

// checkTemplateFields checks every field read from the operation in t:
// at the top level and in if branches (where dot is the operation), and
// through $ anywhere. Its defined templates are not checked: one may be
// given another value than the operation ({{template "x" .Payload}}).
func checkTemplateFields(t *template.Template) error {
	if t.Tree == nil {
		return nil
	}
	var found error
	operationFieldReads(t.Tree.Root, func(ident []string) bool {
		found = checkFieldPath(ident)
		return found != nil
	})
	return found
}

// operationFieldReads walks the actions under root and calls visit with
// the path of each field they read from the operation (["Kee"] for .Kee,
// ["Key", "x"] for .Key.x or $.Key.x), until visit returns true: .name
// where dot is the operation (not inside a with or range, where it is
// another value), and $.name anywhere. Comments and
// literal text read nothing, however they spell a field.
func operationFieldReads(root parse.Node, visit func(ident []string) (stop bool)) {
	stopped := false
	var walk func(n parse.Node, dotIsOp bool)
	walk = func(n parse.Node, dotIsOp bool) {
		if stopped || n == nil {
			return
		}
		switch n := n.(type) {
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c, dotIsOp)
			}
		case *parse.ActionNode:
			walk(n.Pipe, dotIsOp)
		case *parse.IfNode:
			walk(n.Pipe, dotIsOp)
			walk(n.List, dotIsOp)
			walk(n.ElseList, dotIsOp)
		case *parse.WithNode:
			walk(n.Pipe, dotIsOp)
			walk(n.List, false) // dot is the value of the pipeline
			walk(n.ElseList, dotIsOp)
		case *parse.RangeNode:
			walk(n.Pipe, dotIsOp)
			walk(n.List, false) // dot is each element
			walk(n.ElseList, dotIsOp)
		case *parse.TemplateNode:
			walk(n.Pipe, dotIsOp)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			for _, c := range n.Cmds {
				for _, a := range c.Args {
					walk(a, dotIsOp)
				}
			}
		case *parse.ChainNode:
			walk(n.Node, dotIsOp)
			if _, onDot := n.Node.(*parse.DotNode); onDot && dotIsOp && len(n.Field) > 0 && !stopped {
				stopped = visit(n.Field)
			}
		case *parse.FieldNode:
			if dotIsOp {
				stopped = visit(n.Ident)
			}
		case *parse.VariableNode:
			if n.Ident[0] == "$" && len(n.Ident) > 1 {
				stopped = visit(n.Ident[1:])
			}
		}
	}
	walk(root, true)
}

// checkFieldPath checks a chain of fields read from the operation
// (["Kee"] for .Kee, ["Key", "x"] for .Key.x).
func checkFieldPath(ident []string) error {
	name := ident[0]
	switch {
	case name == "Payload":
		return nil
	case !slices.Contains(templateFields, name):
		mean := ""
		if s := nearField(name); s != "" {
			mean = ", did you mean ." + s + "?"
		}
		return fmt.Errorf(".%s is not a field of the operation%s (fields: %s)", name, mean, templateFieldList())
	case len(ident) > 1:
		kind := "text"
		if name == "Version" {
			kind = "a number"
		}
		return fmt.Errorf(".%s.%s: .%s is %s, which has no fields (only .Payload has)", name, strings.Join(ident[1:], "."), name, kind)
	}
	return nil
}

// nearField is the one field name that name spells in another case or
// one letter off (a letter dropped, added or changed), or "".
func nearField(name string) string {
	found := ""
	for _, f := range templateFields {
		if strings.EqualFold(f, name) || oneEditApart(strings.ToLower(f), strings.ToLower(name)) {
			if found != "" {
				return ""
			}
			found = f
		}
	}
	return found
}

// oneEditApart reports whether a and b differ by exactly one inserted,
// deleted or changed byte.
func oneEditApart(a, b string) bool {
	if len(a) < len(b) {
		a, b = b, a
	}
	switch len(a) - len(b) {
	case 0:
		diff := 0
		for i := range len(a) {
			if a[i] != b[i] {
				diff++
			}
		}
		return diff == 1
	case 1:
		for i := range len(b) {
			if a[i] != b[i] {
				return a[i+1:] == b[i:]
			}
		}
		return true
	}
	return false
}

// execError splits text/template's execution errors: "template: NAME:
// LINE:COL: executing "NAME" at <ACTION>: MESSAGE".
var execError = regexp.MustCompile(`(?s)^template: \S+: executing "[^"]*" at <(.*?)>: (.*)$`)

// splitExecError returns the action a template failed at and the message.
func splitExecError(err error) (action, msg string, ok bool) {
	var ee template.ExecError
	if !errors.As(err, &ee) {
		return "", "", false
	}
	// A value printed refused (guardPrinting) fails at the action that
	// prints it, not at the function it appended.
	if up, isUnprinted := errors.AsType[*unprintedError](err); isUnprinted {
		return up.action, up.Error(), true
	}
	m := execError.FindStringSubmatch(ee.Error())
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// cantEvaluate is text/template's message for a field its value lacks.
var cantEvaluate = regexp.MustCompile(`^can't evaluate field (\S+) in type (.+)$`)

// goTypeNames words the Go types text/template names in its messages.
var goTypeNames = strings.NewReplacer(
	"*destination.templateData", "the operation",
	"destination.templateData", "the operation",
	"map[string]interface {}", "object",
	"[]interface {}", "array",
	"interface {}", "value",
	"json.Number", "number",
	"int64", "number",
)

// templateErrorText is the error of running a template in the terms of
// docs/destinations.md: the action that failed ("{{.Kee}}") and why,
// without Go's type names. It is the load-time check's (checkTemplate),
// run on the sample operation, whose values are no one's: an operation's
// own failure is worded by renderErrorText.
func templateErrorText(err error) string {
	action, msg, ok := splitExecError(err)
	if !ok {
		return goTypeNames.Replace(strings.TrimPrefix(err.Error(), "template: "))
	}
	return actionText(action) + ": " + execMessage(msg)
}

// actionText writes the action a template failed at as in the template:
// "{{.Kee}}".
func actionText(action string) string {
	if !strings.HasPrefix(action, "{{") {
		action = "{{" + action + "}}"
	}
	return action
}

// execMessage words text/template's message msg without Go's type names,
// a field the value lacks in the terms of the operation.
func execMessage(msg string) string {
	if m := cantEvaluate.FindStringSubmatch(msg); m != nil {
		if err := checkFieldPath([]string{m[1]}); err != nil && strings.Contains(m[2], "templateData") {
			return err.Error()
		}
		msg = fmt.Sprintf("the value has no field %s", m[1])
	}
	return goTypeNames.Replace(msg)
}

// renderErrorText is templateErrorText for an operation's own content
// (render): the action that failed and why, but never a value of the
// payload. Some of text/template's messages quote the value they failed
// on ("range can't iterate over <value>", "non-comparable type <value>",
// a method's error "parsing \"<value>\""), and the text becomes the
// attempt's error, the operation's last error or a held operation's
// reason, shown to every reader of it. So only the messages known to
// name nothing but the template's own text and Go types are kept; the
// known ones that quote a value are worded without it, and any other
// is left out.
func renderErrorText(err error) string {
	action, msg, ok := splitExecError(err)
	if !ok {
		return "the template cannot be rendered from this operation's content " + messageLeftOut
	}
	return actionText(action) + ": " + execMessage(safeExecMessage(msg))
}

// messageLeftOut says why a message of text/template is not shown.
const messageLeftOut = "(text/template's message is left out: it may quote a value of the payload)"

// quotesNoValue matches text/template's messages (exec.go, funcs.go) that
// name only the template's own text (fields, functions, counts) and Go
// types; the index of "index out of range" is the template's too (a
// payload's numbers are never whole numbers to text/template).
var quotesNoValue = regexp.MustCompile(`^(?:` +
	`can't evaluate field \S+ in type .+|map has no entry for key "[^"]*"|nil pointer evaluating .+|` +
	`wrong type for value; expected [^;]+; got .+|wrong number of args for \S+: (?:want|got) .+|` +
	`invalid value; expected .+|` +
	// printed's own (guardPrinting), which splitExecError unwraps.
	`the value is (?:null|an object|an array), which would be written as no content of the operation; write \{\{json …\}\} to send it as JSON|` +
	`error calling \S+: (?:arg \d+: )?(?:` +
	`incompatible types for comparison: .+ and .+|invalid type for comparison|missing argument for comparison|` +
	`len of type .+|len of nil pointer|index of untyped nil|index of nil pointer|` +
	`cannot index slice/array with (?:nil|type .+)|can't index item of type .+|index out of range: -?\d+|` +
	`slice of untyped nil|slice of nil pointer|too many slice indexes: \d+|cannot 3-index slice a string|` +
	`can't slice item of type .+|invalid slice index: -?\d+ > -?\d+|` +
	`value has type .+; should be .+|value is nil; should be of type .+|` +
	`wrong number of args for \S+: got .+|` +
	// pathescape's and urlquery's own (urlValue).
	`the value is (?:null|an object|an array), which a URL cannot carry|` +
	`the value is empty, which leaves the path segment out|the value is a dot segment, which names another path` +
	`))$`)

// valueQuoted are text/template's messages known to quote the value
// they failed on, by their start, and how they are said without it.
var valueQuoted = []struct{ prefix, says string }{
	{"range can't iterate over ", "range can't iterate over the value: it is not an array or an object"},
	{"can't use ", "range can't use the value with two variables"},
	{"if/with can't use ", "if/with can't use the value"},
}

// callFailed is the start of a function's or method's failure: "error
// calling eq: non-comparable type <value>: …".
var callFailed = regexp.MustCompile(`^error calling (\S+): `)

// safeExecMessage is msg if it quotes no value (quotesNoValue), or the
// same said without the value, or without the message.
func safeExecMessage(msg string) string {
	if quotesNoValue.MatchString(msg) {
		return msg
	}
	for _, q := range valueQuoted {
		if strings.HasPrefix(msg, q.prefix) {
			return q.says
		}
	}
	if m := callFailed.FindStringSubmatch(msg); m != nil {
		if strings.Contains(msg, "non-comparable type") {
			return "error calling " + m[1] + ": the values cannot be compared (objects and arrays cannot be)"
		}
		return "error calling " + m[1] + " " + messageLeftOut
	}
	return "cannot be rendered from this operation's content " + messageLeftOut
}

// readsField reports whether an action of t (in any branch, and in its
// defined templates, each taken as given the operation) reads the
// operation's field name (operationFieldReads).
func readsField(t *template.Template, name string) bool {
	if t == nil {
		return false
	}
	found := false
	for _, tt := range t.Templates() {
		if tt.Tree != nil && !found {
			operationFieldReads(tt.Tree.Root, func(ident []string) bool {
				found = ident[0] == name
				return found
			})
		}
	}
	return found
}

package opledger

import (
	"fmt"
	"slices"
	"strings"
)

// sensitiveSource is an event path whose value a rule's operation marks
// sensitive: the placeholder that fills a sensitive field of its payload,
// or that the field reaches into.
type sensitiveSource struct {
	path  []string // the event path, "data.customer.email"
	op    int      // the operation whose sensitive_fields marks it
	field string   // that entry of sensitive_fields
}

// sensitiveSources lists the event paths c's operations mark sensitive:
// the placeholders at or under each sensitive field of a payload
// template, and a whole placeholder ("{data.customer}") that a field
// reaches into ("customer.email"), with the rest of the field's path
// ("data.customer.email"). A field reaches into every element of an
// array, and names a member spelled with its dots, as masking does.
func sensitiveSources(c *compiledRule) []sensitiveSource {
	var out []sensitiveSource
	for i, op := range c.ops {
		for _, f := range op.SensitiveFields {
			for _, p := range op.payload.reach(strings.Split(f, ".")) {
				out = append(out, sensitiveSource{path: p, op: i, field: f})
			}
		}
	}
	return out
}

// reach returns the event paths whose values end up at path in what v
// renders, or under it.
func (v *valueTmpl) reach(path []string) [][]string {
	var out [][]string
	v.walk(path, func(n *valueTmpl, rest []string) {
		switch t, _ := n.node.(*tmpl); {
		case len(rest) == 0:
			out = append(out, n.placeholders()...)
		case t != nil && t.whole():
			out = append(out, append(slices.Clone(t.parts[0].path), rest...))
		}
	})
	return out
}

// walk calls visit with every node of v that path leads to, and what is
// left of path there: nothing at the path's end, or the rest at a string
// template or a literal, which a path cannot be followed into. A path
// goes into every element of an array on its way, and names a member
// spelled with its dots too ("customer.email"), as masking does.
func (v *valueTmpl) walk(path []string, visit func(n *valueTmpl, rest []string)) {
	if len(path) == 0 {
		visit(v, nil)
		return
	}
	switch x := v.node.(type) {
	case map[string]*valueTmpl:
		for n := 1; n <= len(path); n++ {
			if el, ok := x[strings.Join(path[:n], ".")]; ok {
				el.walk(path[n:], visit)
			}
		}
	case []*valueTmpl:
		for _, el := range x {
			el.walk(path, visit)
		}
	default:
		visit(v, path)
	}
}

// checkKeysNotSensitive refuses a rule whose keys, update keys, object id
// or ordering value take a value that one of its operations marks
// sensitive: those are stored and shown as they are (lists, the console,
// logs, URLs), never masked, so a name or an address in them would be
// shown wherever the operation is.
func checkKeysNotSensitive(c *compiledRule, fail func(field string, err error) error) error {
	sources := sensitiveSources(c)
	if len(sources) == 0 {
		return nil
	}
	check := func(field string, paths [][]string) error {
		for _, q := range paths {
			for _, s := range sources {
				// Without array indices: a sensitive field reaches every
				// element ("items.card"), a placeholder one ("items.0.card").
				if qi, si := withoutIndices(q), withoutIndices(s.path); hasPathPrefix(qi, si) || hasPathPrefix(si, qi) {
					return fail(field, fmt.Errorf("takes {%s}, which operations[%d].sensitive_fields marks sensitive (%s): "+
						"keys, object ids and ordering values are shown as they are in lists, logs and URLs, never masked; "+
						"build them from an identifier instead", strings.Join(q, "."), s.op, s.field))
				}
			}
		}
		return nil
	}
	if c.objID != nil {
		if err := check("object.id", c.objID.placeholders()); err != nil {
			return err
		}
		if err := check("object.order_by", [][]string{c.orderBy}); err != nil {
			return err
		}
	}
	for i, op := range c.ops {
		if err := check(fmt.Sprintf("operations[%d].key", i), op.key.placeholders()); err != nil {
			return err
		}
		if op.updateKey != nil {
			if err := check(fmt.Sprintf("operations[%d].update_key", i), op.updateKey.placeholders()); err != nil {
				return err
			}
		}
	}
	return nil
}

// withoutIndices is path without its all-digit segments, the array
// indices a placeholder may name (a member named "0" is taken for one:
// the comparison errs on the side of refusing).
func withoutIndices(path []string) []string {
	return slices.DeleteFunc(slices.Clone(path), func(seg string) bool {
		return strings.Trim(seg, "0123456789") == ""
	})
}

// hasPathPrefix reports whether path starts with prefix.
func hasPathPrefix(path, prefix []string) bool {
	return len(prefix) <= len(path) && slices.Equal(path[:len(prefix)], prefix)
}

// reaches reports whether path names something in what v renders: a
// member of an object (in every element of an array on the way, and
// also one spelled with the path's dots), anything under a whole
// placeholder, which may be an object, or a value at the path's end.
func (v *valueTmpl) reaches(path []string) bool {
	found := false
	v.walk(path, func(n *valueTmpl, rest []string) {
		t, _ := n.node.(*tmpl)
		found = found || len(rest) == 0 || t != nil && t.whole()
	})
	return found
}

package opledger

import (
	"fmt"
	"maps"
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

// copiedSensitive lists the payload paths of v, an operation's payload
// template, that take a value one of the rule's operations marks
// sensitive (sources, from sensitiveSources), beyond those its own
// sensitive_fields lists (declared): a rule that copies a sensitive
// value into another field of the payload or of another operation's
// ({data.applicant.email} whole, or inside "Hello
// {data.applicant.email}") would show it there unmasked. A placeholder
// at or under a sensitive value makes the field it fills sensitive, the
// whole text for one inside text; one that copies an object holding a
// sensitive value whole ("{data.applicant}" for data.applicant.email)
// makes that member of the field sensitive ("copy.email"), as workflows
// mark what a step copies from an earlier step's masked values. Paths
// leave out array positions, as sensitive_fields does. A path no
// sensitive_fields entry can spell (too long, a member name with an
// empty segment) is cut to the longest ancestor that can be, which
// masks more, never less; a value that has no such ancestor (the
// payload itself, a member named "") is an error naming the member and
// the placeholder.
func copiedSensitive(v *valueTmpl, sources []sensitiveSource, declared []string) ([]string, error) {
	if len(sources) == 0 {
		return nil, nil
	}
	var out []string
	var err error
	add := func(members []string, q []string, s sensitiveSource) {
		for n := len(members); n > 0; n-- {
			if p := strings.Join(members[:n], "."); checkSensitiveField(p) == nil {
				if !slices.Contains(declared, p) && !slices.Contains(out, p) {
					out = append(out, p)
				}
				return
			}
		}
		if err == nil {
			where := "the payload itself"
			if len(members) > 0 {
				where = fmt.Sprintf("payload member %q", members[0])
			}
			err = fmt.Errorf("%s takes {%s}, which operations[%d].sensitive_fields marks sensitive (%s), "+
				"and no sensitive_fields path can name it to mask it there: put it in a member of its own with a plain name",
				where, strings.Join(q, "."), s.op, s.field)
		}
	}
	var walk func(v *valueTmpl, members []string)
	walk = func(v *valueTmpl, members []string) {
		switch x := v.node.(type) {
		case map[string]*valueTmpl:
			// In name order, so that the paths and the first error are
			// always the same.
			for _, k := range slices.Sorted(maps.Keys(x)) {
				walk(x[k], append(members[:len(members):len(members)], k))
			}
		case []*valueTmpl:
			for _, el := range x {
				walk(el, members)
			}
		case *tmpl:
			for _, q := range x.placeholders() {
				qi := withoutIndices(q)
				for _, s := range sources {
					// Without array indices, as checkKeysNotSensitive
					// compares them.
					switch si := withoutIndices(s.path); {
					case hasPathPrefix(qi, si):
						add(members, q, s) // the sensitive value, or inside it
					case hasPathPrefix(si, qi) && x.whole():
						// An object holding it, copied whole: the
						// sensitive value is at the rest of its path.
						add(append(members[:len(members):len(members)], si[len(qi):]...), q, s)
					case hasPathPrefix(si, qi):
						add(members, q, s) // around it, in text: the whole text
					}
				}
			}
		}
	}
	walk(v, nil)
	return out, err
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

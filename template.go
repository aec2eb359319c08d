package opledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Templates fill keys and payloads from an event or from earlier workflow
// steps. A placeholder is a dotted path in braces, "{data.submission_id}":
// object fields by name, array elements by index ("{data.items.0.sku}").
// A string that is exactly one placeholder takes the value at the path
// whatever its JSON type; a placeholder inside other text must name a
// string, number or boolean, and a number is written there in its
// canonical decimal form (decimalText). Errors name the path, never the
// value.

// tmplPart is a literal or a placeholder of a template.
type tmplPart struct {
	lit  string
	path []string // nil for a literal
}

// tmpl is a parsed string template.
type tmpl struct {
	src   string
	parts []tmplPart
}

// parseTemplate parses s. In strict mode (mapping rules) every '{' starts a
// placeholder whose first segment must be one of roots, and "{{" and "}}"
// stand for literal braces. In lenient mode (workflow payloads, which carry
// arbitrary caller text) only "{root.…}" with a known root is a
// placeholder; any other brace is literal text.
func parseTemplate(s string, roots []string, strict bool) (*tmpl, error) {
	t := &tmpl{src: s}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, tmplPart{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strict && (c == '{' || c == '}') && i+1 < len(s) && s[i+1] == c {
			lit.WriteByte(c)
			i++
			continue
		}
		if c == '}' && strict {
			return nil, fmt.Errorf("unmatched '}' at byte %d (write }} for a literal brace)", i)
		}
		if c != '{' {
			lit.WriteByte(c)
			continue
		}
		end := strings.IndexByte(s[i+1:], '}')
		if end < 0 {
			if strict {
				return nil, fmt.Errorf("unclosed '{' at byte %d (write {{ for a literal brace)", i)
			}
			lit.WriteString(s[i:])
			break
		}
		inner := s[i+1 : i+1+end]
		path, err := parsePath(inner, roots)
		if err != nil {
			if strict {
				return nil, err
			}
			lit.WriteByte(c)
			continue
		}
		flush()
		t.parts = append(t.parts, tmplPart{path: path})
		i += end + 1
	}
	flush()
	return t, nil
}

// parsePath checks a dotted path and its root.
func parsePath(p string, roots []string) ([]string, error) {
	if p == "" {
		return nil, fmt.Errorf("empty placeholder {}")
	}
	segs := strings.Split(p, ".")
	for _, seg := range segs {
		if seg == "" {
			return nil, fmt.Errorf("placeholder {%s} has an empty path segment", p)
		}
		for j := 0; j < len(seg); j++ {
			c := seg[j]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return nil, fmt.Errorf("placeholder {%s}: path segments may contain letters, digits, _ and -", p)
			}
		}
	}
	for _, r := range roots {
		if segs[0] == r {
			return segs, nil
		}
	}
	return nil, fmt.Errorf("placeholder {%s} must start with %s", p, strings.Join(roots, ", "))
}

// placeholders lists the paths a template uses.
func (t *tmpl) placeholders() [][]string {
	var out [][]string
	for _, p := range t.parts {
		if p.path != nil {
			out = append(out, p.path)
		}
	}
	return out
}

// whole reports whether the template is exactly one placeholder.
func (t *tmpl) whole() bool { return len(t.parts) == 1 && t.parts[0].path != nil }

// renderString fills the template; every placeholder must be a scalar.
func (t *tmpl) renderString(ctx map[string]any) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.path == nil {
			b.WriteString(p.lit)
			continue
		}
		v, err := lookupPath(ctx, p.path)
		if err != nil {
			return "", err
		}
		s, err := scalarText(v, p.path)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// renderValue fills the template as a JSON value: a whole placeholder keeps
// the type of its value, anything else is a string.
func (t *tmpl) renderValue(ctx map[string]any) (any, error) {
	if t.whole() {
		return lookupPath(ctx, t.parts[0].path)
	}
	return t.renderString(ctx)
}

// lookupPath finds the value at path in ctx.
func lookupPath(ctx map[string]any, path []string) (any, error) {
	var cur any = ctx
	for i, seg := range path {
		switch node := cur.(type) {
		case map[string]any:
			v, ok := node[seg]
			if !ok {
				return nil, fmt.Errorf("%s is missing", strings.Join(path[:i+1], "."))
			}
			cur = v
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(node) {
				return nil, fmt.Errorf("%s is missing (index out of range or not a number)", strings.Join(path[:i+1], "."))
			}
			cur = node[n]
		default:
			return nil, fmt.Errorf("%s is missing (%s is not an object)", strings.Join(path[:i+1], "."), strings.Join(path[:i], "."))
		}
	}
	return cur, nil
}

// scalarText renders a string, number or boolean as text. A number is
// written in its canonical decimal form (decimalText), so that one value
// gives one key however the sender spelled it.
func scalarText(v any, path []string) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return decimalText(x.String(), path)
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("%s is not a finite number", strings.Join(path, "."))
		}
		return decimalText(strconv.FormatFloat(x, 'g', -1, 64), path)
	case nil:
		return "", fmt.Errorf("%s is null", strings.Join(path, "."))
	}
	return "", fmt.Errorf("%s is not a string, number or boolean", strings.Join(path, "."))
}

// maxNumberText bounds the decimal form of a number written into text
// where it is longer than the number as sent: a short exponent
// ("1e999999999") must not make a key or a payload text of a billion
// digits. It exceeds the 309 digits of the largest double.
const maxNumberText = 400

// decimalText writes the number n (JSON number syntax) exactly, in the
// one decimal form every spelling of its value shares: no exponent, no
// leading zeros, no trailing fractional zeros, no sign on zero (8.5e2,
// 850.0 and 850 are "850"; 1e-3 is "0.001"). It never goes through a
// double, so distinct integers of any length stay distinct. A form
// longer than both maxNumberText and n itself is an error naming path,
// never the value, and is refused before anything is built.
func decimalText(n string, path []string) (string, error) {
	d, ok := parseDecimal(n)
	if !ok {
		return "", fmt.Errorf("%s is not a decimal number", strings.Join(path, "."))
	}
	if d.digits == "" {
		return "0", nil
	}
	// d is 0.digits × 10^exp: exp digits before the point.
	limit := int64(max(maxNumberText, len(n)))
	if !d.exp.IsInt64() || d.exp.Int64() > limit || d.exp.Int64() < -limit {
		return "", errNumberTooLong(path)
	}
	exp, nd := d.exp.Int64(), int64(len(d.digits))
	size := nd + 1 // digits and a point
	switch {
	case exp >= nd:
		size = exp
	case exp <= 0:
		size = 2 - exp + nd // "0." and zeros before the digits
	}
	if d.neg {
		size++
	}
	if size > limit {
		return "", errNumberTooLong(path)
	}
	var b strings.Builder
	b.Grow(int(size))
	if d.neg {
		b.WriteByte('-')
	}
	switch {
	case exp >= nd:
		b.WriteString(d.digits)
		b.WriteString(strings.Repeat("0", int(exp-nd)))
	case exp > 0:
		b.WriteString(d.digits[:exp])
		b.WriteByte('.')
		b.WriteString(d.digits[exp:])
	default:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", int(-exp)))
		b.WriteString(d.digits)
	}
	return b.String(), nil
}

// errNumberTooLong refuses a number whose decimal form would be too long.
func errNumberTooLong(path []string) error {
	return fmt.Errorf("%s is a number whose decimal form would be longer than %d characters", strings.Join(path, "."), maxNumberText)
}

// valueTmpl is a JSON value whose strings may be templates.
type valueTmpl struct {
	node any // map[string]*valueTmpl, []*valueTmpl, *tmpl, or a JSON scalar
}

// compileValue turns a decoded JSON or YAML value into a value template.
func compileValue(v any, roots []string, strict bool) (*valueTmpl, error) {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]*valueTmpl, len(x))
		for k, el := range x {
			c, err := compileValue(el, roots, strict)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			m[k] = c
		}
		return &valueTmpl{node: m}, nil
	case []any:
		l := make([]*valueTmpl, len(x))
		for i, el := range x {
			c, err := compileValue(el, roots, strict)
			if err != nil {
				return nil, fmt.Errorf("%d: %w", i, err)
			}
			l[i] = c
		}
		return &valueTmpl{node: l}, nil
	case string:
		t, err := parseTemplate(x, roots, strict)
		if err != nil {
			return nil, err
		}
		if len(t.placeholders()) == 0 {
			return &valueTmpl{node: t.src}, nil
		}
		return &valueTmpl{node: t}, nil
	case map[any]any:
		return nil, fmt.Errorf("object keys must be strings")
	case float64:
		// YAML's .nan and .inf decode, but JSON has no such numbers: every
		// payload holding one would fail to encode.
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", x)
		}
	case float32:
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", x)
		}
	}
	return &valueTmpl{node: v}, nil
}

// placeholders lists every path the value template uses.
func (v *valueTmpl) placeholders() [][]string {
	switch x := v.node.(type) {
	case map[string]*valueTmpl:
		var out [][]string
		for _, el := range x {
			out = append(out, el.placeholders()...)
		}
		return out
	case []*valueTmpl:
		var out [][]string
		for _, el := range x {
			out = append(out, el.placeholders()...)
		}
		return out
	case *tmpl:
		return x.placeholders()
	}
	return nil
}

// unnamed returns the templates of v that no path can name: those no
// object member holds (v itself, or the elements of lists at its top),
// and those under a member whose name no path can spell (empty, or longer
// than a name may be), through which no path can be written either.
func (v *valueTmpl) unnamed() []*tmpl { return v.pathless(false) }

// pathless is unnamed, or, with all, every template in v.
func (v *valueTmpl) pathless(all bool) []*tmpl {
	var out []*tmpl
	switch x := v.node.(type) {
	case map[string]*valueTmpl:
		for k, el := range x {
			if all || k == "" || len(k) > maxNameLength {
				out = append(out, el.pathless(true)...)
			}
		}
	case []*valueTmpl:
		for _, el := range x {
			out = append(out, el.pathless(all)...)
		}
	case *tmpl:
		out = append(out, x)
	}
	return out
}

// render fills the value template.
func (v *valueTmpl) render(ctx map[string]any) (any, error) {
	switch x := v.node.(type) {
	case map[string]*valueTmpl:
		out := make(map[string]any, len(x))
		// In key order, so that the first error is always the same one.
		for _, k := range slices.Sorted(maps.Keys(x)) {
			el := x[k]
			r, err := el.render(ctx)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []*valueTmpl:
		out := make([]any, len(x))
		for i, el := range x {
			r, err := el.render(ctx)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case *tmpl:
		return x.renderValue(ctx)
	}
	return v.node, nil
}

// changedPaths lists, sorted, the dotted paths (array positions left out,
// as sensitive field paths spell them) of the values v renders otherwise
// from other than from ctx, or cannot render from other. A placeholder
// that fills a whole object contributes the paths of the leaves that
// differ. The path of a payload that is itself one placeholder is "".
func (v *valueTmpl) changedPaths(ctx, other map[string]any) []string {
	var out []string
	var walk func(v *valueTmpl, path []string)
	walk = func(v *valueTmpl, path []string) {
		switch x := v.node.(type) {
		case map[string]*valueTmpl:
			for k, el := range x {
				walk(el, append(path[:len(path):len(path)], k))
			}
		case []*valueTmpl:
			for _, el := range x {
				walk(el, path)
			}
		case *tmpl:
			a, errA := x.renderValue(ctx)
			b, errB := x.renderValue(other)
			if errA != nil || errB != nil {
				out = append(out, strings.Join(path, "."))
				return
			}
			diffPaths(a, b, path, &out)
		}
	}
	walk(v, nil)
	slices.Sort(out)
	return slices.Compact(out)
}

// diffPaths appends to out the dotted paths at which the decoded values a
// and b differ: member by member in objects, element by element in arrays
// of one length, else at path itself. A member of a that b lacks (b
// shows its name masked) makes the object at path differ as a whole: a
// path holding the name would show it, in the sensitive fields of the
// step that inherits it, and the payload masked at it would still show
// the name. An object that is the whole payload (or an element of a list
// that is) has no path that can mask its member names: its path is ""
// (errNoPathToMask: put such a value in a field), never the name itself,
// which would show the name in the step's payload and sensitive fields.
func diffPaths(a, b any, path []string, out *[]string) {
	am, aObj := a.(map[string]any)
	bm, bObj := b.(map[string]any)
	if aObj && bObj {
		for k, el := range am {
			other, ok := bm[k]
			if !ok {
				*out = append(*out, strings.Join(path, "."))
				continue
			}
			diffPaths(el, other, append(path[:len(path):len(path)], k), out)
		}
		return
	}
	al, aList := a.([]any)
	bl, bList := b.([]any)
	if aList && bList && len(al) == len(bl) {
		for i := range al {
			diffPaths(al[i], bl[i], path, out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, strings.Join(path, "."))
	}
}

// renderJSON fills the value template and encodes the result.
func (v *valueTmpl) renderJSON(ctx map[string]any) (json.RawMessage, error) {
	r, err := v.render(ctx)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	return out, nil
}

// decodeJSON decodes JSON keeping numbers exact (json.Number).
func decodeJSON(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

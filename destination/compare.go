package destination

import (
	"cmp"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"text/template"

	"github.com/opledger/opledger/internal/jsonnum"
)

// A payload's numbers reach templates as json.Number, exact as written,
// which text/template's comparisons take for text: "lt .Payload.units 3"
// would fail for every operation ("incompatible types for comparison")
// and "lt .Payload.a .Payload.b" would compare digits ("10" before
// "9.99"). The comparison functions below replace text/template's own:
// a JSON number of the payload compared with a number (the template's,
// or another of the payload's) is compared by its exact value; any other
// pair is compared as text/template compares it, with its errors.

// comparisonFuncs are eq, ne, lt, le, gt and ge, numbers compared by
// value, and printf, numbers formatted as numbers.
var comparisonFuncs = template.FuncMap{
	"eq": func(a any, bs ...any) (bool, error) {
		if len(bs) == 0 {
			return builtinCompare("eq", a, nil, true)
		}
		for _, b := range bs {
			if same, err := compare("eq", a, b); err != nil || same {
				return same, err
			}
		}
		return false, nil
	},
	"ne": func(a, b any) (bool, error) { return compare("ne", a, b) },
	"lt": func(a, b any) (bool, error) { return compare("lt", a, b) },
	"le": func(a, b any) (bool, error) { return compare("le", a, b) },
	"gt": func(a, b any) (bool, error) { return compare("gt", a, b) },
	"ge": func(a, b any) (bool, error) { return compare("ge", a, b) },
	// printf formats the payload's numbers as numbers too (printf.go).
	"printf": printf,
}

// compare applies op to a and b: by value when one is a payload's JSON
// number and the other a number, otherwise as text/template does.
func compare(op string, a, b any) (bool, error) {
	_, aJSON := a.(json.Number)
	_, bJSON := b.(json.Number)
	if aJSON || bJSON {
		x, xok := numberValue(a)
		y, yok := numberValue(b)
		if xok && yok {
			c := compareExact(x, y)
			switch op {
			case "eq":
				return c == 0, nil
			case "ne":
				return c != 0, nil
			case "lt":
				return c < 0, nil
			case "le":
				return c <= 0, nil
			case "gt":
				return c > 0, nil
			default: // ge
				return c >= 0, nil
			}
		}
	}
	return builtinCompare(op, a, b, false)
}

// exactValue is a number's exact value: its sign, its significant digits
// (no leading or trailing zeros; none for zero) and the power of ten
// they are multiplied by, as jsonnum.Exact writes it.
type exactValue struct {
	negative bool
	digits   string
	exp      int64
}

// numberValue is v's exact value when v is a number: a payload's JSON
// number, or one written in the template (an int, or a float64 taken as
// its shortest decimal form, so that 0.1 is the payload's 0.1).
func numberValue(v any) (exactValue, bool) {
	var text string
	switch x := v.(type) {
	case json.Number:
		text = string(x)
	case int:
		text = strconv.Itoa(x)
	case int64:
		text = strconv.FormatInt(x, 10)
	case uint64:
		text = strconv.FormatUint(x, 10)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return exactValue{}, false
		}
		text = strconv.FormatFloat(x, 'g', -1, 64)
	default:
		return exactValue{}, false
	}
	e, err := jsonnum.Exact(text)
	if err != nil {
		return exactValue{}, false
	}
	mantissa, expText, _ := strings.Cut(e, "e")
	exp, err := strconv.ParseInt(expText, 10, 64)
	if err != nil {
		return exactValue{}, false
	}
	n := exactValue{negative: strings.HasPrefix(mantissa, "-"), digits: strings.TrimPrefix(mantissa, "-"), exp: exp}
	if n.digits == "0" {
		return exactValue{}, true
	}
	return n, true
}

// compareExact is -1, 0 or 1 as x is less than, equal to or greater
// than y; linear in their digits, whatever their exponents.
func compareExact(x, y exactValue) int {
	sign := func(n exactValue) int {
		switch {
		case n.digits == "":
			return 0
		case n.negative:
			return -1
		}
		return 1
	}
	sx, sy := sign(x), sign(y)
	if sx != sy || sx == 0 {
		return cmp.Compare(sx, sy)
	}
	// The same sign: compare the magnitudes, then turn for negatives.
	c := cmp.Compare(int64(len(x.digits))+x.exp, int64(len(y.digits))+y.exp)
	if c == 0 {
		// The leading digits stand at the same power of ten; without
		// trailing zeros, the digits compare as text.
		c = strings.Compare(x.digits, y.digits)
	}
	return c * sx
}

// builtins are text/template's own comparisons, for the pairs compare
// does not compare itself; onlyA: eq given one argument.
var builtins = template.Must(template.New("compare").Parse(
	`{{if .OnlyA}}{{eq .A}}{{else if eq .Op "eq"}}{{eq .A .B}}{{else if eq .Op "ne"}}{{ne .A .B}}` +
		`{{else if eq .Op "lt"}}{{lt .A .B}}{{else if eq .Op "le"}}{{le .A .B}}` +
		`{{else if eq .Op "gt"}}{{gt .A .B}}{{else}}{{ge .A .B}}{{end}}`))

// builtinCompare applies text/template's own op to a and b. Its error is
// text/template's message for the comparison alone ("incompatible types
// for comparison: …"), as text/template would give it.
func builtinCompare(op string, a, b any, onlyA bool) (bool, error) {
	var out strings.Builder
	err := builtins.Execute(&out, struct {
		Op    string
		A, B  any
		OnlyA bool
	}{op, a, b, onlyA})
	if err != nil {
		if _, msg, ok := splitExecError(err); ok {
			if _, inner, found := strings.Cut(msg, "error calling "+op+": "); found {
				return false, errors.New(inner)
			}
			return false, errors.New(msg)
		}
		return false, err
	}
	return out.String() == "true", nil
}

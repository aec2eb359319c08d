package destination

import (
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
			c := jsonnum.Compare(x, y)
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

// numberValue is v's exact value when v is a number: a payload's JSON
// number, or one written in the template (an int, or a float64 taken as
// its shortest decimal form, so that 0.1 is the payload's 0.1).
func numberValue(v any) (jsonnum.Value, bool) {
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
			return jsonnum.Value{}, false
		}
		text = strconv.FormatFloat(x, 'g', -1, 64)
	default:
		return jsonnum.Value{}, false
	}
	n, err := jsonnum.Parse(text)
	return n, err == nil
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

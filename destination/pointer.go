package destination

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/opledger/opledger/internal/jsonnum"
)

// pointer is a parsed RFC 6901 JSON pointer.
type pointer struct {
	text   string
	tokens []string
}

// parsePointer parses a JSON pointer: "" is the whole document, anything
// else starts with "/"; "~1" stands for "/" and "~0" for "~".
func parsePointer(s string) (pointer, error) {
	if s == "" {
		return pointer{}, nil
	}
	if s[0] != '/' {
		return pointer{}, fmt.Errorf("JSON pointer %q must start with /", s)
	}
	parts := strings.Split(s[1:], "/")
	for i, p := range parts {
		for j := 0; j < len(p); j++ {
			if p[j] == '~' && (j+1 == len(p) || (p[j+1] != '0' && p[j+1] != '1')) {
				return pointer{}, fmt.Errorf("JSON pointer %q: ~ must be followed by 0 or 1", s)
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return pointer{text: s, tokens: parts}, nil
}

// String returns the pointer as written.
func (p pointer) String() string { return p.text }

// get returns the value p points at in doc (as decoded by decodeJSON).
func (p pointer) get(doc any) (any, bool) {
	cur := doc
	for _, tok := range p.tokens {
		switch node := cur.(type) {
		case map[string]any:
			v, ok := node[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(node) {
				return nil, false
			}
			cur = node[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// arrayIndex parses an RFC 6901 array index: digits, no leading zero.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(tok)
	return n, err == nil
}

// decodeJSON decodes one JSON value keeping numbers exact. Anything but
// white space after it makes the answer no JSON: a stray ']' or '}'
// too, which json.Decoder.More does not report (an answer such as
// {"items":[]}] is no authoritative "nothing found").
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// scalarString renders a string, number or boolean as text: the form a
// reference or a compared value takes. Objects, arrays and null give false.
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// refString is v as an effect's reference: a string or a number, as
// text. A boolean is none: every answer of a kind carries the same one,
// so it would name no effect of its own (and a lookup by it would find
// another operation's).
func refString(v any) (string, bool) {
	if _, isBool := v.(bool); isBool {
		return "", false
	}
	return scalarString(v)
}

// jsonEqual compares two decoded JSON values; numbers compare by value, so
// 2, 2.0 and 2e0 are equal.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		return numberEqual(x.String(), y.String())
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

// numberEqual compares two JSON numbers by value, exactly (jsonnum.Exact):
// 2.50 equals 2.5 and 1e2 equals 100, while two numbers that differ in
// any digit differ, however many digits they have (identifiers beyond
// 2^53, amounts beyond float64's precision). A number whose exponent is
// beyond ±maxExactExponent equals only the same text: when in doubt, no
// match (the operation is held for a person rather than settled on a
// record that may differ).
func numberEqual(x, y string) bool {
	if x == y {
		return true
	}
	ex, okx := exactNumber(x)
	ey, oky := exactNumber(y)
	return okx && oky && ex == ey
}

// maxExactExponent bounds the exponents numberEqual compares by value.
const maxExactExponent = 1000

// exactNumber is the exact form of the JSON number s (jsonnum.Exact);
// false when its exponent is beyond ±maxExactExponent.
func exactNumber(s string) (string, bool) {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > maxExactExponent || e < -maxExactExponent {
			return "", false
		}
	}
	exact, err := jsonnum.Exact(s)
	return exact, err == nil
}

package httpapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// memberError is a member name encoding/json would take without a word:
// it matches field names in any case ("ACTION" sets action) and keeps the
// last of two members with one name, so that what decides a request could
// differ from what a reader of its first member sees.
type memberError struct{ msg string }

func (e *memberError) Error() string { return e.msg }

// checkMembers walks the valid JSON body as it decodes into t and refuses,
// in every object that decodes into a struct, a name that is not exactly
// one of its fields' (naming them) and a name given twice. Objects
// decoded otherwise (a payload, a response: json.RawMessage, maps, any)
// are the caller's content and are not looked into.
func checkMembers(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	return walkMembers(dec, t, "")
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether a value of type t (not a pointer)
// decodes itself from JSON (json.Unmarshaler, encoding.TextUnmarshaler):
// its members are its own business, not looked into.
func decodesItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(unmarshalerType) || pt.Implements(textUnmarshalerType)
}

// walkMembers reads one value from dec, decoded into t; path names it.
func walkMembers(dec *json.Decoder, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if decodesItself(t) {
		var skip json.RawMessage
		return dec.Decode(&skip)
	}
	switch t.Kind() {
	case reflect.Struct:
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != json.Delim('{') {
			return nil // a type error: Decode says so
		}
		fields := fieldsOf(t)
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			name, _ := tok.(string)
			ft, ok := fields[name]
			switch {
			case seen[name]:
				return &memberError{fmt.Sprintf("member %q is given twice%s", name, at(path))}
			case !ok:
				for known := range fields {
					if strings.EqualFold(known, name) {
						return &memberError{fmt.Sprintf("unknown field %q%s: field names are case-sensitive, did you mean %q?", name, at(path), known)}
					}
				}
				return &memberError{fmt.Sprintf("unknown field %q%s: it takes %s", name, at(path),
					strings.Join(slices.Sorted(maps.Keys(fields)), ", "))}
			}
			seen[name] = true
			if err := walkMembers(dec, ft, path+"."+name); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
		return err
	case reflect.Slice, reflect.Array:
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != json.Delim('[') {
			return nil
		}
		for i := 0; dec.More(); i++ {
			if err := walkMembers(dec, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
		return err
	}
	var skip json.RawMessage
	return dec.Decode(&skip)
}

// at is " in PATH" for a nested object, "" at the top.
func at(path string) string {
	if path == "" {
		return ""
	}
	return " in " + strings.TrimPrefix(path, ".")
}

// structFields caches fieldsOf.
var structFields sync.Map // reflect.Type → map[string]reflect.Type

// fieldsOf maps the JSON names of the fields of struct type t (embedded
// structs' fields included, as encoding/json takes them) to their types.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := structFields.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "" && indirect(f.Type).Kind() == reflect.Struct:
			for n, ft := range fieldsOf(indirect(f.Type)) {
				if _, own := m[n]; !own {
					m[n] = ft
				}
			}
			continue
		case !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		m[name] = f.Type
	}
	structFields.Store(t, m)
	return m
}

func indirect(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// plainMembers reports whether body starts with one JSON value, decoded
// into t, in which every object that decodes into a struct names each of
// its members exactly as a field, once, written without escapes, and
// nothing decodes into a map that could hold a struct: a body that
// checkMembers passes and in which encoding/json finds no unknown field,
// as nearly every request is. It returns where that value ends. It reads
// the bytes once, without allocating, and does not validate the JSON
// (json.Unmarshal does): anything else, malformed text included, is !ok,
// and decode takes its full path, which says what is wrong.
func plainMembers(body []byte, t reflect.Type) (end int, ok bool) {
	p := plainScan{b: body}
	if !p.value(t) {
		return 0, false
	}
	return p.i, true
}

// plainScan is plainMembers' position in its body.
type plainScan struct {
	b []byte
	i int
}

func (p *plainScan) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value passes one value decoded into t, as walkMembers walks it.
func (p *plainScan) value(t reflect.Type) bool {
	p.space()
	if p.i >= len(p.b) {
		return false
	}
	t = indirect(t)
	c := p.b[p.i]
	switch {
	case decodesItself(t):
	case t.Kind() == reflect.Struct:
		if c == '{' {
			return p.object(t)
		}
		if c == '[' {
			return false
		}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if c == '[' {
			return p.array(t.Elem())
		}
		if c == '{' {
			return false
		}
	case !holdsNoStruct(t):
		// A map of structs: encoding/json would look for unknown fields
		// in them, which walkMembers does not.
		return false
	}
	return p.skip()
}

// object passes an object decoded into the struct type t.
func (p *plainScan) object(t reflect.Type) bool {
	p.i++ // '{'
	fields := fieldsOf(t)
	var seenBuf [16][]byte
	seen := seenBuf[:0]
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return true
	}
	for {
		p.space()
		start := p.i
		if !p.text() {
			return false
		}
		name := p.b[start+1 : p.i-1]
		ft, ok := fields[string(name)]
		if !ok || bytes.IndexByte(name, '\\') >= 0 {
			return false
		}
		for _, s := range seen {
			if bytes.Equal(s, name) {
				return false
			}
		}
		seen = append(seen, name)
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return false
		}
		p.i++
		if !p.value(ft) {
			return false
		}
		if more, ok := p.after('}'); !ok || !more {
			return ok
		}
	}
}

// array passes an array whose elements decode into elem.
func (p *plainScan) array(elem reflect.Type) bool {
	p.i++ // '['
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return true
	}
	for {
		if !p.value(elem) {
			return false
		}
		if more, ok := p.after(']'); !ok || !more {
			return ok
		}
	}
}

// after passes what follows a member or an element: a comma, with more
// to come, or close, which ends the object or array (more false); ok is
// false for anything else.
func (p *plainScan) after(close byte) (more, ok bool) {
	p.space()
	if p.i >= len(p.b) {
		return false, false
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		return true, true
	case close:
		p.i++
		return false, true
	}
	return false, false
}

// text passes a string.
func (p *plainScan) text() bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	for p.i++; p.i < len(p.b); p.i++ {
		switch p.b[p.i] {
		case '\\':
			p.i++
		case '"':
			p.i++
			return true
		}
	}
	return false
}

// skip passes a value that is not looked into: its brackets are matched
// outside strings, and a literal or number runs to the next delimiter.
func (p *plainScan) skip() bool {
	switch p.b[p.i] {
	case '"':
		return p.text()
	case '{', '[':
		d := 0
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '"':
				if !p.text() {
					return false
				}
				continue
			case '{', '[':
				d++
			case '}', ']':
				d--
				if d == 0 {
					p.i++
					return true
				}
			}
			p.i++
		}
		return false
	}
	start := p.i
	for p.i < len(p.b) && literalByte(p.b[p.i]) {
		p.i++
	}
	return p.i > start
}

// literalByte reports whether c may be part of a JSON literal or number.
func literalByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'E'
}

// holdsNoStruct reports whether no value of type t decodes into a struct
// (through a map, a slice, an array or a pointer) other than one that
// decodes itself (json.Unmarshaler, encoding.TextUnmarshaler).
func holdsNoStruct(t reflect.Type) bool {
	t = indirect(t)
	if decodesItself(t) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct:
		return false
	case reflect.Map, reflect.Slice, reflect.Array:
		return holdsNoStruct(t.Elem())
	}
	return true
}

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

// walkMembers reads one value from dec, decoded into t; path names it.
func walkMembers(dec *json.Decoder, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
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

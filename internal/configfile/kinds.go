package configfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// ErrNotUTF8 refuses a file that is neither UTF-8 text nor UTF-16 text
// with its byte-order mark: UTF-16 without one, or a legacy code page.
// The YAML decoder would read such a file as garbled text and quote it
// back.
var ErrNotUTF8 = errors.New("the file is not UTF-8 text")

// utf8Text returns data as UTF-8 text: UTF-16 with its byte-order mark
// (what a Windows editor saves as "Unicode", and PowerShell 5's >
// redirection writes), which the YAML decoder reads too, is converted,
// so that what is said about the file is said of its text. Anything else
// that is not UTF-8 is refused with ErrNotUTF8 (checkText).
func utf8Text(data []byte) ([]byte, error) {
	var order binary.ByteOrder
	switch {
	case bytes.HasPrefix(data, []byte{0xFF, 0xFE}):
		order = binary.LittleEndian
	case bytes.HasPrefix(data, []byte{0xFE, 0xFF}):
		order = binary.BigEndian
	default:
		return data, checkText(data)
	}
	data = data[2:]
	if len(data)%2 != 0 {
		return nil, fmt.Errorf("%w: it starts with a UTF-16 byte-order mark, but its length is odd: save it as UTF-8", ErrNotUTF8)
	}
	units := make([]uint16, len(data)/2)
	for i := range units {
		units[i] = order.Uint16(data[2*i:])
	}
	text := []byte(string(utf16.Decode(units)))
	return text, checkText(text)
}

// checkText refuses data that is not UTF-8 text (ErrNotUTF8), saying what
// it looks like instead: UTF-16 without its byte-order mark (NUL bytes),
// or the line of the first byte that is not UTF-8.
func checkText(data []byte) error {
	switch {
	case bytes.IndexByte(data, 0) >= 0:
		return fmt.Errorf("%w (UTF-16? it holds NUL bytes): save it as UTF-8", ErrNotUTF8)
	case !utf8.Valid(data):
		i := 0
		for i < len(data) {
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			i += size
		}
		return fmt.Errorf("%w (line %d holds the byte 0x%02X, which UTF-8 text does not): save it as UTF-8",
			ErrNotUTF8, bytes.Count(data[:i], []byte("\n"))+1, data[i])
	}
	return nil
}

// kindsError is a decoding error whose values of the wrong kind are
// said in plain words (plainKinds); it unwraps to the decoder's own
// *yaml.TypeError, whose messages name Go types.
type kindsError struct {
	msg string
	te  *yaml.TypeError
}

func (e *kindsError) Error() string { return e.msg }
func (e *kindsError) Unwrap() error { return e.te }

// plainKinds words the values of the wrong kind in te, the error of
// decoding data into a value of type root, without Go's type names: a
// file whose top level is not a mapping, "the file must be a YAML mapping
// of settings, one "name: value" per line (got a string)"; a field,
// "line 3: upstreams: takes a list (…), not a string ("crm")"; a value
// its type refused (InvalidValue), by its field too. Other messages (an
// unknown field) are kept, one per line. It returns "" when te holds no
// value of the wrong kind it can find in data, nor a refused value.
func plainKinds(data []byte, te *yaml.TypeError, root reflect.Type) string {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return ""
	}
	kinds := make([]*WrongKind, len(te.Errors))
	invalid := make([]*Invalid, len(te.Errors))
	lines := map[int]bool{}
	for i, msg := range te.Errors {
		if k, ok := ParseWrongKind(msg); ok {
			kinds[i], lines[k.Line] = &k, true
		} else if v, ok := ParseInvalid(msg); ok {
			invalid[i], lines[v.Line] = &v, true
		}
	}
	found := ValuesOn(&doc, lines)
	types := map[string]reflect.Type{}
	collectTypes(root, types)
	msgs := make([]string, 0, len(te.Errors))
	translated := false
	for i, msg := range te.Errors {
		if s := kindError(found, types, kinds[i]); s != "" {
			msg, translated = s, true
		} else if invalid[i] != nil {
			msg, translated = invalid[i].said(found), true
		}
		if !slices.Contains(msgs, msg) {
			msgs = append(msgs, msg)
		}
	}
	if !translated {
		return ""
	}
	return strings.Join(msgs, "\n")
}

// collectTypes records, under the name the YAML decoder gives it, every
// type reachable from t through pointers, lists, maps and struct fields.
func collectTypes(t reflect.Type, types map[string]reflect.Type) {
	if _, seen := types[t.String()]; seen {
		return
	}
	types[t.String()] = t
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		collectTypes(t.Elem(), types)
	case reflect.Map:
		collectTypes(t.Key(), types)
		collectTypes(t.Elem(), types)
	case reflect.Struct:
		for f := range t.Fields() {
			if f.IsExported() {
				collectTypes(f.Type, types)
			}
		}
	}
}

// kindError words k, or returns "" when k is nil or its value is not
// found in the document (or cannot be told from another beside it).
func kindError(found Values, types map[string]reflect.Type, k *WrongKind) string {
	if k == nil {
		return ""
	}
	at := found.Deepest(k.Line, k.Matches)
	if at == nil {
		return ""
	}
	if len(at.Path) == 0 {
		return fmt.Sprintf("the file must be a YAML mapping of settings, one \"name: value\" per line (got %s)", KindOf(at.Node))
	}
	got := KindOf(at.Node)
	if at.Node.Kind == yaml.ScalarNode && at.Node.Value != "" {
		v := at.Node.Value
		if len(v) > 40 {
			v = v[:37] + "..."
		}
		got += " (" + strconv.Quote(v) + ")"
	}
	return fmt.Sprintf("line %d: %s: takes %s, not %s", at.Line, strings.Join(at.Path, "."), takes(types[k.GoType]), got)
}

// KindOf words the kind of a YAML value: "a mapping", "a list", "a
// number", "a string".
func KindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	case "!!null":
		return "nothing"
	}
	return "a string"
}

// takes words what a value of the Go type t is written as; t is nil
// when the decoder named a type not found from the target's.
func takes(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a value of another kind"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "text"
	case reflect.Slice, reflect.Array:
		return "a list (one \"- item\" per line, or [a, b])"
	case reflect.Map:
		return "a mapping (one \"name: value\" per line)"
	case reflect.Struct:
		return "a mapping of settings (one \"name: value\" per line, indented below it)"
	}
	return "a value of another kind"
}

package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// decodeError is a request body the API refuses, with the reason a caller
// can act on.
type decodeError struct {
	status int
	kind   string
	msg    string
}

func (e *decodeError) Error() string { return e.msg }

// decodeKind is the problem type err is answered with when it is a
// *decodeError, and invalid_input otherwise.
func decodeKind(err error) string {
	if de := (*decodeError)(nil); errors.As(err, &de) {
		return de.kind
	}
	return "invalid_input"
}

// decode reads the whole body (bounded by the body limit) and decodes it
// into v strictly: the body must be one JSON object, sent without a
// content coding (contentCoding); unknown fields, trailing data, too deep
// nesting and malformed JSON are refused with their position.
func decode(r *http.Request, maxDepth int, v any) error {
	if err := contentCoding(r.Header); err != nil {
		return err
	}
	body, err := readBody(r.Body)
	if err != nil {
		return err
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return &decodeError{http.StatusBadRequest, "invalid_json", "request body is empty; send a JSON object"}
	}
	if bytes.HasPrefix(trimmed, []byte("\xef\xbb\xbf")) {
		return &decodeError{http.StatusBadRequest, "invalid_json",
			"request body starts with a byte order mark (EF BB BF): send the JSON object without one"}
	}
	if trimmed[0] != '{' {
		// null would decode into v as nothing at all, and an array or a
		// scalar as a type error without a field to name.
		return &decodeError{http.StatusBadRequest, "invalid_json", "request body must be a JSON object"}
	}
	if d := depth(body); d > maxDepth {
		return &decodeError{http.StatusBadRequest, "invalid_json", fmt.Sprintf("JSON nests deeper than %d levels", maxDepth)}
	}
	if member, ok := notUTF8(body, replacedMembers(v)); !ok {
		return &decodeError{http.StatusBadRequest, "invalid_input",
			fmt.Sprintf("the request body holds text that is not UTF-8 (a byte of another encoding, or a lone surrogate escape such as \\ud800) in %q: JSON text is UTF-8, and the text would be changed, not recorded as sent", member)}
	}
	return decodeJSON(body, v)
}

// decodeJSON decodes the JSON object body, which holds no text that
// decode refuses, into v, a pointer, as decodeStrict does. A body whose
// members are all plainly the fields they set (plainMembers), as nearly
// every one is, is decoded with one json.Unmarshal: decodeStrict's checks
// would find nothing in it. Any other body, or one that fails to decode
// so, takes decodeStrict, which says what is wrong.
func decodeJSON(body []byte, v any) error {
	if end, ok := plainMembers(body, reflect.TypeOf(v)); ok && len(bytes.TrimSpace(body[end:])) == 0 {
		if json.Unmarshal(body[:end], v) == nil {
			return nil
		}
		reflect.ValueOf(v).Elem().SetZero()
	}
	return decodeStrict(body, v)
}

// decodeStrict decodes body into v strictly: unknown fields (and names
// that differ from a field's only in case, or given twice: checkMembers),
// trailing data and malformed JSON are refused with their position.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// encoding/json names an unknown field, not where it is nor
		// what would be taken: checkMembers says both.
		var me *memberError
		if strings.HasPrefix(err.Error(), "json: unknown field ") && errors.As(checkMembers(body, reflect.TypeOf(v)), &me) {
			return &decodeError{http.StatusBadRequest, "invalid_json", me.msg}
		}
		return &decodeError{http.StatusBadRequest, "invalid_json", describeJSONError(err, body, reflect.TypeOf(v))}
	}
	if err := checkMembers(body, reflect.TypeOf(v)); err != nil {
		if me, ok := err.(*memberError); ok {
			return &decodeError{http.StatusBadRequest, "invalid_json", me.msg}
		}
		return &decodeError{http.StatusBadRequest, "invalid_json", describeJSONError(err, body, reflect.TypeOf(v))}
	}
	// Anything but white space after the object is refused (dec.More
	// would let a stray '}' or ']' through).
	if end := dec.InputOffset(); len(bytes.TrimSpace(body[end:])) > 0 {
		return &decodeError{http.StatusBadRequest, "invalid_json",
			fmt.Sprintf("unexpected data after the JSON object at byte %d", end)}
	}
	return nil
}

// contentCoding refuses a request body sent with a content coding other
// than identity (Content-Encoding: gzip, br, deflate, …), before it is
// read: the API takes a body as the JSON text it is and decompresses
// nothing, so a compressed body would be refused as not a JSON object,
// and a webhook's signature, made over the uncompressed body, would not
// match. It is 415 unsupported_media (RFC 9110, section 15.5.16), which
// writeError answers with Accept-Encoding: identity, the only coding
// taken.
func contentCoding(h http.Header) error {
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return &decodeError{http.StatusUnsupportedMediaType, "unsupported_media",
					fmt.Sprintf("the request body's content coding (Content-Encoding: %.20q) is not supported: send the body uncompressed, without Content-Encoding", c)}
			}
		}
	}
	return nil
}

// readBody reads a request body whole. A body past its limit (a reader
// of http.MaxBytesReader) is 413 payload_too_large; one that does not
// arrive within the server's read timeout 408 request_timeout; one cut
// short or malformed 400 invalid_input. None repeats the read error's
// text, which names the connection's addresses.
func readBody(body io.Reader) ([]byte, error) {
	data, err := io.ReadAll(body)
	if err == nil {
		return data, nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &decodeError{http.StatusRequestEntityTooLarge, "payload_too_large",
			fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, &decodeError{http.StatusRequestTimeout, "request_timeout",
			"the request body did not arrive in time: send it whole, at once"}
	}
	return nil, &decodeError{http.StatusBadRequest, "invalid_input",
		"the request body could not be read to its end (the connection was cut, or its chunked encoding is malformed)"}
}

// repeatHints say, for a query parameter that takes several values, how to
// give them in one.
var repeatHints = map[string]string{
	"state": ": give several states as one comma-separated list, e.g. state=held,uncertain",
}

// queryParams reads the request's query string strictly and returns each
// parameter's value ("" when it is absent). allowed are the parameters the
// route takes, none for a route that takes none. A query string that does
// not parse (a malformed percent escape, a ';' between parameters), a
// parameter the route does not take, and a parameter given more than once
// are refused with 400 invalid_input naming it, instead of being dropped
// or cut to a first value: a misspelled filter would otherwise answer with
// everything unfiltered.
func queryParams(r *http.Request, allowed ...string) (map[string]string, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &decodeError{http.StatusBadRequest, "invalid_input", describeQueryError(r.URL.RawQuery, err)}
	}
	takes := "this route takes no query parameters"
	if len(allowed) > 0 {
		takes = "this route takes " + strings.Join(allowed, ", ")
	}
	out := make(map[string]string, len(q))
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch values := q[name]; {
		case !slices.Contains(allowed, name):
			return nil, &decodeError{http.StatusBadRequest, "invalid_input", fmt.Sprintf("unknown query parameter %q: %s", name, takes)}
		case len(values) > 1:
			return nil, &decodeError{http.StatusBadRequest, "invalid_input",
				fmt.Sprintf("query parameter %q is given %d times; give it once%s", name, len(values), repeatHints[name])}
		default:
			out[name] = values[0]
		}
	}
	return out, nil
}

// noQuery refuses, for a route that takes no query parameters, a request
// that gives some, as queryParams does. On failure it has written the
// problem response and returns false.
func (s *server) noQuery(w http.ResponseWriter, r *http.Request) bool {
	if _, err := queryParams(r); err != nil {
		s.writeError(w, r, err)
		return false
	}
	return true
}

// describeQueryError names the parameter of a query string that
// url.ParseQuery refused, and what is wrong with it.
func describeQueryError(raw string, err error) string {
	for pair := range strings.SplitSeq(raw, "&") {
		key, value, _ := strings.Cut(pair, "=")
		name, kerr := url.QueryUnescape(key)
		if kerr != nil {
			return fmt.Sprintf("the name of a query parameter is malformed (%v): percent-encode %% as %%25", kerr)
		}
		if strings.Contains(pair, ";") {
			return fmt.Sprintf("query parameter %q holds a ';': separate parameters with &, and percent-encode ; as %%3B", name)
		}
		if _, verr := url.QueryUnescape(value); verr != nil {
			return fmt.Sprintf("query parameter %q is malformed (%v): percent-encode %% as %%25", name, verr)
		}
	}
	return "the query string is malformed: " + err.Error()
}

// describeJSONError turns a decoding error into a message with the
// position (line, column, byte offset) of the problem.
func describeJSONError(err error, body []byte, t reflect.Type) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	switch {
	case errors.As(err, &pe):
		return fmt.Sprintf("%s: a time is RFC 3339 text, such as \"2026-12-04T10:00:00Z\" (got %.40q)", timeMember(body, t, pe.Value), pe.Value)
	case errors.As(err, &se):
		line, col := position(body, se.Offset)
		return fmt.Sprintf("malformed JSON at line %d, column %d (byte %d): %s", line, col, se.Offset, se.Error())
	case errors.As(err, &te):
		line, col := position(body, te.Offset)
		field := jsonPath(t, te.Field)
		if field == "" {
			field = "(top level)"
		}
		kind := jsonKind(te.Type)
		if n, ok := strings.CutPrefix(te.Value, "number "); ok && !strings.ContainsAny(n, ".eE") {
			if r := intRange(te.Type); r != "" {
				kind += " " + r // a whole number, out of the field's range
			}
		}
		return fmt.Sprintf("field %s at line %d, column %d: expected %s, got JSON %s", field, line, col, kind, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := position(body, int64(len(body)))
		return fmt.Sprintf("malformed JSON: unexpected end of input at line %d, column %d", line, col)
	case strings.HasPrefix(err.Error(), "Time.UnmarshalJSON: "):
		// A time given as a number, true or an object: time.Time says
		// so in Go's terms, without the member.
		if name, got := timeMemberNotText(body, t); name != "" {
			return fmt.Sprintf("field %s: a time is RFC 3339 text, such as \"2026-12-04T10:00:00Z\" (got JSON %s)", name, got)
		}
		return "a time is RFC 3339 text, such as \"2026-12-04T10:00:00Z\""
	}
	return err.Error()
}

// timeMemberNotText names the first top-level member of body, a time in
// t, whose value is not JSON text, and the kind of value it is.
func timeMemberNotText(body []byte, t reflect.Type) (name, got string) {
	for name, v := range timeMembers(body, t) {
		switch v[0] {
		case '"', 'n': // text, or null (left out)
			continue
		case '{':
			return name, "object"
		case '[':
			return name, "array"
		case 't', 'f':
			return name, "boolean"
		default:
			return name, "number"
		}
	}
	return "", ""
}

// timeMembers yields, in name order, the members of the body's top-level
// object that the struct type t decodes as times, with their JSON text;
// nothing when t is no struct or body no object.
func timeMembers(body []byte, t reflect.Type) iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		var members map[string]json.RawMessage
		if t == nil || indirect(t).Kind() != reflect.Struct || json.Unmarshal(body, &members) != nil {
			return
		}
		fields := fieldsOf(indirect(t))
		for _, name := range slices.Sorted(maps.Keys(fields)) {
			v, ok := members[name]
			if !ok || len(v) == 0 || indirect(fields[name]) != reflect.TypeFor[time.Time]() {
				continue
			}
			if !yield(name, v) {
				return
			}
		}
	}
}

// jsonPath is the path of a member as the caller wrote it: encoding/json
// names a member of an embedded struct after that struct's Go name too
// ("attemptBody.fencing_token"), which the caller never saw.
func jsonPath(t reflect.Type, field string) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return field
	}
	for i := range t.NumField() {
		if f := t.Field(i); f.Anonymous {
			field = strings.TrimPrefix(field, f.Name+".")
		}
	}
	return field
}

// intRange is the range of an integer type, "from MIN to MAX"; "" for
// another type.
func intRange(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("from %d to %d", int64(-1)<<(bits-1), int64(uint64(1)<<(bits-1)-1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	}
	return ""
}

// jsonKind names what a Go type takes in JSON, in a caller's words.
func jsonKind(t reflect.Type) string {
	if t == reflect.TypeFor[time.Time]() {
		return "a time (RFC 3339 text)"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
}

// timeMember names the member of the body's top-level object, decoded
// into the struct type t, that holds the time text value which did not
// parse; "a time" when none does (encoding/json does not say which).
func timeMember(body []byte, t reflect.Type, value string) string {
	for name, v := range timeMembers(body, t) {
		var s string
		if json.Unmarshal(v, &s) == nil && s == value {
			return "field " + name
		}
	}
	return "a time"
}

func position(body []byte, offset int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < offset && i < int64(len(body)); i++ {
		if body[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

// replacer is a request body with top-level members whose text is kept
// with what is not UTF-8 replaced by U+FFFD, as documented, instead of
// being refused: a report's error, a lookup's evidence and a release's
// reason, which a failing worker (or one giving its claim back on its
// way out) must be able to record.
type replacer interface{ replaced() []string }

// The members replaced, made once: replacedMembers is asked of every
// outcome.
var (
	replacedError    = []string{"error"}
	replacedEvidence = []string{"evidence"}
	replacedReason   = []string{"reason"}
)

func (*outcomeBody) replaced() []string   { return replacedError }
func (*reconcileBody) replaced() []string { return replacedEvidence }
func (*releaseBody) replaced() []string   { return replacedReason }

// replacedMembers are the members of the body v decodes into whose text
// is replaced rather than refused; none for most bodies.
func replacedMembers(v any) []string {
	if r, ok := v.(replacer); ok {
		return r.replaced()
	}
	return nil
}

// notUTF8 checks the text of the valid JSON object body: bytes that are
// not UTF-8 and escapes of lone surrogates, which encoding/json would
// silently turn into U+FFFD (two different names would become one). It
// returns ok, or the top-level member that holds such text; text in the
// members replaced names is let through.
func notUTF8(body []byte, replaced []string) (member string, ok bool) {
	bad := badTextOffsets(body)
	if len(bad) == 0 {
		return "", true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // '{'
		return "", true // malformed: Decode says where
	}
	for dec.More() {
		start := dec.InputOffset() // the member's name, its value, and what is between
		tok, err := dec.Token()
		if err != nil {
			return "", true
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return "", true
		}
		end := dec.InputOffset()
		if slices.Contains(replaced, name) {
			continue
		}
		for _, off := range bad {
			if off >= start && off < end {
				return name, false
			}
		}
	}
	return "", true
}

// badTextOffsets returns where the JSON text b holds a byte that is not
// UTF-8, or (inside a string) a \u escape of a lone surrogate.
func badTextOffsets(b []byte) []int64 {
	var out []int64
	inString := false
	for i := 0; i < len(b); {
		c := b[i]
		if c >= utf8.RuneSelf {
			if r, size := utf8.DecodeRune(b[i:]); r == utf8.RuneError && size == 1 {
				out = append(out, int64(i))
				i++
				continue
			} else {
				i += size
				continue
			}
		}
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r := hexRune(b[i+2:])
			switch {
			case r >= 0xd800 && r < 0xdc00:
				if len(b) >= i+12 && b[i+6] == '\\' && b[i+7] == 'u' {
					if lo := hexRune(b[i+8:]); lo >= 0xdc00 && lo < 0xe000 {
						i += 12
						continue
					}
				}
				out = append(out, int64(i))
			case r >= 0xdc00 && r < 0xe000:
				out = append(out, int64(i))
			}
			i += 6
			continue
		case c == '\\':
			i += 2
			continue
		}
		i++
	}
	return out
}

// hexRune is the value of the four hex digits at the start of b, or -1.
func hexRune(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(v)
}

// depth returns the deepest nesting of objects and arrays in a JSON text,
// counting brackets outside strings. It does not validate.
func depth(b []byte) int {
	d, maxD := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			d++
			maxD = max(maxD, d)
		case '}', ']':
			d--
		}
	}
	return maxD
}

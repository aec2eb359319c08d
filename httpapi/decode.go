package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// decodeError is a request body the API refuses, with the reason a caller
// can act on.
type decodeError struct {
	status int
	kind   string
	msg    string
}

func (e *decodeError) Error() string { return e.msg }

// decode reads the whole body (bounded by the body limit) and decodes it
// into v strictly: the body must be one JSON object; unknown fields,
// trailing data, too deep nesting and malformed JSON are refused with
// their position.
func decode(r *http.Request, maxDepth int, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &decodeError{http.StatusRequestEntityTooLarge, "payload_too_large",
				fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
		}
		return &decodeError{http.StatusBadRequest, "invalid_json", "read request body: " + err.Error()}
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return &decodeError{http.StatusBadRequest, "invalid_json", "request body is empty; send a JSON object"}
	}
	if trimmed[0] != '{' {
		// null would decode into v as nothing at all, and an array or a
		// scalar as a type error without a field to name.
		return &decodeError{http.StatusBadRequest, "invalid_json", "request body must be a JSON object"}
	}
	if d := depth(body); d > maxDepth {
		return &decodeError{http.StatusBadRequest, "invalid_json", fmt.Sprintf("JSON nests deeper than %d levels", maxDepth)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &decodeError{http.StatusBadRequest, "invalid_json", describeJSONError(err, body)}
	}
	// Anything but white space after the object is refused (dec.More
	// would let a stray '}' or ']' through).
	if end := dec.InputOffset(); len(bytes.TrimSpace(body[end:])) > 0 {
		return &decodeError{http.StatusBadRequest, "invalid_json",
			fmt.Sprintf("unexpected data after the JSON object at byte %d", end)}
	}
	return nil
}

// describeJSONError turns a decoding error into a message with the
// position (line, column, byte offset) of the problem.
func describeJSONError(err error, body []byte) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		line, col := position(body, se.Offset)
		return fmt.Sprintf("malformed JSON at line %d, column %d (byte %d): %s", line, col, se.Offset, se.Error())
	case errors.As(err, &te):
		line, col := position(body, te.Offset)
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Sprintf("field %s at line %d, column %d: expected %s, got JSON %s", field, line, col, te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := position(body, int64(len(body)))
		return fmt.Sprintf("malformed JSON: unexpected end of input at line %d, column %d", line, col)
	}
	// Unknown fields: "json: unknown field \"x\"".
	return err.Error()
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

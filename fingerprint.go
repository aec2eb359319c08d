package opledger

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gowebpki/jcs"

	"github.com/opledger/opledger/internal/jsonnum"
)

// Fingerprint returns "sha256:" + the hex SHA-256 of the canonical JSON
// (canonicalJSON: RFC 8785, JCS, with every number kept exact) of
// {action, destination, payload, version}. Two intents with the same
// fingerprint are the same content, whatever the key order or number
// formatting of their payloads; two payloads whose numbers differ in
// value never share one, even where an IEEE double cannot tell them apart
// (9007199254740993 and 9007199254740992).
func Fingerprint(action, destination string, payload json.RawMessage, version int64) (string, error) {
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if !json.Valid(payload) {
		return "", invalidInput("payload is not valid JSON")
	}
	doc, err := json.Marshal(struct {
		Action      string          `json:"action"`
		Destination string          `json:"destination"`
		Payload     json.RawMessage `json:"payload"`
		Version     int64           `json:"version"`
	}{action, destination, payload, version})
	if err != nil {
		return "", fmt.Errorf("encode fingerprint document: %w", err)
	}
	canon, err := canonicalJSON(doc)
	if err != nil {
		return "", invalidInput("payload cannot be canonicalized: %v", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// errNumberOutOfRange refuses a number beyond a double's range, which
// JCS cannot print; like every error of canonicalJSON, it does not repeat
// the value, which may be a sensitive field's.
var errNumberOutOfRange = errors.New("a number is beyond the range of a double")

// valueFree is the reason JCS refused the valid JSON doc, in words that
// repeat nothing of it: its own errors quote the value or member name
// they stopped at, which may be a sensitive field's (a card number, an
// e-mail address used as a member name).
func valueFree(err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "Duplicate key"):
		return errors.New("an object has two members of the same name")
	case strings.HasPrefix(msg, "Number out of range"):
		return errNumberOutOfRange
	case strings.HasPrefix(msg, "Maximum nesting depth"):
		return errors.New("the document is nested too deeply")
	case strings.HasPrefix(msg, "Invalid UTF-8"), strings.Contains(msg, "surrogate"):
		return errors.New("a string holds text that is not valid Unicode (invalid UTF-8 or an escaped lone surrogate)")
	}
	return errors.New("RFC 8785 refuses the document")
}

// canonicalJSON is the RFC 8785 (JCS) canonical form of the valid JSON
// doc, except for a number whose value no IEEE double holds as JCS would
// print it (an integer beyond 2^53, a decimal with more digits than a
// double keeps, one too small for a double). JCS would print the nearest
// double, so that two different numbers shared a form, and a fingerprint;
// such a number is printed as its exact value instead (jsonnum.Exact:
// "9007199254740993e0"), a form JCS never prints. Every other document is
// exactly as JCS makes it. Its errors never repeat a value of doc.
func canonicalJSON(doc []byte) ([]byte, error) {
	spans, err := inexactNumbers(doc)
	if err != nil {
		return nil, err
	}
	if len(spans) == 0 {
		canon, err := jcs.Transform(doc)
		if err != nil {
			return nil, valueFree(err)
		}
		return canon, nil
	}
	// Each such number stands in as a string no payload holds (a random
	// mark), replaced by its exact form once JCS has ordered the document.
	mark := make([]byte, 16)
	_, _ = rand.Read(mark)
	placeholder := func(i int) string {
		return `"opledger-exact-number-` + hex.EncodeToString(mark) + "-" + strconv.Itoa(i) + `"`
	}
	var b bytes.Buffer
	last := 0
	for i, sp := range spans {
		b.Write(doc[last:sp.start])
		b.WriteString(placeholder(i))
		last = sp.end
	}
	b.Write(doc[last:])
	canon, err := jcs.Transform(b.Bytes())
	if err != nil {
		return nil, valueFree(err)
	}
	for i, sp := range spans {
		canon = bytes.Replace(canon, []byte(placeholder(i)), []byte(sp.exact), 1)
	}
	return canon, nil
}

// numberSpan is a number of a JSON document that JCS cannot print
// exactly: where it is, and its exact form.
type numberSpan struct {
	start, end int
	exact      string
}

// inexactNumbers returns the numbers of the valid JSON doc whose value
// the double JCS would print does not have, in order.
func inexactNumbers(doc []byte) ([]numberSpan, error) {
	var spans []numberSpan
	inString, escaped := false, false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-' || c >= '0' && c <= '9':
			end := i + 1
			for end < len(doc) && strings.IndexByte("0123456789+-.eE", doc[end]) >= 0 {
				end++
			}
			text := string(doc[i:end])
			exact, ok, err := exactIfInexact(text)
			if err != nil {
				return nil, err
			}
			if !ok {
				spans = append(spans, numberSpan{start: i, end: end, exact: exact})
			}
			i = end - 1
		}
	}
	return spans, nil
}

// exactIfInexact reports whether the JSON number text has the value of
// the double nearest to it (ok), and otherwise returns its exact form.
func exactIfInexact(text string) (exact string, ok bool, err error) {
	digits := strings.TrimPrefix(text, "-")
	if len(digits) <= 15 && !strings.ContainsAny(digits, ".eE") {
		return "", true, nil // an integer below 10^15 < 2^53: every double holds it
	}
	exact, err = jsonnum.Exact(text)
	if err != nil {
		return "", false, err
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		// Beyond a double's range (a parser would read infinity), as JCS
		// refuses it.
		return "", false, errNumberOutOfRange
	}
	if nearest, err := jsonnum.Exact(strconv.FormatFloat(f, 'e', -1, 64)); err == nil && nearest == exact {
		return "", true, nil
	}
	return exact, false, nil
}

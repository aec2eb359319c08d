package destination

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/opledger/opledger"
)

// maxRefBytes is the longest reference ScanRef reads (the ledger's limit
// on a reference); a longer value is no reference.
const maxRefBytes = opledger.MaxDestinationRefBytes

// storable reports whether v, decoded from the JSON string raw (quotes
// included), is text the ledger can store as a reference and the text the
// answer holds: raw is valid UTF-8, v has no NUL byte (which the ledger
// refuses), and every U+FFFD in v was in raw, as such or as \ufffd, not
// put there by the decoder for a lone surrogate escape (\ud800).
func storable(raw []byte, v string) bool {
	if !utf8.Valid(raw) || strings.IndexByte(v, 0) >= 0 {
		return false
	}
	want := strings.Count(v, "\uFFFD")
	if want == 0 {
		return true
	}
	have := bytes.Count(raw, []byte("\uFFFD"))
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+5 < len(raw) && raw[i+1] == 'u' && strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
			have++
		}
		i++ // the escaped byte is not a backslash of its own
	}
	return have == want
}

// maxScanDepth bounds the nesting of a scanned answer, as encoding/json
// does.
const maxScanDepth = 10000

// ScanRef reads one JSON answer from r, to its end, and returns the
// reference at the destination's ref pointer as RefOf does for an answer
// held whole (a string or number; a later duplicate key replaces
// an earlier one). It holds only the bytes of the reference and of the
// object keys on the pointer's way, never the answer, so an answer of any
// size can be searched as it streams by. ok is false when the answer is
// not one JSON document, or has no reference there of at most
// maxRefBytes bytes that the ledger can store: a string with a NUL byte
// (\u0000), invalid UTF-8 or a lone surrogate escape (\ud800) is none.
// A destination that declares no ref (only NoContentRef) has no
// reference in any answer: ScanRef then reads nothing and returns false.
func (h *HTTP) ScanRef(r io.Reader) (ref string, ok bool) {
	if h.noRef {
		return "", false // no ref declared (HTTPConfig.Ref)
	}
	return scanRef(r, h.ref.tokens)
}

// scanRef reads one JSON document from in, to its end, and returns the
// string or number at the pointer tokens as RefOf would (a later
// duplicate key replaces an earlier one). It holds
// only the bytes of the reference and of the object keys on the pointer's
// way, never the document, so an answer of any size can be searched as it
// streams by. ok is false when the document is not JSON or has no
// reference there of at most maxRefBytes bytes.
func scanRef(in io.Reader, tokens []string) (ref string, ok bool) {
	s := &refScanner{in: bufio.NewReaderSize(in, 32<<10), tokens: tokens}
	if err := s.value(0, true); err != nil {
		return "", false
	}
	if c, err := s.skipSpace(); err != io.EOF || c != 0 {
		return "", false // more than one value, or a read error
	}
	return s.ref, s.found
}

type refScanner struct {
	in     *bufio.Reader
	tokens []string
	ref    string
	found  bool
}

var errNotJSON = errors.New("not JSON")

// skipSpace returns the next byte that is not JSON whitespace.
func (s *refScanner) skipSpace() (byte, error) {
	for {
		c, err := s.in.ReadByte()
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c, nil
		}
	}
}

// value reads one value at depth; onPath tells that the keys and indexes
// leading to it are the pointer's first depth tokens.
func (s *refScanner) value(depth int, onPath bool) error {
	if depth > maxScanDepth {
		return errNotJSON
	}
	target := onPath && depth == len(s.tokens)
	if onPath {
		// This value replaces whatever an earlier duplicate key held.
		s.ref, s.found = "", false
	}
	c, err := s.skipSpace()
	if err != nil {
		return errNotJSON
	}
	switch {
	case c == '{':
		return s.object(depth, onPath && !target)
	case c == '[':
		return s.array(depth, onPath && !target)
	case c == '"':
		limit := 0
		if target {
			// An escape takes at most 6 bytes for each byte it stands for.
			limit = 6*maxRefBytes + 2
		}
		raw, fits, err := s.str(limit)
		if err != nil || !target || !fits {
			return err
		}
		var v string
		if json.Unmarshal(raw, &v) == nil && strings.TrimSpace(v) != "" && len(v) <= maxRefBytes && storable(raw, v) {
			s.ref, s.found = v, true
		}
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		raw, err := s.number(c)
		if err == nil && target && len(raw) <= maxRefBytes {
			s.ref, s.found = string(raw), true
		}
		return err
	case c == 't':
		return s.literal("rue") // a boolean is no reference (refString)
	case c == 'f':
		return s.literal("alse")
	case c == 'n':
		return s.literal("ull")
	}
	return errNotJSON
}

// object reads an object after its '{'; onPath tells that its members
// may lie on the pointer's way.
func (s *refScanner) object(depth int, onPath bool) error {
	c, err := s.skipSpace()
	if err != nil {
		return errNotJSON
	}
	if c == '}' {
		return nil
	}
	for {
		if c != '"' {
			return errNotJSON
		}
		limit := 0
		if onPath {
			limit = 6*len(s.tokens[depth]) + 2
		}
		raw, fits, err := s.str(limit)
		if err != nil {
			return err
		}
		member := false
		if onPath && fits {
			var k string
			member = json.Unmarshal(raw, &k) == nil && k == s.tokens[depth]
		}
		if c, err = s.skipSpace(); err != nil || c != ':' {
			return errNotJSON
		}
		if err := s.value(depth+1, member); err != nil {
			return err
		}
		if c, err = s.skipSpace(); err != nil {
			return errNotJSON
		}
		if c == '}' {
			return nil
		}
		if c != ',' {
			return errNotJSON
		}
		if c, err = s.skipSpace(); err != nil {
			return errNotJSON
		}
	}
}

// array reads an array after its '['.
func (s *refScanner) array(depth int, onPath bool) error {
	want := -1
	if onPath {
		if i, ok := arrayIndex(s.tokens[depth]); ok {
			want = i
		}
	}
	c, err := s.skipSpace()
	if err != nil {
		return errNotJSON
	}
	if c == ']' {
		return nil
	}
	_ = s.in.UnreadByte()
	for i := 0; ; i++ {
		if err := s.value(depth+1, i == want); err != nil {
			return err
		}
		if c, err = s.skipSpace(); err != nil {
			return errNotJSON
		}
		if c == ']' {
			return nil
		}
		if c != ',' {
			return errNotJSON
		}
	}
}

// str reads a string after its opening quote. It returns the string as
// written, quotes included, when it has at most limit bytes (fits), and
// keeps nothing when limit is 0.
func (s *refScanner) str(limit int) (raw []byte, fits bool, err error) {
	fits = limit > 0
	keep := func(c byte) {
		if fits {
			if len(raw) >= limit {
				fits, raw = false, nil
				return
			}
			raw = append(raw, c)
		}
	}
	keep('"')
	for {
		c, err := s.in.ReadByte()
		if err != nil || c < 0x20 {
			return nil, false, errNotJSON
		}
		keep(c)
		switch c {
		case '"':
			return raw, fits, nil
		case '\\':
			e, err := s.in.ReadByte()
			if err != nil {
				return nil, false, errNotJSON
			}
			keep(e)
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for range 4 {
					h, err := s.in.ReadByte()
					if err != nil || !isHex(h) {
						return nil, false, errNotJSON
					}
					keep(h)
				}
			default:
				return nil, false, errNotJSON
			}
		}
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number reads a number whose first byte is first, as written (up to
// maxRefBytes+1 bytes are kept).
func (s *refScanner) number(first byte) ([]byte, error) {
	raw := []byte{first}
	keep := func(c byte) {
		if len(raw) <= maxRefBytes {
			raw = append(raw, c)
		}
	}
	// digits reads one or more digits when atLeastOne, else zero or more,
	// and unreads the byte after them.
	digits := func(atLeastOne bool) error {
		n := 0
		for {
			c, err := s.in.ReadByte()
			if err == io.EOF {
				break
			}
			if err != nil {
				return errNotJSON
			}
			if c < '0' || c > '9' {
				_ = s.in.UnreadByte()
				break
			}
			keep(c)
			n++
		}
		if atLeastOne && n == 0 {
			return errNotJSON
		}
		return nil
	}
	// next reads the next byte if it is one of set.
	next := func(set string) bool {
		c, err := s.in.ReadByte()
		if err != nil {
			return false
		}
		if strings.IndexByte(set, c) < 0 {
			_ = s.in.UnreadByte()
			return false
		}
		keep(c)
		return true
	}
	c := first
	if first == '-' {
		b, err := s.in.ReadByte()
		if err != nil || b < '0' || b > '9' {
			return nil, errNotJSON
		}
		keep(b)
		c = b
	}
	if c != '0' {
		if err := digits(false); err != nil {
			return nil, err
		}
	}
	if next(".") {
		if err := digits(true); err != nil {
			return nil, err
		}
	}
	if next("eE") {
		next("+-")
		if err := digits(true); err != nil {
			return nil, err
		}
	}
	return raw, nil
}

// literal reads the rest of true, false or null, none of which is a
// reference.
func (s *refScanner) literal(rest string) error {
	for i := 0; i < len(rest); i++ {
		c, err := s.in.ReadByte()
		if err != nil || c != rest[i] {
			return errNotJSON
		}
	}
	return nil
}

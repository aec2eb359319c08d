package opledger_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/opledger/opledger"
)

// The spellings the docs promise to mask (docs/state_machine.md, "The
// timeline"): a sensitive value of three bytes or more as it is,
// JSON-escaped (Go's encoder with and without HTML escaping, Python's
// ASCII-only one, PHP's \/, JavaScript's), URL-escaped in a query or a
// path (by Go, JavaScript or Python; a space as + or %20), and an e-mail
// address in any case.

// goJSON is s as Go's encoding/json writes it between the quotes of a
// string, with or without HTML escaping.
func goJSON(s string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// scriptJSON is s as Python's json.dumps (ensure_ascii), PHP's
// json_encode (ascii and slash) or JavaScript's JSON.stringify (neither)
// writes it between the quotes of a string.
func scriptJSON(s string, ascii, slash bool, hex string) string {
	var b strings.Builder
	u := func(r rune) { fmt.Fprintf(&b, `\u`+hex, r) }
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			u(r)
		case slash && r == '/':
			b.WriteString(`\/`)
		case ascii && r >= 0x7f:
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				u(r1)
				u(r2)
			} else {
				u(r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// percentEscape is v with every byte but ASCII letters, digits and
// those of keep as % and two hex digits in format, and a space as + when
// plus.
func percentEscape(v, keep string, plus bool, format string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte(keep, c) >= 0:
			b.WriteByte(c)
		case c == ' ' && plus:
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, format, c)
		}
	}
	return b.String()
}

// looksLikeAddress: some text, an @, a domain with a dot, no white space.
func looksLikeAddress(v string) bool {
	at := strings.LastIndexByte(v, '@')
	return at > 0 && strings.Contains(v[at+1:], ".") && !strings.ContainsAny(v, " \t\r\n")
}

// promisedSpellings lists the ways text may spell v that masking must
// catch.
func promisedSpellings(v string) []string {
	out := []string{v,
		goJSON(v, true), goJSON(v, false),
		scriptJSON(v, true, false, "%04x"), scriptJSON(v, true, false, "%04X"), // Python
		scriptJSON(v, true, true, "%04x"),   // PHP
		scriptJSON(v, false, false, "%04x"), // JavaScript
		url.QueryEscape(v), strings.ReplaceAll(url.QueryEscape(v), "+", "%20"), url.PathEscape(v),
		percentEscape(v, "-_.!~*'()", false, "%%%02X"), // JavaScript's encodeURIComponent
		percentEscape(v, "-_.~/", false, "%%%02X"),     // Python's quote
		percentEscape(v, "-_.~", true, "%%%02x"),       // lower-case hex digits
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// asciiCase changes the case of v's ASCII letters: 0 upper, 1 lower,
// 2 alternating.
func asciiCase(v string, how int) string {
	b := []byte(v)
	for i, c := range b {
		lower, upper := c|0x20, c&^0x20
		if lower < 'a' || lower > 'z' {
			continue
		}
		switch how % 3 {
		case 0:
			b[i] = upper
		case 1:
			b[i] = lower
		default:
			if i%2 == 0 {
				b[i] = upper
			} else {
				b[i] = lower
			}
		}
	}
	return string(b)
}

// unicodeCase changes the case of v's letters, ASCII or not: each is
// stepped through the letters it folds with (unicode.SimpleFold: É and é;
// k, K and U+212A, the Kelvin sign; s, S and ſ) as many times as how and
// its place make, modulo 3.
func unicodeCase(v string, how int) string {
	var b strings.Builder
	for i, r := range []rune(v) {
		for range (how + i) % 3 {
			r = unicode.SimpleFold(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// foldLeaks reports whether text holds outside the masks a run of whole
// characters that strings.EqualFold finds equal to v: v in any case.
func foldLeaks(text, v string) bool {
	sentinel := "\uE000"
	for r := '\uE000'; strings.ContainsRune(v, r); r++ {
		sentinel = string(r + 1)
	}
	text = strings.ReplaceAll(text, opledger.Mask, sentinel)
	n := utf8.RuneCountInString(v)
	for i := range text {
		end := i
		for k := 0; k < n && end < len(text); k++ {
			_, size := utf8.DecodeRuneInString(text[end:])
			end += size
		}
		if strings.EqualFold(text[i:end], v) {
			return true
		}
	}
	return false
}

// leaks returns the first of spellings that text holds outside the masks.
func leaks(text string, spellings []string, foldCase bool) string {
	// A mask next to text may spell a value with a '*' in it: look for
	// the spellings with each mask replaced by a character none holds.
	sentinel := "\uE000"
	for r := '\uE000'; strings.ContainsRune(strings.Join(spellings, ""), r); r++ {
		sentinel = string(r + 1)
	}
	text = strings.ReplaceAll(text, opledger.Mask, sentinel)
	if foldCase {
		text = asciiCase(text, 1)
	}
	for _, s := range spellings {
		if foldCase {
			s = asciiCase(s, 1)
		}
		if strings.Contains(text, s) {
			return s
		}
	}
	return ""
}

// stringsIn returns every string in a decoded JSON document, member
// names included.
func stringsIn(v any) []string { return appendStrings(nil, v, true) }

// appendStrings appends the strings in v to out, with names the member
// names too.
func appendStrings(out []string, v any, names bool) []string {
	switch x := v.(type) {
	case string:
		out = append(out, x)
	case []any:
		for _, el := range x {
			out = appendStrings(out, el, names)
		}
	case map[string]any:
		for k, el := range x {
			if names {
				out = append(out, k)
			}
			out = appendStrings(out, el, names)
		}
	}
	return out
}

// FuzzMaskedSpellings embeds a sensitive value, in every spelling the
// docs promise to mask (and, for an e-mail address, in other cases: as
// it is, in any mix of cases of any letters), in
// a saved response's strings, member names and nested JSON text, and in
// the destination references of the operation and its attempts; the
// masked view must hold none of them, be valid JSON, and leave an
// operation without sensitive fields as it is.
func FuzzMaskedSpellings(f *testing.F) {
	for _, s := range []struct {
		secret, around string
		how            int
	}{
		{"ana@example.invalid", "invalid address ", 0},
		{"Zoë <Lang> & \"Co\"", "x", 1},
		{"a+b c/d%e@f", "?q=", 2},
		{`back\slash`, `"`, 0},
		{"🙂 emoji", "é", 1},
		{"ÄNA@Exämple.invalid", "to:", 2},
		{"émile.müller@example.com", "to ", 1},  // and in Émile.müller@ExAmPlE.CoM
		{"kåre.sørensen@example.com", "cc:", 1}, // and with U+212A, the Kelvin sign, for k
		{"tab\there\u2028line", "", 0},
		{"bell\bform\ffeed", "", 0},
		{"del\x7f", "", 0},
		{"<é>\u2028b", "", 0},
		{"a**", "a", 0},
		{"***", "**", 1},
		{"abc", "ab", 1},
		{"4111", "", 0},
		{"12", "12", 0},
	} {
		f.Add(s.secret, s.around, s.how)
	}
	f.Fuzz(func(t *testing.T, secret, around string, how int) {
		if !utf8.ValidString(secret) || secret == "" || !utf8.ValidString(around) {
			return // a JSON payload's strings are text
		}
		if how < 0 {
			how = -how
		}
		payload, err := json.Marshal(map[string]any{"s": secret, "plain": "visible"})
		if err != nil {
			t.Fatal(err)
		}
		email := looksLikeAddress(secret)
		values := []string{secret}
		if email {
			values = append(values, asciiCase(secret, how), asciiCase(secret, how+1), asciiCase(secret, how+2))
		}
		var spellings []string
		for _, v := range values {
			spellings = append(spellings, promisedSpellings(v)...)
		}
		if email {
			spellings = append(spellings, unicodeCase(secret, how))
		}
		slices.Sort(spellings)
		spellings = slices.Compact(spellings)

		response := map[string]any{"plain": "visible", "n": 7}
		var refs []string
		for i, sp := range spellings {
			text := around + sp + around
			response[fmt.Sprintf("t%d", i)] = text
			response["k:"+text] = i
			refs = append(refs, text)
		}
		nested, err := json.Marshal(map[string]any{"inner": around + secret})
		if err != nil {
			t.Fatal(err)
		}
		response["nested"] = string(nested)
		response["list"] = []any{secret, map[string]any{"x": refs}}
		respJSON, err := json.Marshal(response)
		if err != nil {
			t.Fatal(err)
		}

		for _, ref := range append(refs, secret) {
			op := &opledger.Operation{Key: "k", Payload: payload, SensitiveFields: []string{"s"},
				Response: respJSON, DestinationRef: ref}
			attempts := []*opledger.Attempt{{Number: 1, DestinationRef: ref}}
			shown := op.Masked()
			shownAttempts := op.MaskedAttempts(attempts)
			if !json.Valid(shown.Response) {
				t.Fatalf("masked response is not JSON: %s", shown.Response)
			}
			if !json.Valid(shown.Payload) || bytes.Contains(shown.Payload, []byte("visible")) == false {
				t.Fatalf("masked payload %s", shown.Payload)
			}
			if len(secret) < 3 {
				// Only the whole value is masked.
				if ref == secret && (shown.DestinationRef != opledger.Mask || shownAttempts[0].DestinationRef != opledger.Mask) {
					t.Fatalf("reference %q shown as %q", ref, shown.DestinationRef)
				}
				continue
			}
			if l := leaks(shown.DestinationRef, spellings, email); l != "" || email && foldLeaks(shown.DestinationRef, secret) {
				t.Fatalf("reference %q shown as %q holds %q (or the address in some case)", ref, shown.DestinationRef, l)
			}
			if l := leaks(shownAttempts[0].DestinationRef, spellings, email); l != "" || email && foldLeaks(shownAttempts[0].DestinationRef, secret) {
				t.Fatalf("attempt reference %q shown as %q holds %q (or the address in some case)", ref, shownAttempts[0].DestinationRef, l)
			}
			if ref != secret {
				continue // the response is the same for every reference
			}
			var doc any
			if err := json.Unmarshal(shown.Response, &doc); err != nil {
				t.Fatal(err)
			}
			for _, s := range stringsIn(doc) {
				if l := leaks(s, spellings, email); l != "" || email && foldLeaks(s, secret) {
					t.Fatalf("masked response holds %q (or the address in some case) in %q: %s", l, s, shown.Response)
				}
			}
			if attempts[0].DestinationRef != ref || op.DestinationRef != ref || !bytes.Equal(op.Response, respJSON) {
				t.Fatal("masking changed the operation or its attempts")
			}
		}

		// Without sensitive fields, the operation is shown as it is.
		plain := &opledger.Operation{Key: "k", Payload: payload, Response: respJSON, DestinationRef: secret}
		attempts := []*opledger.Attempt{{Number: 1, DestinationRef: secret}}
		shown := plain.Masked()
		if !bytes.Equal(shown.Payload, payload) || !bytes.Equal(shown.Response, respJSON) || shown.DestinationRef != secret {
			t.Fatalf("an operation without sensitive fields was changed: %s %s %q", shown.Payload, shown.Response, shown.DestinationRef)
		}
		if got := plain.MaskedAttempts(attempts); len(got) != 1 || got[0] != attempts[0] {
			t.Fatal("attempts without sensitive fields were changed")
		}
	})
}

// FuzzMaskedJSON masks arbitrary saved responses and payloads: a valid
// JSON response or payload stays valid JSON, no string of the masked
// response holds a string of three bytes or more found at the
// sensitive path of the payload, and without sensitive fields nothing
// changes.
func FuzzMaskedJSON(f *testing.F) {
	for _, s := range []struct{ payload, response, path string }{
		{`{"email":"ana@example.invalid"}`, `{"to":"ana@example.invalid","id":"R1"}`, "email"},
		{`{"pin":1234}`, `{"pin":1234,"n":1234.0,"s":"1234"}`, "pin"},
		{`{"a":{"b":["x1y","z2w"]}}`, `[{"x1y":"z2w"},"prefix x1y"]`, "a"},
		{`{"s":"\u00e9t\u00e9"}`, `{"m":"\u00c9T\u00c9 \u00e9t\u00e9"}`, "s"},
		{`{"s":"abc"}`, `{"abc":1,"***":2,"*** (2)":3,"xabc":4}`, "s"},
		{`{"s":"abc"}`, `{"a":"abc"}]`, "s"},
		{`{"s":"abc"}`, `"abc"`, "s"},
		{`{"s":"a\"b\\c"}`, `{"x":"{\"q\":\"a\\\"b\\\\c\"}"}`, "s"},
		{`{"s":"abc"}`, `{"x":1e400,"y":-0,"z":123456789012345678901234567890}`, "s"},
		{`{"s":"abc"}`, ``, "s"},
		{`{"s":"abc"}`, `null`, "s"},
	} {
		f.Add(s.payload, s.response, s.path)
	}
	f.Fuzz(func(t *testing.T, payload, response, path string) {
		op := &opledger.Operation{Key: "k", Payload: json.RawMessage(payload), Response: json.RawMessage(response),
			SensitiveFields: []string{path}}
		shown := op.Masked()
		if json.Valid([]byte(response)) && !json.Valid(shown.Response) {
			t.Fatalf("valid response %s masked into invalid JSON %s", response, shown.Response)
		}
		if json.Valid([]byte(payload)) && !json.Valid(shown.Payload) {
			t.Fatalf("valid payload %s masked into invalid JSON %s", payload, shown.Payload)
		}
		if string(op.Response) != response || string(op.Payload) != payload {
			t.Fatal("masking changed the operation")
		}

		// The strings at the path of an object payload (a simple path).
		var doc map[string]any
		if !strings.Contains(path, ".") && json.Unmarshal([]byte(payload), &doc) == nil && json.Valid([]byte(response)) {
			var secrets []string
			for _, s := range appendStrings(nil, doc[path], false) {
				if len(s) >= 3 {
					secrets = append(secrets, s)
				}
			}
			var shownDoc any
			if len(secrets) > 0 && json.Unmarshal(shown.Response, &shownDoc) == nil {
				for _, s := range stringsIn(shownDoc) {
					if l := leaks(s, secrets, false); l != "" {
						t.Fatalf("masked response %s holds %q", shown.Response, l)
					}
				}
			}
		}

		plain := &opledger.Operation{Key: "k", Payload: json.RawMessage(payload), Response: json.RawMessage(response)}
		if p := plain.Masked(); string(p.Payload) != payload || string(p.Response) != response {
			t.Fatalf("without sensitive fields the operation changed: %s %s", p.Payload, p.Response)
		}
	})
}

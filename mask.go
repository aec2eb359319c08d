package opledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store"
)

// minSecretLength is the shortest sensitive value masked inside text
// (redact.MinSecretLength). A string or number that is such a value as a
// whole is masked whatever its length.
const minSecretLength = redact.MinSecretLength

// secretText masks the values of an operation's sensitive fields in text:
// free text the ledger stores (txn.scrub), the strings of a saved
// response and the destination reference it shows (Operation.Masked).
type secretText struct {
	// values are the sensitive values as maskResponse compares whole
	// strings and numbers: every one, whatever its length.
	values map[string]bool
	// spellings are the values of minSecretLength bytes or more and the
	// other ways text spells them, longest first, so that a value
	// containing another is masked whole.
	spellings []spelling
	// stages apply the spellings in that order: each run of spellings
	// matched as written in one pass, each spelling matched in any case
	// on its own; then each value that a URL escapes, longest first,
	// matched however an encoder escaped it (escapedAt).
	stages []maskStage
	// shortest is the fewest bytes a spelling can be found in (one in
	// any case may be shorter than as written: U+212A, the Kelvin sign,
	// is three bytes, k one): shorter text holds none.
	shortest int
}

// maskStage is a run of spellings matched as written (exact), one
// spelling matched in any case (folded, as strings.EqualFold compares),
// or one value matched with any of its bytes percent-encoded (escaped;
// in ASCII lower case and matched whatever the case of its ASCII letters
// when fold).
type maskStage struct {
	exact   *exactRun
	folded  *redact.Fold
	escaped string
	fold    bool
}

// exactRun is a run of spellings matched as written.
type exactRun struct {
	replacer *strings.Replacer
	// olds are the spellings replacer replaces: text holding none of
	// them is left as it is without running replacer, which copies the
	// text whatever it finds (and is built on first use).
	olds []string
}

// spelling is one way text may spell a sensitive value.
type spelling struct {
	text string
	// fold: text is matched in any case, letters outside ASCII too (an
	// e-mail address's), and is its redact.FoldKey, so that the
	// spellings of a value's case variants that are equal in any case
	// are one.
	fold bool
}

// secretsMemo is an operation's secretText, built on first use and again
// only when what it is built from changes: the operation may gain
// sensitive fields during a decision (a repeat names more), and a
// revision changes its payload, and with it its fingerprint. A secretText
// is never modified once built, so memos may share one.
type secretsMemo struct {
	text        *secretText
	fingerprint string
	fields      int
	built       bool
}

// of returns the secretText of op's payload and sensitive fields (nil:
// nothing to mask), its earlier versions' payloads included.
func (m *secretsMemo) of(op *store.Operation) *secretText {
	if !m.built || m.fields != len(op.SensitiveFields) || m.fingerprint != op.Fingerprint {
		*m = secretsMemo{text: newSecretText(op.Payload, op.EarlierPayloads, op.SensitiveFields),
			fingerprint: op.Fingerprint, fields: len(op.SensitiveFields), built: true}
	}
	return m.text
}

// newSecretText collects the sensitive values at paths of payload and of
// the earlier versions' payloads (a JSON array, or nil), and their
// spellings; nil when there are none.
func newSecretText(payload, earlier json.RawMessage, paths []string) *secretText {
	return secretTextAtLeast(payload, earlier, paths, minSecretLength)
}

// secretTextAtLeast is newSecretText masking inside text only the values
// of min bytes or more (a value that is a whole string is masked
// whatever its length).
func secretTextAtLeast(payload, earlier json.RawMessage, paths []string, min int) *secretText {
	if len(paths) == 0 {
		return nil
	}
	values, names := sensitiveValues(payload, paths)
	if len(earlier) > 0 {
		var payloads []json.RawMessage
		// Written by appendEarlierPayload only; one that does not decode
		// adds nothing rather than failing every write of the operation.
		if json.Unmarshal(earlier, &payloads) == nil {
			for _, p := range payloads {
				v, n := sensitiveValues(p, paths)
				values, names = union(values, v), union(names, n)
			}
		}
	}
	if len(values) == 0 && len(names) == 0 {
		return nil
	}
	st := &secretText{values: values}
	seen := map[spelling]bool{}
	var escaped []maskStage
	for value := range union(maps.Clone(values), names) {
		if len(value) < min {
			continue
		}
		fold := looksLikeEmail(value)
		for _, v := range caseVariants(value, fold) {
			if url.QueryEscape(v) != v {
				e := maskStage{escaped: v, fold: fold}
				if fold {
					e.escaped = redact.ASCIILower(v)
				}
				if !slices.Contains(escaped, e) {
					escaped = append(escaped, e)
				}
			}
			for _, s := range spellingsOf(v) {
				sp := spelling{text: s}
				if fold {
					sp = spelling{text: redact.FoldKey(s), fold: true}
				}
				if !seen[sp] {
					seen[sp] = true
					st.spellings = append(st.spellings, sp)
				}
			}
		}
	}
	slices.SortFunc(st.spellings, func(a, b spelling) int {
		if d := len(b.text) - len(a.text); d != 0 {
			return d
		}
		return strings.Compare(a.text, b.text)
	})
	st.shortest = -1
	var run, olds []string // old, new pairs of the current run of exact spellings; its olds
	flush := func() {
		if len(run) > 0 {
			st.stages = append(st.stages, maskStage{exact: &exactRun{replacer: strings.NewReplacer(run...), olds: olds}}) // argument order: longest first
			run, olds = nil, nil
		}
	}
	for _, sp := range st.spellings {
		least := len(sp.text)
		if !sp.fold {
			run = append(run, sp.text, Mask)
			olds = append(olds, sp.text)
		} else {
			flush()
			f := redact.NewFold(sp.text)
			least = f.Least()
			st.stages = append(st.stages, maskStage{folded: f})
		}
		if st.shortest < 0 || least < st.shortest {
			st.shortest = least
		}
	}
	flush()
	slices.SortFunc(escaped, func(a, b maskStage) int {
		if d := len(b.escaped) - len(a.escaped); d != 0 {
			return d
		}
		return strings.Compare(a.escaped, b.escaped)
	})
	st.stages = append(st.stages, escaped...)
	return st
}

// mask replaces by Mask every spelling of a sensitive value in s.
func (st *secretText) mask(s string) string {
	if st == nil || len(s) < st.shortest || st.shortest < 0 {
		return s
	}
	lower := "" // s in ASCII lower case, once a folded stage needs it
	for _, stage := range st.stages {
		if stage.exact != nil {
			if !containsAny(s, stage.exact.olds) {
				continue
			}
			if m := stage.exact.replacer.Replace(s); m != s {
				s, lower = m, ""
			}
			continue
		}
		if stage.escaped != "" {
			// Spelled as it is, the value is gone already: what is left
			// needs an escape.
			if strings.IndexByte(s, '%') >= 0 || strings.IndexByte(s, '+') >= 0 && strings.IndexByte(stage.escaped, ' ') >= 0 {
				if m := replaceEscaped(s, stage.escaped, stage.fold); m != s {
					s, lower = m, ""
				}
			}
			continue
		}
		if lower == "" {
			lower = redact.ASCIILower(s)
		}
		if stage.folded.MayBeIn(lower) {
			if m := stage.folded.Replace(s, Mask); m != s {
				s, lower = m, ""
			}
		}
	}
	return s
}

// containsAny reports whether s holds one of subs.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// replaceEscaped replaces by Mask every spelling of v in s that
// escapedAt finds, leftmost first.
func replaceEscaped(s, v string, fold bool) string {
	var b strings.Builder
	var ends, next []int // escapedAt's scratch space
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if fold {
			c = asciiLower(c)
		}
		if c == v[0] || c == '%' || c == '+' && v[0] == ' ' {
			var end int
			if end, ends, next = escapedAt(s, i, v, fold, ends, next); end >= 0 {
				b.WriteString(s[last:i])
				b.WriteString(Mask)
				i, last = end, end
				continue
			}
		}
		i++
	}
	if last == 0 {
		return s // a match ends after its start: none was found
	}
	b.WriteString(s[last:])
	return b.String()
}

// escapedAt returns the end of the longest spelling of v that begins at
// s[i] with any of v's bytes as it is or percent-encoded (in either case
// of hex digits), as URL encoders write it whatever they leave
// unescaped (Go's, JavaScript's encodeURIComponent, Python's quote), and
// a space as '+' too; with fold, v is in ASCII lower case and matched in
// any case. It returns -1 when no spelling begins there, and ends and
// next, scratch space for the next call. A '%' of v may be spelled '%'
// or "%25": every way is followed, as a set of ends.
func escapedAt(s string, i int, v string, fold bool, ends, next []int) (int, []int, []int) {
	ends = append(ends[:0], i)
	for k := 0; k < len(v) && len(ends) > 0; k++ {
		want := v[k]
		next = next[:0]
		for _, j := range ends {
			if j >= len(s) {
				continue
			}
			c := s[j]
			if fold {
				c = asciiLower(c)
			}
			if c == want || c == '+' && want == ' ' {
				next = appendNew(next, j+1)
			}
			if s[j] == '%' && j+2 < len(s) {
				if d, ok := unhex(s[j+1], s[j+2]); ok && (d == want || fold && asciiLower(d) == want) {
					next = appendNew(next, j+3)
				}
			}
		}
		ends, next = next, ends
	}
	if len(ends) == 0 {
		return -1, ends, next
	}
	return slices.Max(ends), ends, next
}

// appendNew appends n to set unless set holds it already.
func appendNew(set []int, n int) []int {
	if slices.Contains(set, n) {
		return set
	}
	return append(set, n)
}

// unhex returns the byte that the hex digits a and b spell.
func unhex(a, b byte) (byte, bool) {
	x, ok1 := hexDigit(a)
	y, ok2 := hexDigit(b)
	return x<<4 | y, ok1 && ok2
}

// hexDigit returns the value of the hex digit c, in either case.
func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// asciiLower is c in lower case when it is an ASCII letter.
func asciiLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// maskValue is a shown value: Mask when it is a sensitive value as a
// whole (whatever its length), otherwise what mask leaves of it.
func (st *secretText) maskValue(s string) string {
	if st == nil || s == "" {
		return s
	}
	if st.values[s] {
		return Mask
	}
	return st.mask(s)
}

// spellingsOf lists the ways text may carry v: as it is; as JSON
// encoders escape it inside a string (Go's \u003c for < and \u2028
// with or without HTML escaping, Python's ASCII-only \u00e9 and \u007f,
// uppercase hex, PHP's \/, \b and \f or their \u escapes); as Go escapes
// it in a URL query or path component (%40 for @, a space as + or %20);
// as HTML escapers write it (htmlSpellings); with its ' escaped by a
// backslash. What other URL encoders leave unescaped the escaped stages
// find (escapedAt).
func spellingsOf(v string) []string {
	out := []string{v}
	// Only a value with something a JSON encoder may escape has other
	// JSON spellings; each way of writing a character is tried only when
	// v has such a character.
	if strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e || strings.ContainsRune(`"\\/<>&`, r) }) >= 0 {
		has := func(chars string) []bool {
			if strings.ContainsAny(v, chars) {
				return []bool{false, true}
			}
			return []bool{false}
		}
		hexes := []string{"", "0123456789abcdef", "0123456789ABCDEF"}
		for _, html := range has("<>&") {
			for _, lineSep := range has("\u2028\u2029") {
				for _, short := range has("\b\f") {
					for _, slash := range has("/") {
						for _, del := range has("\x7f") {
							for _, hex := range hexes {
								out = append(out, jsonEscape(v, jsonStyle{html: html, lineSep: lineSep, short: short,
									slash: slash, del: del, asciiHex: hex}))
							}
						}
					}
				}
			}
		}
	}
	q := url.QueryEscape(v)
	out = append(out, q, strings.ReplaceAll(q, "+", "%20"), url.PathEscape(v))
	out = append(out, htmlSpellings(v)...)
	if strings.Contains(v, "'") {
		out = append(out, strings.ReplaceAll(v, "'", `\'`)) // in a JavaScript or Python string
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// htmlSpellings are v as HTML escapers write it, an error page that
// echoes a form's input, say (Go's html.EscapeString and html/template,
// Python's html.escape, PHP's htmlspecialchars): &, < and > as
// entities, a quote as each escaper's entity or as it is, and + as it is
// or as html/template writes it (&#43;: a plus-addressed e-mail, a phone
// number); none when v has nothing they escape.
func htmlSpellings(v string) []string {
	if !strings.ContainsAny(v, `<>&'"+`) {
		return nil
	}
	var out []string
	for _, apos := range []string{"'", "&#39;", "&#x27;", "&#039;", "&apos;"} {
		for _, quot := range []string{`"`, "&#34;", "&quot;"} {
			for _, plus := range []string{"+", "&#43;"} {
				out = append(out, strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", apos, `"`, quot, "+", plus).Replace(v))
			}
		}
	}
	return out
}

// jsonStyle is how a JSON encoder writes a string: with html, <, > and
// & as \u escapes (Go's default); with lineSep, U+2028 and U+2029 as \u
// escapes (Go's, HTML escaping or not); with short, \b and \f so
// (Go since 1.22, Python, PHP, JavaScript) instead of \u0008 and \u000c;
// with slash, / as \/ (PHP's default); with asciiHex, every character
// outside ASCII as a \u escape in those hex digits (Python's
// ensure_ascii, PHP's default; UTF-16 surrogate pairs above U+FFFF), and
// with del too DEL (Python's).
type jsonStyle struct {
	html, lineSep, short, slash, del bool
	asciiHex                         string
}

// jsonEscape writes v as an encoder of style o writes it between the
// quotes of a string.
func jsonEscape(v string, o jsonStyle) string {
	var b strings.Builder
	u := func(r rune) {
		hex := o.asciiHex
		if hex == "" {
			hex = "0123456789abcdef"
		}
		b.WriteString(`\u`)
		for shift := 12; shift >= 0; shift -= 4 {
			b.WriteByte(hex[r>>shift&0xf])
		}
	}
	for _, r := range v {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case o.short && r == '\b':
			b.WriteString(`\b`)
		case o.short && r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			u(r)
		case o.html && (r == '<' || r == '>' || r == '&'):
			u(r)
		case (o.html || o.lineSep) && (r == '\u2028' || r == '\u2029'):
			u(r)
		case o.slash && r == '/':
			b.WriteString(`\/`)
		case o.asciiHex != "" && (r > 0x7f || o.del && r == 0x7f):
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

// caseVariants are the values masking looks for in text for the
// sensitive value v: v itself and, for an e-mail address (fold) with
// letters outside ASCII, v in lower and in upper case. Spelled as it is,
// an address is matched in any case (redact.Fold, as strings.EqualFold
// compares): the variants add there only what case mapping reaches
// beyond case folding (İ lowers to i, ı uppers to I), and are one
// spelling otherwise. Its escaped spellings (Python's "\u00e9", a URL's
// "%C3%A9") are matched whatever the case of their ASCII letters and hex
// digits only, so that "JOSÉ@example.com" lower-cased by a destination
// and then escaped is still caught through the lower-case variant,
// whatever it did to the ASCII letters; an escaped spelling with the
// other letters in a mix of cases is not.
func caseVariants(v string, fold bool) []string {
	variants := []string{v}
	if !fold || !hasNonASCII(v) {
		return variants
	}
	for _, c := range []string{strings.ToLower(v), strings.ToUpper(v)} {
		if !slices.Contains(variants, c) {
			variants = append(variants, c)
		}
	}
	return variants
}

func hasNonASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// looksLikeEmail reports whether v has the shape of an e-mail address:
// some text, an @, and a domain with a dot, without spaces. Such values
// are masked in text whatever the case of their letters.
func looksLikeEmail(v string) bool {
	at := strings.LastIndexByte(v, '@')
	return at > 0 && strings.Contains(v[at+1:], ".") && !strings.ContainsAny(v, " \t\r\n")
}

// appendEarlierPayload returns earlier (a JSON array of payloads, or nil)
// with payload added at its end, unless it holds it already.
func appendEarlierPayload(earlier, payload json.RawMessage) (json.RawMessage, error) {
	var payloads []json.RawMessage
	if len(earlier) > 0 {
		if err := json.Unmarshal(earlier, &payloads); err != nil {
			return nil, fmt.Errorf("earlier payloads: %w", err)
		}
	}
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	// Kept as Marshal writes it (compact): compared so.
	var compact bytes.Buffer
	if err := json.Compact(&compact, payload); err != nil {
		return nil, fmt.Errorf("earlier payload: %w", err)
	}
	if slices.ContainsFunc(payloads, func(p json.RawMessage) bool { return bytes.Equal(p, compact.Bytes()) }) {
		return earlier, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as written: "<" stays "<", so the comparison holds
	if err := enc.Encode(append(payloads, compact.Bytes())); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// union adds b's members to a, made if nil, and returns it.
func union(a, b map[string]bool) map[string]bool {
	if len(b) == 0 {
		return a
	}
	if a == nil {
		a = make(map[string]bool, len(b))
	}
	maps.Copy(a, b)
	return a
}

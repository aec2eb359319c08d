package opledger

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store"
)

// minSecretLength is the shortest sensitive value masked inside text:
// shorter ones (a flag, a count) would mask ordinary words and numbers of
// every message while protecting little. A string or number that is such
// a value as a whole is masked whatever its length.
const minSecretLength = 3

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
	// on its own.
	stages []maskStage
	// shortest is the length of the shortest spelling: shorter text
	// holds none.
	shortest int
}

// maskStage is a run of spellings matched as written (exact), or one
// spelling in ASCII lower case matched in any case (folded).
type maskStage struct {
	exact  *strings.Replacer
	folded string
}

// spelling is one way text may spell a sensitive value.
type spelling struct {
	text string
	// fold: text is in ASCII lower case and matched whatever the case
	// of its ASCII letters (an e-mail address's).
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
// nothing to mask).
func (m *secretsMemo) of(op *store.Operation) *secretText {
	if !m.built || m.fields != len(op.SensitiveFields) || m.fingerprint != op.Fingerprint {
		*m = secretsMemo{text: newSecretText(op.Payload, op.SensitiveFields),
			fingerprint: op.Fingerprint, fields: len(op.SensitiveFields), built: true}
	}
	return m.text
}

// newSecretText collects the sensitive values at paths of payload and
// their spellings; nil when there are none.
func newSecretText(payload json.RawMessage, paths []string) *secretText {
	if len(paths) == 0 {
		return nil
	}
	values := sensitiveValues(payload, paths)
	if len(values) == 0 {
		return nil
	}
	st := &secretText{values: values}
	seen := map[spelling]bool{}
	for v := range values {
		if len(v) < minSecretLength {
			continue
		}
		fold := looksLikeEmail(v)
		for _, s := range spellingsOf(v) {
			sp := spelling{text: s}
			if fold {
				sp = spelling{text: redact.ASCIILower(s), fold: true}
			}
			if !seen[sp] {
				seen[sp] = true
				st.spellings = append(st.spellings, sp)
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
	var run []string // old, new pairs of the current run of exact spellings
	flush := func() {
		if len(run) > 0 {
			st.stages = append(st.stages, maskStage{exact: strings.NewReplacer(run...)}) // argument order: longest first
			run = nil
		}
	}
	for _, sp := range st.spellings {
		st.shortest = len(sp.text)
		if !sp.fold {
			run = append(run, sp.text, Mask)
			continue
		}
		flush()
		st.stages = append(st.stages, maskStage{folded: sp.text})
	}
	flush()
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
			if m := stage.exact.Replace(s); m != s {
				s, lower = m, ""
			}
			continue
		}
		if lower == "" {
			lower = redact.ASCIILower(s)
		}
		if strings.Contains(lower, stage.folded) {
			s, lower = redact.ReplaceFold(s, stage.folded, Mask), ""
		}
	}
	return s
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
// encoders escape it inside a string (Go's \u003c for <, Python's
// ASCII-only \u00e9, uppercase hex, \/); as a URL query or path
// component escapes it (%40 for @, a space as + or %20).
func spellingsOf(v string) []string {
	out := []string{v}
	// Only a value with something a JSON encoder may escape has other
	// JSON spellings.
	if strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e || strings.ContainsRune(`"\\/<>&`, r) }) >= 0 {
		for _, html := range []bool{false, true} {
			for _, hex := range []string{"", "0123456789abcdef", "0123456789ABCDEF"} {
				for _, slash := range []bool{false, true} {
					out = append(out, jsonEscape(v, html, hex, slash))
				}
			}
		}
	}
	q := url.QueryEscape(v)
	out = append(out, q, strings.ReplaceAll(q, "+", "%20"), url.PathEscape(v))
	slices.Sort(out)
	return slices.Compact(out)
}

// jsonEscape writes v as JSON encoders write it between the quotes of a
// string: with html, <, > and & as \u escapes (Go's default); with
// asciiHex, every character outside ASCII as a \u escape in those hex
// digits (Python's ensure_ascii; UTF-16 surrogate pairs above U+FFFF);
// with slash, / as \/ (PHP's default).
func jsonEscape(v string, html bool, asciiHex string, slash bool) string {
	hex := asciiHex
	if hex == "" {
		hex = "0123456789abcdef"
	}
	var b strings.Builder
	u := func(r rune) {
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
		case r < 0x20:
			u(r)
		case html && (r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029'):
			u(r)
		case slash && r == '/':
			b.WriteString(`\/`)
		case asciiHex != "" && r > 0x7f:
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

// looksLikeEmail reports whether v has the shape of an e-mail address:
// some text, an @, and a domain with a dot, without spaces. Such values
// are masked in text whatever the case of their letters.
func looksLikeEmail(v string) bool {
	at := strings.LastIndexByte(v, '@')
	return at > 0 && strings.Contains(v[at+1:], ".") && !strings.ContainsAny(v, " \t\r\n")
}

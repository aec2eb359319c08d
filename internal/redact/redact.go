// Package redact shows store DSNs without their secrets, for messages and
// help texts: the root package's errors and the CLI's output use it alike;
// takes operation keys out of errors meant for logs; and masks the
// credentials a destination's answer repeats (Secrets), for the proxy and
// the HTTP destinations alike.
//
// Allowed imports: the standard library.
package redact

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// secretParams are the connection parameters whose values are secrets,
// as pgx reads a DSN (pgconn masks the same two in its parse errors): the
// server's password, and sslpassword, the passphrase of the client's TLS
// key. The other parameters name files (sslkey, sslcert, sslrootcert,
// passfile, servicefile) or settings; what those files hold is read from
// them, never given in the DSN.
var secretParams = []string{"password", "sslpassword"}

// mask stands for a secret left out.
const mask = "xxxxx"

// DSN is dsn, parsed as u, without its secrets: the URL's user password,
// the value of each secret query parameter (secretParams, its key in any
// case and percent-encoded as the driver decodes it), and a secret written
// in the keyword form (sslpassword=… or password = '…') anywhere else, as
// in a query value or a path (a keyword string pasted into a URL) are
// replaced by "xxxxx". The scheme is kept as it was typed (u has it in
// lower case). u is left as it is.
func DSN(dsn string, u *url.URL) string {
	r := *u
	r.RawQuery = query(u.RawQuery, true)
	return keywords(dsn[:len(u.Scheme)] + r.Redacted()[len(u.Scheme):])
}

// DSNWithoutSecrets is dsn, parsed as u, with its secrets left out rather
// than masked, to repeat in a command (the environment, PGPASSWORD and
// PGSSLPASSWORD, or ~/.pgpass then gives them): the URL's user password
// and the secret query parameters are removed. ok is false when dsn holds
// a secret elsewhere (the keyword form, which DSN masks), which no part of
// the URL can drop: it is then not to be repeated at all.
func DSNWithoutSecrets(dsn string, u *url.URL) (without string, ok bool) {
	r := *u
	if r.User != nil {
		r.User = url.User(r.User.Username())
	}
	r.RawQuery = query(u.RawQuery, false)
	without = dsn[:len(u.Scheme)] + r.String()[len(u.Scheme):]
	if keywords(without) != without {
		return "", false
	}
	return without, true
}

// StrayAt reports whether a postgres:// (or postgresql://) URL is one
// that the PostgreSQL driver and the URL syntax (net/url, which DSN
// reads it with) split differently, so that DSN could show part of a
// password and the driver's errors could name another part. The driver,
// as libpq, takes everything up to the first '@' before any '/' for the
// user and password, even past a '?' or '#', and the rest up to a '?' or
// '/' for the hosts. Two shapes differ: an '@' in the host part after
// that first '@' (a password's '@' not written %40:
// postgres://app:p@ss@db/ledger, where the driver looks up "ss@db" and
// says so in its errors), and a '?' or '#' before it (a query value's
// '@' with no path before the query, postgres://db:5432?password=p@ss,
// where the driver takes "db" for the user and looks up "ss"; or a
// password's '?' or '#' not written %3F or %23). No such URL is read as
// its writer meant by both: it is a mistake to refuse before it is used,
// without repeating it.
func StrayAt(dsn string) bool {
	rest, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		if rest, ok = strings.CutPrefix(dsn, "postgres://"); !ok {
			return false
		}
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	userinfo, hosts, found := strings.Cut(rest, "@")
	if !found {
		return false
	}
	if strings.ContainsAny(userinfo, "?#") {
		return true
	}
	if i := strings.IndexAny(hosts, "?#"); i >= 0 {
		hosts = hosts[:i]
	}
	return strings.Contains(hosts, "@")
}

// StrayAtReason says why a DSN that StrayAt reports is refused, without
// repeating it.
const StrayAtReason = "the postgres DSN (not repeated: it may hold a password) is read one way by the PostgreSQL driver and another by the URL syntax: " +
	"the driver takes everything up to the first '@' before any '/' for USER:PASSWORD, even past a '?' or '#', and the rest for the host; " +
	"write an '@', '?' or '#' of the user, the password or a query value as %40, %3F or %23"

// query is the raw query of a URL with the value of each secret parameter
// masked, or, when keep is false, each such parameter removed. It splits
// the pairs as pgx does (on '&' only, where net/url's Query also splits
// on ';' and drops the pair) and leaves the others as they were typed.
func query(raw string, keep bool) string {
	if raw == "" {
		return raw
	}
	pairs := strings.Split(raw, "&")
	out := pairs[:0]
	for _, pair := range pairs {
		key, _, _ := strings.Cut(pair, "=")
		switch {
		case !secretParam(key):
			out = append(out, pair)
		case keep:
			out = append(out, key+"="+mask)
		}
	}
	return strings.Join(out, "&")
}

// secretParam reports whether the raw key of a query pair names a secret
// parameter: percent-decoded, without the spaces around it that the
// driver skips, in any case.
func secretParam(raw string) bool {
	key, err := url.PathUnescape(raw)
	if err != nil {
		key = raw
	}
	key = strings.Trim(key, " ")
	return slices.ContainsFunc(secretParams, func(p string) bool { return strings.EqualFold(key, p) })
}

// keywords is s with the value of each secret written in the keyword form
// masked: "password" in any case (so sslpassword too), spaces (or %20),
// '=', spaces, then the value: between single quotes (a backslash escapes
// one), or up to the next whitespace or '&'. It masks more than the
// keyword form's secrets rather than less (a mypassword=… too).
func keywords(s string) string {
	lower := ASCIILower(s)
	var b strings.Builder
	last := 0 // s[:last] is in b
	for at := 0; ; {
		i := strings.Index(lower[at:], "password")
		if i < 0 {
			break
		}
		j := skipSpaces(s, at+i+len("password"))
		at = j
		if j == len(s) || s[j] != '=' {
			continue
		}
		start := skipSpaces(s, j+1)
		end := start
		if end < len(s) && s[end] == '\'' {
			for end++; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' {
					end++
				}
			}
			end = min(end+1, len(s))
		} else {
			for end < len(s) && !unicode.IsSpace(rune(s[end])) && s[end] != '&' {
				end++
			}
		}
		if end == start || s[start:end] == mask {
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(mask)
		last, at = end, end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// skipSpaces is the index of the first byte of s from i on that is no
// space, tab or escaped space (%20).
func skipSpaces(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == ' ' || s[i] == '\t':
			i++
		case strings.HasPrefix(s[i:], "%20"):
			i += 3
		default:
			return i
		}
	}
	return i
}

// Keys returns err with the operation key replaced by "<key>" and, when
// the key is a workflow step's (opledger.WorkflowStepKey: the workflow's
// key, '/', the step's name), the workflow's key by "<workflow>", so that
// the other steps' keys go too: an error about a workflow names its
// workflow and its next step, which logs must not. It returns err itself
// when neither occurs in it, and nil for nil.
//
// Only whole occurrences are replaced: not one inside a longer word
// (standing after a letter or digit, or, when the key ends with one,
// before a letter or digit), so that a short key ("a", "17") leaves the
// rest of the message readable. Messages name keys between spaces,
// quotes or punctuation, never glued to a word.
func Keys(key string, err error) error {
	if err == nil || key == "" {
		return err
	}
	text := err.Error()
	redacted := replaceWhole(text, key, "<key>")
	if i := strings.LastIndexByte(key, '/'); i > 0 { // as opledger.SplitWorkflowStepKey
		redacted = replaceWhole(redacted, key[:i], "<workflow>")
	}
	if redacted == text {
		return err
	}
	return errors.New(redacted)
}

// replaceWhole replaces by with each occurrence of old in s that is not
// part of a longer word: old is not preceded by an ASCII letter or digit
// and, if old ends with one, not followed by one.
func replaceWhole(s, old, with string) string {
	var b strings.Builder
	from := 0 // s[:from] is in b
	for at := 0; ; {
		i := strings.Index(s[at:], old)
		if i < 0 {
			break
		}
		i += at
		end := i + len(old)
		if (i == 0 || !alnum(s[i-1])) && (end == len(s) || !alnum(old[len(old)-1]) || !alnum(s[end])) {
			b.WriteString(s[from:i])
			b.WriteString(with)
			from, at = end, end
			continue
		}
		at = i + 1
	}
	if from == 0 {
		return s
	}
	b.WriteString(s[from:])
	return b.String()
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// ASCIILower is s with its ASCII letters in lower case, byte for byte:
// of the same length, so that a position in one is the same position in
// the other (strings.ToLower may change the length of other text).
func ASCIILower(s string) string {
	if !hasASCIIUpper(s) {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// hasASCIIUpper reports whether s holds an ASCII upper-case letter.
func hasASCIIUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// Fold is a text to find in any case, as strings.EqualFold compares:
// Unicode simple case folding, letters outside ASCII too (É and é, ß and
// ẞ; k, K and U+212A, the Kelvin sign). A match has as many characters
// as the text but may have more or fewer bytes (U+212A is three bytes, k
// one).
type Fold struct {
	text  string
	first []rune // the characters that fold to text's first
	// firstBuf holds first unless text's first character folds with more
	// than four (none does today): no allocation of its own.
	firstBuf [4]rune
	least    int // the fewest bytes a match can have
	// anchor is the longest run of text's ASCII characters but k and s
	// (which fold with U+212A, the Kelvin sign, and ſ), in lower case: those
	// fold with ASCII only, so a match holds the run, whatever the case
	// of its letters.
	anchor string
}

// NewFold returns the Fold of text, which must not be empty.
func NewFold(text string) *Fold {
	f := new(Fold)
	f.init(text)
	return f
}

// init makes f the Fold of text.
func (f *Fold) init(text string) {
	r, _ := utf8.DecodeRuneInString(text)
	*f = Fold{text: text}
	f.first = append(f.firstBuf[:0], r)
	for c := unicode.SimpleFold(r); c != r; c = unicode.SimpleFold(c) {
		f.first = append(f.first, c)
	}
	run := 0 // where the current run of anchor characters began
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		if r >= utf8.RuneSelf || r|0x20 == 'k' || r|0x20 == 's' {
			run = i
		} else if i-run > len(f.anchor) {
			f.anchor = text[run:i]
		}
		// UTF-8 grows with the code point: the least character r folds
		// with is its shortest spelling (FoldKey); strings.EqualFold
		// reads an invalid byte as U+FFFD, so that one may be a byte.
		if r = leastFold(r); r == utf8.RuneError {
			f.least++
		} else {
			f.least += utf8.RuneLen(r)
		}
	}
	f.anchor = ASCIILower(f.anchor)
}

// Least is the fewest bytes a match can have: shorter text holds none.
func (f *Fold) Least() int { return f.least }

// MayBeIn reports whether the text may occur in s, given lower, which is
// ASCIILower(s): false when Replace would find nothing, at the cost of
// one strings.Contains (lower may serve many Folds).
func (f *Fold) MayBeIn(lower string) bool { return strings.Contains(lower, f.anchor) }

// Replace replaces by with every occurrence in s of f's text in any case,
// leftmost first: each the bytes of s that strings.EqualFold finds equal
// to the text, beginning at a character. It returns s itself when none
// occurs.
func (f *Fold) Replace(s, with string) string {
	var b strings.Builder
	last := 0 // s[:last] is in b
	for i := 0; i+f.least <= len(s); {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		if slices.Contains(f.first, r) {
			if end := f.matchAt(s, i); end >= 0 {
				b.WriteString(s[last:i])
				b.WriteString(with)
				i, last = end, end
				continue
			}
		}
		i += size
	}
	if last == 0 {
		return s // a match ends after its start: none was found
	}
	b.WriteString(s[last:])
	return b.String()
}

// matchAt returns the end of the match of f's text that begins at s[i],
// or -1: as many characters as the text has, each equal in any case
// (strings.EqualFold) to the text's at its place.
func (f *Fold) matchAt(s string, i int) int {
	for t := f.text; t != ""; {
		if i >= len(s) {
			return -1
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		tr, tn := utf8.DecodeRuneInString(t)
		if r != tr && !strings.EqualFold(s[i:i+n], t[:tn]) {
			return -1
		}
		i, t = i+n, t[tn:]
	}
	return i
}

// MinSecretLength is the shortest secret masked inside text: shorter ones
// (a flag, a count, a two-letter code) would mask parts of ordinary words,
// dates and numbers while protecting little. The ledger's masking of
// sensitive values, the proxy's of echoed credentials and a destination's
// of its header secrets all leave them out. A value masked as a whole (a
// sensitive field's own value) is masked whatever its length.
const MinSecretLength = 3

// Secrets replaces by mask, in s, every occurrence of each of secrets in
// turn (pass them longest first, so that a secret holding another is
// masked whole), letters compared in any case (Fold): an answer may spell
// a host, a path or a percent-escape in another case. Masks that end up
// side by side are written as one. Empty secrets are skipped; s itself is
// returned when none occurs.
func Secrets(s string, secrets []string, mask string) string {
	masked := s
	for _, secret := range secrets {
		if secret != "" {
			masked = NewFold(secret).Replace(masked, mask)
		}
	}
	return joinMasks(s, masked, mask)
}

// Folds returns the Folds of secrets, empty ones skipped, for
// SecretsFolded.
func Folds(secrets []string) []*Fold {
	out := make([]*Fold, 0, len(secrets))
	folds := make([]Fold, len(secrets)) // one allocation for all
	for i, secret := range secrets {
		if secret != "" {
			folds[i].init(secret)
			out = append(out, &folds[i])
		}
	}
	return out
}

// SecretsFolded is Secrets(s, secrets, mask) for folds = Folds(secrets):
// for many texts masked with the same secrets, which are folded once.
func SecretsFolded(s string, folds []*Fold, mask string) string {
	masked := s
	for _, f := range folds {
		masked = f.Replace(masked, mask)
	}
	return joinMasks(s, masked, mask)
}

// joinMasks is masked, s with its secrets masked, with masks that ended
// up side by side written as one; s itself when nothing was masked.
func joinMasks(s, masked, mask string) string {
	if masked == s {
		return s
	}
	for mask != "" && strings.Contains(masked, mask+mask) {
		masked = strings.ReplaceAll(masked, mask+mask, mask)
	}
	return masked
}

// FoldKey is s with each character replaced by the least of those it
// folds with (strings.EqualFold): texts equal in any case have the same
// key, and a Fold of the key finds what one of any of them finds.
func FoldKey(s string) string { return strings.Map(leastFold, s) }

// leastFold is the least character r folds with (r itself when none).
func leastFold(r rune) rune {
	least := r
	for c := unicode.SimpleFold(r); c != r; c = unicode.SimpleFold(c) {
		least = min(least, c)
	}
	return least
}

// DataName reports whether a member name inside a sensitive field (or a
// path segment) is data (an address, a phone number, a date, a name with
// a space) rather than a field name: a field name is an identifier, an
// ASCII letter or '_' and then letters, digits, '_' and '-' ("city",
// "line2", "first_name"), and masking it would mask that word in every
// text about the operation ("invalid city" read "invalid ***").
func DataName(name string) bool {
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
		case i > 0 && (r >= '0' && r <= '9' || r == '-'):
		default:
			return true
		}
	}
	return false
}

// Package redact shows store DSNs without their secrets, for messages and
// help texts: the root package's errors and the CLI's output use it alike;
// and takes operation keys out of errors meant for logs.
//
// Allowed imports: the standard library.
package redact

import (
	"errors"
	"net/url"
	"strings"
)

// DSN is dsn, parsed as u, without its passwords: the URL's user
// password and a password query parameter are replaced by "xxxxx". The
// scheme is kept as it was typed (u has it in lower case).
func DSN(dsn string, u *url.URL) string {
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return dsn[:len(u.Scheme)] + u.Redacted()[len(u.Scheme):]
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
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// ReplaceFold replaces by with every occurrence in s of lower (in ASCII
// lower case), whatever the case of the ASCII letters of s.
func ReplaceFold(s, lower, with string) string {
	ls := ASCIILower(s)
	i := strings.Index(ls, lower)
	if i < 0 {
		return s
	}
	var b strings.Builder
	for i >= 0 {
		b.WriteString(s[:i])
		b.WriteString(with)
		s, ls = s[i+len(lower):], ls[i+len(lower):]
		i = strings.Index(ls, lower)
	}
	b.WriteString(s)
	return b.String()
}

// Package textcut cleans and shortens text for the ledger's stores and for
// messages: the one place that knows how to cut UTF-8 without splitting a
// character.
//
// Allowed imports: the standard library.
package textcut

import (
	"strings"
	"unicode/utf8"
)

// Valid returns s with NUL bytes and invalid UTF-8 replaced by U+FFFD:
// text both stores keep.
func Valid(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Prefix returns the longest start of s of at most n bytes that does not
// split a UTF-8 character; s itself when it is no longer than n.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

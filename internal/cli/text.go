package cli

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store/pgstore"
)

// oneLine makes an error message one line: the lines of multi-line
// messages (pgx's dial errors, YAML decoding errors) are joined with "; ",
// tabs and indentation removed. YAML's "field x not found in type T" reads
// "unknown field x", and a field that is not one plain word, `unknown
// field "my key"`.
func oneLine(msg string) string {
	msg = yamlUnknownField.ReplaceAllStringFunc(msg, func(m string) string {
		field := yamlUnknownField.FindStringSubmatch(m)[1]
		if !plainField.MatchString(field) {
			field = strconv.Quote(field)
		}
		return "unknown field " + field
	})
	msg = yamlErrorsHeader.ReplaceAllString(msg, "")
	var b strings.Builder
	for _, line := range strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }) {
		line = strings.TrimSpace(strings.ReplaceAll(line, "\t", " "))
		switch {
		case line == "":
			continue
		case b.Len() == 0:
		case strings.HasSuffix(b.String(), ":"): // "failed to connect to …:" introduces the next line
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return cell(b.String())
}

var (
	// The field is what the file wrote, spaces included ("my key": 1),
	// up to the type name the line ends with.
	yamlUnknownField = regexp.MustCompile(`field (.+) not found in type [\w.*\[\]]+`)
	plainField       = regexp.MustCompile(`^[\w.-]+$`)
	yamlErrorsHeader = regexp.MustCompile(`unmarshal errors:\n\s*`)
)

// cell escapes the control characters of a stored value printed in a text
// table or line (a newline as \n, a tab as \t, others as \x1b or \u2028),
// and each byte that is not UTF-8 (as \xff), so that one value stays one
// cell and cannot forge lines of the output or reach the terminal raw.
// What is stored is not changed; --json prints it as it is.
func cell(s string) string {
	if strings.IndexFunc(s, isControl) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			// A byte that is not UTF-8 (a key given on the command line)
			// would reach the terminal as it is.
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isControl(r):
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u2028'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isControl reports the runes that move the cursor or the terminal's
// state, or reorder the text shown: C0, DEL, C1, the Unicode line and
// paragraph separators, and the bidirectional marks, embeddings,
// overrides and isolates, with which a stored reason or name could show
// text other than what it holds.
func isControl(r rune) bool {
	switch {
	case unicode.IsControl(r), r == '\u2028', r == '\u2029':
		return true
	case r == '\u061c', r == '\u200e', r == '\u200f', r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
		return true
	}
	return false
}

// looksLikePostgres reports a value that may carry credentials: a libpq
// keyword string (password=…) or a URL with a user (u:pw@host). Such a
// value is never repeated in a message.
func looksLikePostgres(dsn string) bool {
	return strings.ContainsAny(dsn, "@= \t\n\r\v\f") || strings.Contains(strings.ToLower(dsn), "postgres")
}

// redactedDSN is dsn as it may be shown: a SQLite DSN as it is, a postgres://
// URL without its secrets (redact.DSN), anything else not at all
// (placeholder).
func redactedDSN(dsn, placeholder string) string {
	// A path may hold spaces and '=': only a SQLite DSN that reads like a
	// mistyped PostgreSQL one is not shown.
	if strings.HasPrefix(dsn, "sqlite:") && !strings.Contains(strings.ToLower(dsn), "password") && !strings.Contains(strings.ToLower(dsn), "postgres") {
		return dsn
	}
	if !pgstore.IsDSN(dsn) {
		return placeholder
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return placeholder
	}
	return redact.DSN(dsn, u)
}

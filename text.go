package opledger

import (
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/textcut"
)

// Text that the ledger stores.
//
// PostgreSQL's text takes neither NUL bytes nor invalid UTF-8 (SQLite
// would store both, so the two stores would differ). Names and reasons a
// caller gives are refused with a specific error when they hold either;
// texts that record what happened elsewhere (a destination's error, a
// lookup's evidence) are kept with such bytes replaced, since refusing
// them would lose the report they belong to.

// checkText returns ErrInvalidInput naming the first of the fields, given
// as name and value pairs, that PostgreSQL's text cannot hold.
func checkText(fields ...string) error {
	if name, ok := storableText(fields...); !ok {
		return invalidInput("%s %s", name, errUnstorableText)
	}
	return nil
}

// checkLength refuses a value longer than max bytes, naming its field
// and both lengths.
func checkLength(field, v string, max int) error {
	if len(v) > max {
		return invalidInput("%s is %d bytes long; at most %d are allowed", field, len(v), max)
	}
	return nil
}

// checkRequiredName refuses a name that is empty or longer than
// maxNameLength, saying which of the two it is.
func checkRequiredName(field, v string) error {
	if v == "" {
		return invalidInput("%s is required", field)
	}
	return checkLength(field, v, maxNameLength)
}

// errUnstorableText is why text with a NUL byte or invalid UTF-8 is
// refused.
var errUnstorableText = errors.New("must be UTF-8 text without NUL bytes")

// storableText reports whether every value of the (name, value) pairs is
// text both stores keep, and otherwise the name of the first that is not.
func storableText(fields ...string) (name string, ok bool) {
	for i := 0; i+1 < len(fields); i += 2 {
		if v := fields[i+1]; strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return fields[i], false
		}
	}
	return "", true
}

// keepableText returns s with NUL bytes and invalid UTF-8 replaced by
// U+FFFD, cut to at most n bytes without splitting a character.
func keepableText(s string, n int) string { return textcut.Prefix(textcut.Valid(s), n) }

// checkWorker checks the name a claim records as its worker.
func checkWorker(worker string) error {
	if err := checkLength("worker name", worker, maxNameLength); err != nil {
		return err
	}
	return checkText("worker", worker)
}

// textTime writes a time that a text the ledger records gives (a
// timeline entry's evidence, a reported error): in UTC, to the
// millisecond (2026-12-07T07:10:03.326Z), which an operator reads at a
// glance and which keeps more precision than a lease or a backoff needs;
// the operation's own fields keep the store's microseconds.
func textTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

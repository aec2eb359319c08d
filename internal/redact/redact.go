// Package redact shows store DSNs without their secrets, for messages and
// help texts: the root package's errors and the CLI's output use it alike.
//
// Allowed imports: the standard library.
package redact

import "net/url"

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

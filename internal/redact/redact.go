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
func Keys(key string, err error) error {
	if err == nil || key == "" {
		return err
	}
	text := err.Error()
	redacted := strings.ReplaceAll(text, key, "<key>")
	if i := strings.LastIndexByte(key, '/'); i > 0 { // as opledger.SplitWorkflowStepKey
		redacted = strings.ReplaceAll(redacted, key[:i], "<workflow>")
	}
	if redacted == text {
		return err
	}
	return errors.New(redacted)
}

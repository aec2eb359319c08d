package destination

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/marker"
	"github.com/opledger/opledger/internal/redact"
)

// minSecretLength is the shortest secret masked (redact.MinSecretLength).
const minSecretLength = redact.MinSecretLength

// secretsOf are the secrets of a header whose resolved value is val and
// whose ${NAME} references were replaced by refs: none without a
// reference (a literal value is configuration, not a secret, and the
// file refuses literal credentials); otherwise each referenced value,
// the whole value, and the credential after its scheme ("Bearer
// <token>"), each also as a URL query or path escapes it. Those shorter
// than minSecretLength are left out.
func secretsOf(val string, refs []string) []string {
	if len(refs) == 0 {
		return nil
	}
	var out []string
	add := func(v string) {
		for _, s := range []string{v, url.QueryEscape(v), url.PathEscape(v)} {
			if len(s) >= minSecretLength && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	for _, r := range refs {
		add(r)
	}
	add(val)
	add(strings.TrimSpace(val))
	if _, cred, ok := strings.Cut(strings.TrimSpace(val), " "); ok {
		add(strings.TrimSpace(cred))
	}
	return out
}

// secretList is what an HTTP destination masks, by opledger.Mask, in what
// it returns of an answer (Call's and Lookup's results and errors): the
// secrets of its headers (secretsOf), longest first, so that a secret
// that holds another is masked whole. A destination may echo the
// request's headers, or quote its key in an error, and the ledger keeps
// and shows what it returns to every reader of the operation.
type secretList []string

// newSecretList sorts and deduplicates secrets; nil when there are none.
func newSecretList(secrets []string) secretList {
	if len(secrets) == 0 {
		return nil
	}
	l := slices.Clone(secrets)
	slices.SortFunc(l, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(l)
}

// mask replaces each secret in s, letters compared in any case
// (redact.Secrets), outside the marker phrases: a secret that happened
// to be part of one must not change what the reconciler reads from the
// text.
func (l secretList) mask(s string) string {
	if len(l) == 0 || s == "" {
		return s
	}
	for _, p := range marker.Phrases {
		if i := strings.Index(s, p); i >= 0 {
			return l.mask(s[:i]) + p + l.mask(s[i+len(p):])
		}
	}
	return redact.Secrets(s, l, opledger.Mask)
}

// maskResult masks the reference and the response of a call's result. A
// response is masked in its decoded strings, numbers and member names,
// so that no JSON escape hides a secret, and encoded again when it held
// one (maskJSON); one that is then no longer savable, or still holds a
// secret, is dropped.
func (l secretList) maskResult(res opledger.Result) opledger.Result {
	if len(l) == 0 {
		return res
	}
	res.Ref = l.mask(res.Ref)
	if len(res.Response) > 0 {
		res.Response = l.maskJSON(res.Response)
	}
	return res
}

// maskJSON returns doc, a savable response (savable), with the secrets
// masked (see maskResult): doc itself when none occurs in it, in any
// spelling (holdsSecret), nil when the masked document cannot be saved.
// A doc that holds a secret is never returned as it is, even when its
// decoded tree has none to mask: a member name given twice decodes to
// its last value, and the secret in an earlier one would be kept. It is
// encoded again from the masked tree (a repeated member then once, with
// its last value), and dropped if that still holds a secret.
func (l secretList) maskJSON(doc json.RawMessage) json.RawMessage {
	if !l.holdsSecret(doc) {
		return doc
	}
	v, err := decodeJSON(doc)
	if err != nil {
		return nil
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			var renamed []string
			for k, el := range x {
				x[k] = walk(el)
				if l.mask(k) != k {
					renamed = append(renamed, k)
				}
			}
			slices.Sort(renamed) // the same answer is masked the same way
			for _, k := range renamed {
				el := x[k]
				delete(x, k)
				name := l.mask(k)
				for n := 2; ; n++ {
					if _, taken := x[name]; !taken {
						break
					}
					name = l.mask(fmt.Sprintf("%s (%d)", l.mask(k), n))
				}
				x[name] = el
			}
		case []any:
			for i, el := range x {
				x[i] = walk(el)
			}
		case string:
			return l.mask(x)
		case json.Number:
			if m := l.mask(x.String()); m != x.String() {
				return m
			}
		}
		return v
	}
	v = walk(v)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	out := savable(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	if out == nil || l.holdsSecret(out) {
		return nil
	}
	return out
}

// holdsSecret reports whether doc, a JSON document, holds a secret in
// its text as written, or in any of its strings, numbers and member
// names as they decode (a JSON escape may spell a secret that the text
// does not show), every member counted, a repeated name's earlier ones
// too. A doc that is not JSON holds one, for all this can tell.
func (l secretList) holdsSecret(doc []byte) bool {
	if l.mask(string(doc)) != string(doc) {
		return true
	}
	// Without an escape, every string and number is spelled in doc as it
	// decodes: the text has told.
	if bytes.IndexByte(doc, '\\') < 0 {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true
		}
		var s string
		switch x := tok.(type) {
		case string:
			s = x
		case json.Number:
			s = x.String()
		default:
			continue
		}
		if l.mask(s) != s {
			return true
		}
	}
}

// maskError returns err with the secrets masked in its text: err itself
// when none occurs, otherwise a *maskedError that matches ErrExists and
// ErrNoLookup as err did and, when marked (a call's error), carries the
// outcome opledger.OutcomeOf reads from err, Retry-After included; not
// marked (a lookup's error), it carries only the wait of a retryable one
// (a throttled lookup's Retry-After, which the reconciler honours). It
// wraps nothing: what err wraps (a *StatusError's status line, a
// transport's error) may hold the secret.
func (l secretList) maskError(err error, marked bool) error {
	if err == nil || len(l) == 0 {
		return err
	}
	o, after := opledger.OutcomeOf(err)
	waits := o == opledger.OutcomeRetryable && after > 0
	text := err.Error()
	if marked || waits {
		text = opledger.ErrorText(err) // without the mark, which is set again
	}
	masked := l.mask(text)
	if masked == text {
		return err
	}
	me := &maskedError{text: masked}
	for _, target := range []error{ErrExists, ErrNoLookup} {
		if errors.Is(err, target) {
			me.is = append(me.is, target)
		}
	}
	if !marked {
		if waits {
			return opledger.Retryable(me, after)
		}
		return me
	}
	switch o {
	case opledger.OutcomeRejected:
		return opledger.Rejected(me)
	case opledger.OutcomeRetryable:
		return opledger.Retryable(me, after)
	default:
		return opledger.Uncertain(me)
	}
}

// maskedError is an error whose text had a secret masked (maskError).
type maskedError struct {
	text string
	is   []error // the sentinels the original error matched
}

func (e *maskedError) Error() string { return e.text }

// Is matches the sentinels the original error matched.
func (e *maskedError) Is(target error) bool { return slices.Contains(e.is, target) }

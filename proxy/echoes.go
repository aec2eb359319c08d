package proxy

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/redact"
)

// maskedHeader is an upstream answer's header whose values repeat a
// secret part of the request (see echoSecrets): a Location under a base
// path holding a token (https://api.example/bot<token>/items/7), a header
// echoing the caller's Authorization. Values are its values as received,
// in order, replayed byte for byte and shown masked whole (the
// sensitive field header_masked.values); Shown is what the API, the
// console and the CLI show of them instead, each repeated part replaced
// by opledger.Mask.
type maskedHeader struct {
	Name   string   `json:"name"`
	Shown  []string `json:"shown"`
	Values []string `json:"values"`
}

// minEchoLength is the shortest secret masked inside a header value
// (redact.MinSecretLength).
const minEchoLength = redact.MinSecretLength

// echoSecrets are the parts of a request that an upstream may repeat in
// its answer's headers and that are never shown: the upstream's base path
// and user information (they may hold a token), the request's path and
// query (sensitive fields), and its credential headers (Authorization,
// Proxy-Authorization, Cookie and the route's credential header, none of
// them stored). Each is taken whole, as received and decoded, and in its
// parts: path segments, query values, a credential's token after its
// scheme, a cookie's value. Those shorter than minEchoLength are left
// out. Longest first, so that a secret that holds another is masked
// whole.
func echoSecrets(rt *route, r *http.Request) []string {
	var secrets []string
	add := func(vs ...string) {
		for _, v := range vs {
			if len(v) >= minEchoLength && !slices.Contains(secrets, v) {
				secrets = append(secrets, v)
			}
		}
	}
	addPath := func(escaped string) {
		add(escaped)
		add(unescaped(escaped, url.PathUnescape))
		for _, seg := range strings.Split(escaped, "/") {
			add(seg, unescaped(seg, url.PathUnescape))
		}
	}
	addPath(strings.TrimSuffix(rt.base.EscapedPath(), "/"))
	if u := rt.base.User; u != nil {
		pass, _ := u.Password()
		add(u.Username(), pass, base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pass)))
	}
	addPath(fingerprintPath(r.URL))
	addPath(r.URL.EscapedPath())
	add(r.URL.RawQuery, unescaped(r.URL.RawQuery, url.QueryUnescape))
	for _, part := range strings.FieldsFunc(r.URL.RawQuery, func(c rune) bool { return c == '&' || c == ';' }) {
		value := part
		if _, v, ok := strings.Cut(part, "="); ok {
			value = v
		}
		add(value, unescaped(value, url.QueryUnescape))
	}
	for _, name := range []string{"Authorization", "Proxy-Authorization", "Cookie", rt.credHdr} {
		for _, v := range r.Header.Values(name) {
			add(v, strings.TrimSpace(v))
			if _, token, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
				add(strings.TrimSpace(token))
			}
			if name == "Cookie" {
				for _, c := range strings.Split(v, ";") {
					_, value, _ := strings.Cut(c, "=")
					add(strings.TrimSpace(value))
				}
			}
		}
	}
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	return secrets
}

// unescaped is s decoded by unescape, or s when it does not decode.
func unescaped(s string, unescape func(string) (string, error)) string {
	if u, err := unescape(s); err == nil {
		return u
	}
	return s
}

// maskEchoes moves each header of s that repeats one of secrets (longest
// first, see echoSecrets) from s.Header to s.HeaderMasked, with what is
// shown of it. Set-Cookie stays: it is masked whole. Letters are compared
// in any case, so that an upstream that spells a host, a path or a
// percent-escape in another case does not slip by.
func (s *saved) maskEchoes(secrets []string) {
	if len(secrets) == 0 {
		return
	}
	names := make([]string, 0, len(s.Header))
	for name := range s.Header {
		names = append(names, name)
	}
	slices.Sort(names) // the same answer is saved the same way
	// Each value is masked as redact.Secrets masks it, letters compared in
	// any case and masks side by side shown as one, with the secrets
	// folded once, not for each value.
	folds := redact.Folds(secrets)
	for _, name := range names {
		if http.CanonicalHeaderKey(name) == "Set-Cookie" {
			continue
		}
		values := s.Header[name]
		var shown []string // made at the first value that echoes
		for i, v := range values {
			if m := redact.SecretsFolded(v, folds, opledger.Mask); m != v && shown == nil {
				shown = make([]string, len(values))
				copy(shown, values[:i])
				shown[i] = m
			} else if shown != nil {
				shown[i] = m
			}
		}
		if shown == nil {
			continue
		}
		s.HeaderMasked = append(s.HeaderMasked, maskedHeader{Name: name, Shown: shown, Values: values})
		delete(s.Header, name)
	}
}

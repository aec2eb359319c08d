// Package webhook authenticates inbound webhooks before the ledger sees
// them (DESIGN.md section 5): HMAC-SHA256 signatures compared in constant
// time, with secrets read from environment variables. Authentication is
// checked before deduplication and independently of it: a known event id
// proves nothing about who sent it. A request that fails verification must
// be answered 401 and recorded nowhere.
//
// Two schemes are supported:
//
//   - SchemeStripe: header "Stripe-Signature: t=<unix seconds>,v1=<hex>",
//     where v1 is HMAC-SHA256(secret, "<t>.<raw body>"). Several v1 entries
//     may be present (the sender signs with every active secret); the
//     timestamp must be within the tolerance of now (default 5 minutes),
//     which stops replays of old captured requests.
//   - SchemeShopify: header "X-Shopify-Hmac-Sha256: <base64>", the base64
//     HMAC-SHA256(secret, raw body). It carries no timestamp.
//
// Secrets come from the environment variable a Config names. The variable
// may hold several secrets separated by commas, so that a secret can be
// rotated without downtime: a signature made with any of them verifies.
//
// Allowed imports: the standard library only.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Scheme names a signature scheme.
type Scheme string

// The supported schemes.
const (
	// SchemeStripe: timestamped signature "t=<unix>,v1=<hex>" over "t.body".
	SchemeStripe Scheme = "stripe"
	// SchemeShopify: base64 HMAC of the raw body.
	SchemeShopify Scheme = "shopify"
)

// Default header names and tolerance.
const (
	StripeHeader     = "Stripe-Signature"
	ShopifyHeader    = "X-Shopify-Hmac-Sha256"
	DefaultTolerance = 5 * time.Minute
)

// Config describes how one source signs its webhooks. It is meant to be
// read from the server's YAML or JSON configuration.
type Config struct {
	// Scheme is "stripe" or "shopify".
	Scheme Scheme `yaml:"scheme" json:"scheme"`
	// SecretEnv names the environment variable holding the secret (or
	// several, comma-separated). The secret itself never appears in
	// configuration files.
	SecretEnv string `yaml:"secret_env" json:"secret_env"`
	// Header overrides the scheme's header name.
	Header string `yaml:"header,omitempty" json:"header,omitempty"`
	// Tolerance is how far a Stripe-style timestamp may be from now, in
	// either direction. Default 5 minutes.
	Tolerance time.Duration `yaml:"tolerance,omitempty" json:"tolerance,omitempty"`
}

// Sentinel errors; every verification failure is an *Error matching
// ErrUnauthorized and one of the others.
var (
	// ErrUnauthorized matches every verification failure: answer 401.
	ErrUnauthorized = errors.New("webhook signature not verified")
	// ErrMissingSignature: the signature header is absent or empty.
	ErrMissingSignature = errors.New("signature header missing")
	// ErrMalformedSignature: the header cannot be parsed.
	ErrMalformedSignature = errors.New("signature header malformed")
	// ErrBadSignature: no signature matches the body with any secret.
	ErrBadSignature = errors.New("signature does not match")
	// ErrStaleSignature: the signed timestamp is outside the tolerance.
	ErrStaleSignature = errors.New("signature timestamp outside tolerance")
)

// Error is a verification failure. It never carries the secret, the
// signature or the body.
type Error struct {
	// Reason is one of ErrMissingSignature, ErrMalformedSignature,
	// ErrBadSignature, ErrStaleSignature.
	Reason error
	// Header is the header that was checked.
	Header string
	// Detail adds a safe explanation (for example the timestamp's age).
	Detail string
}

// Error names the header and the reason, never the signature or secret.
func (e *Error) Error() string {
	msg := "verify webhook: " + e.Header + ": " + e.Reason.Error()
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

// Is matches ErrUnauthorized and the error's Reason.
func (e *Error) Is(target error) bool { return target == ErrUnauthorized || target == e.Reason }

// Verifier checks the signatures of one source. It is safe for concurrent
// use.
type Verifier struct {
	scheme    Scheme
	header    string
	tolerance time.Duration
	secrets   [][]byte
	now       func() time.Time
}

// envName is the usual name of an environment variable, which an error
// may repeat: a signing secret (whsec_…, hex) has lower-case letters.
var envName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// New builds a Verifier from cfg, reading the secret from the environment.
// A missing or empty variable is an error: a source configured for
// signatures must never silently accept unsigned requests.
func New(cfg Config) (*Verifier, error) {
	if cfg.SecretEnv == "" {
		return nil, errors.New("webhook config: secret_env is required")
	}
	raw := os.Getenv(cfg.SecretEnv)
	if strings.TrimSpace(raw) == "" {
		if !envName.MatchString(cfg.SecretEnv) {
			// Not a variable's usual name: perhaps the secret itself,
			// pasted in its place, which an error must not print.
			return nil, errors.New("webhook config: the environment variable secret_env names is unset or empty " +
				"(its name is not repeated: it is not in capitals, digits and _, and may be the secret itself; secret_env takes the variable's name)")
		}
		return nil, fmt.Errorf("webhook config: environment variable %s is unset or empty", cfg.SecretEnv)
	}
	var secrets [][]byte
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			secrets = append(secrets, []byte(s))
		}
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("webhook config: environment variable %s holds no secret, only commas and spaces", cfg.SecretEnv)
	}
	return NewWithSecrets(cfg, secrets...)
}

// NewWithSecrets builds a Verifier with secrets given directly (tests, or
// secrets fetched from a vault); cfg.SecretEnv is ignored.
func NewWithSecrets(cfg Config, secrets ...[]byte) (*Verifier, error) {
	v := &Verifier{scheme: cfg.Scheme, header: cfg.Header, tolerance: cfg.Tolerance, now: time.Now}
	switch cfg.Scheme {
	case SchemeStripe:
		if v.header == "" {
			v.header = StripeHeader
		}
		if v.tolerance == 0 {
			v.tolerance = DefaultTolerance
		}
		if v.tolerance < 0 {
			return nil, errors.New("webhook config: tolerance must not be negative")
		}
	case SchemeShopify:
		if v.header == "" {
			v.header = ShopifyHeader
		}
	default:
		return nil, fmt.Errorf("webhook config: scheme must be %q or %q", SchemeStripe, SchemeShopify)
	}
	for _, s := range secrets {
		if len(s) == 0 {
			return nil, errors.New("webhook config: empty secret")
		}
		v.secrets = append(v.secrets, append([]byte(nil), s...))
	}
	if len(v.secrets) == 0 {
		return nil, errors.New("webhook config: no secret")
	}
	return v, nil
}

// WithClock returns a copy of v that reads the time from now (tests).
func (v *Verifier) WithClock(now func() time.Time) *Verifier {
	c := *v
	c.now = now
	return &c
}

// Header is the header v reads.
func (v *Verifier) Header() string { return v.header }

// Verify checks the signature in h against the raw request body. Pass the
// body exactly as received, before any JSON decoding. It returns nil or an
// *Error matching ErrUnauthorized.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	value := strings.TrimSpace(h.Get(v.header))
	if value == "" {
		return &Error{Reason: ErrMissingSignature, Header: v.header}
	}
	switch v.scheme {
	case SchemeStripe:
		return v.verifyStripe(value, body)
	default:
		return v.verifyShopify(value, body)
	}
}

func (v *Verifier) verifyStripe(value string, body []byte) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(value, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = val
		case "v1":
			if b, err := hex.DecodeString(val); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	if ts == "" || len(sigs) == 0 {
		return &Error{Reason: ErrMalformedSignature, Header: v.header, Detail: "needs t=<unix seconds> and at least one v1=<hex sha256>"}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return &Error{Reason: ErrMalformedSignature, Header: v.header, Detail: "t is not a unix timestamp"}
	}
	// Check the signature before the time: a stale request with a valid
	// signature is a replay, one with a bad signature is a forgery.
	if !v.anyMatch(sigs, func(secret []byte) []byte { return stripeMAC(secret, ts, body) }) {
		return &Error{Reason: ErrBadSignature, Header: v.header}
	}
	at, now := time.Unix(unix, 0), v.now()
	age := now.Sub(at)
	if age > v.tolerance || age < -v.tolerance {
		when := fmt.Sprintf("%s ago", age.Round(time.Second))
		if age < 0 {
			when = fmt.Sprintf("%s in the future", (-age).Round(time.Second))
		}
		detail := "signed " + when + ", tolerance " + v.tolerance.String()
		// Past what a Duration holds (Sub saturates) the age would read
		// -2562047h47m16s: centuries away, most likely a timestamp in
		// milliseconds.
		if at.After(now.Add(maxAge)) || at.Before(now.Add(-maxAge)) {
			when = "ago"
			if age < 0 {
				when = "in the future"
			}
			detail = fmt.Sprintf("signed more than 292 years %s, tolerance %s: t=%d must be in seconds since 1970", when, v.tolerance, unix)
		}
		return &Error{Reason: ErrStaleSignature, Header: v.header, Detail: detail}
	}
	return nil
}

// maxAge is the longest age a signed timestamp's detail states: a
// Duration holds about 292 years.
const maxAge = 292 * 365 * 24 * time.Hour

func (v *Verifier) verifyShopify(value string, body []byte) error {
	sig, err := base64.StdEncoding.DecodeString(value)
	if err != nil || len(sig) != sha256.Size {
		return &Error{Reason: ErrMalformedSignature, Header: v.header, Detail: "needs the base64 HMAC-SHA256 of the body"}
	}
	if !v.anyMatch([][]byte{sig}, func(secret []byte) []byte { return bodyMAC(secret, body) }) {
		return &Error{Reason: ErrBadSignature, Header: v.header}
	}
	return nil
}

// anyMatch reports whether any given signature equals the MAC under any
// secret. Every comparison runs, in constant time, so timing reveals
// neither which secret nor which signature matched.
func (v *Verifier) anyMatch(sigs [][]byte, mac func(secret []byte) []byte) bool {
	ok := false
	for _, secret := range v.secrets {
		want := mac(secret)
		for _, s := range sigs {
			if hmac.Equal(want, s) {
				ok = true
			}
		}
	}
	return ok
}

func stripeMAC(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

func bodyMAC(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// SignStripe returns a Stripe-Signature header value for body signed at t
// with secret: for tests, the lab, and senders built with opledger.
func SignStripe(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(stripeMAC(secret, ts, body))
}

// SignShopify returns an X-Shopify-Hmac-Sha256 header value for body.
func SignShopify(secret, body []byte) string {
	return base64.StdEncoding.EncodeToString(bodyMAC(secret, body))
}

// Set holds the verifiers of several sources.
type Set struct {
	bySource map[string]*Verifier
}

// NewSet builds a verifier for every configured source, reading each
// secret from the environment.
func NewSet(sources map[string]Config) (*Set, error) {
	s := &Set{bySource: map[string]*Verifier{}}
	for name, cfg := range sources {
		v, err := New(cfg)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", name, err)
		}
		s.bySource[name] = v
	}
	return s, nil
}

// Verifier returns the verifier of a source; ok is false when the source
// is not configured for signatures.
func (s *Set) Verifier(source string) (v *Verifier, ok bool) {
	if s == nil {
		return nil, false
	}
	v, ok = s.bySource[source]
	return v, ok
}

// Verify checks a request of source. A source without a configuration
// returns ErrUnknownSource: the caller decides whether unsigned sources are
// accepted (for example over an authenticated API call) or refused.
func (s *Set) Verify(source string, h http.Header, body []byte) error {
	v, ok := s.Verifier(source)
	if !ok {
		return fmt.Errorf("verify webhook from %s: %w", source, ErrUnknownSource)
	}
	return v.Verify(h, body)
}

// ErrUnknownSource: no signature configuration exists for the source.
var ErrUnknownSource = errors.New("no signature configuration for this source")

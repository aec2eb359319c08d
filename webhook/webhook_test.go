package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/webhook"
)

var (
	secret = []byte("whsec_test_5b7c1e")
	body   = []byte(`{"id":"evt_1","type":"checkout.session.completed","data":{"object":{"id":"cs_1"}}}`)
	now    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func stripeVerifier(t *testing.T, secrets ...[]byte) *webhook.Verifier {
	t.Helper()
	if len(secrets) == 0 {
		secrets = [][]byte{secret}
	}
	v, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeStripe}, secrets...)
	require.NoError(t, err)
	return v.WithClock(func() time.Time { return now })
}

func header(name, value string) http.Header {
	h := http.Header{}
	if value != "" {
		h.Set(name, value)
	}
	return h
}

func TestStripe(t *testing.T) {
	t.Parallel()
	v := stripeVerifier(t)
	valid := webhook.SignStripe(secret, now.Add(-time.Minute), body)
	other := webhook.SignStripe([]byte("whsec_other"), now.Add(-time.Minute), body)
	tamperedBody := append([]byte(nil), body...)
	tamperedBody[len(tamperedBody)-3] = 'X'

	cases := []struct {
		name   string
		h      http.Header
		body   []byte
		reason error
		detail string // in the error, when set
	}{
		{"Valid", header(webhook.StripeHeader, valid), body, nil, ""},
		{"WrongSecret", header(webhook.StripeHeader, other), body, webhook.ErrBadSignature, ""},
		{"StaleTimestamp", header(webhook.StripeHeader, webhook.SignStripe(secret, now.Add(-6*time.Minute), body)), body, webhook.ErrStaleSignature, "signed 6m0s ago, tolerance 5m0s"},
		{"FutureTimestamp", header(webhook.StripeHeader, webhook.SignStripe(secret, now.Add(6*time.Minute), body)), body, webhook.ErrStaleSignature, "signed 6m0s in the future"},
		{"BodyAlteredAfterSigning", header(webhook.StripeHeader, valid), tamperedBody, webhook.ErrBadSignature, ""},
		{"MissingHeader", header(webhook.StripeHeader, ""), body, webhook.ErrMissingSignature, ""},
		{"Malformed", header(webhook.StripeHeader, "v1=abc"), body, webhook.ErrMalformedSignature, ""},
		{"BadTimestamp", header(webhook.StripeHeader, strings.Replace(valid, "t=", "t=x", 1)), body, webhook.ErrMalformedSignature, ""},
		{"TimestampChanged", header(webhook.StripeHeader, strings.Replace(valid, "t=1", "t=2", 1)), body, webhook.ErrBadSignature, ""},
		// The sender signs with every active secret during a rotation.
		{"SeveralV1", header(webhook.StripeHeader, other+",v1="+strings.SplitN(valid, "v1=", 2)[1]), body, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := v.Verify(tc.h, tc.body)
			if tc.reason == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, webhook.ErrUnauthorized)
			require.ErrorIs(t, err, tc.reason)
			var we *webhook.Error
			require.True(t, errors.As(err, &we))
			require.NotContains(t, err.Error(), string(secret))
			require.NotContains(t, err.Error(), "evt_1", "the body is never echoed")
			require.Contains(t, err.Error(), tc.detail)
		})
	}
}

func TestStripeRotatedSecrets(t *testing.T) {
	t.Parallel()
	v := stripeVerifier(t, []byte("whsec_old"), secret)
	require.NoError(t, v.Verify(header(webhook.StripeHeader, webhook.SignStripe(secret, now, body)), body))
	require.NoError(t, v.Verify(header(webhook.StripeHeader, webhook.SignStripe([]byte("whsec_old"), now, body)), body))
}

func TestShopify(t *testing.T) {
	t.Parallel()
	v, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeShopify}, secret)
	require.NoError(t, err)
	valid := webhook.SignShopify(secret, body)
	cases := []struct {
		name   string
		h      http.Header
		body   []byte
		reason error
	}{
		{"Valid", header(webhook.ShopifyHeader, valid), body, nil},
		{"WrongSecret", header(webhook.ShopifyHeader, webhook.SignShopify([]byte("other"), body)), body, webhook.ErrBadSignature},
		{"BodyAlteredAfterSigning", header(webhook.ShopifyHeader, valid), append([]byte(" "), body...), webhook.ErrBadSignature},
		{"MissingHeader", http.Header{}, body, webhook.ErrMissingSignature},
		{"NotBase64", header(webhook.ShopifyHeader, "%%%"), body, webhook.ErrMalformedSignature},
		{"HexInsteadOfBase64", header(webhook.ShopifyHeader, strings.Repeat("ab", 32)), body, webhook.ErrMalformedSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := v.Verify(tc.h, tc.body)
			if tc.reason == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, webhook.ErrUnauthorized)
			require.ErrorIs(t, err, tc.reason)
		})
	}
}

func TestSecretFromEnvironment(t *testing.T) {
	t.Setenv("OPLEDGER_TEST_WEBHOOK_SECRET", " whsec_old , "+string(secret))
	v, err := webhook.New(webhook.Config{Scheme: webhook.SchemeShopify, SecretEnv: "OPLEDGER_TEST_WEBHOOK_SECRET"})
	require.NoError(t, err)
	require.NoError(t, v.Verify(header(webhook.ShopifyHeader, webhook.SignShopify(secret, body)), body))
	require.NoError(t, v.Verify(header(webhook.ShopifyHeader, webhook.SignShopify([]byte("whsec_old"), body)), body))

	_, err = webhook.New(webhook.Config{Scheme: webhook.SchemeShopify, SecretEnv: "OPLEDGER_TEST_WEBHOOK_UNSET"})
	require.ErrorContains(t, err, "OPLEDGER_TEST_WEBHOOK_UNSET is unset or empty")
	_, err = webhook.New(webhook.Config{Scheme: webhook.SchemeShopify})
	require.ErrorContains(t, err, "secret_env is required")
	_, err = webhook.New(webhook.Config{Scheme: "github", SecretEnv: "OPLEDGER_TEST_WEBHOOK_SECRET"})
	require.ErrorContains(t, err, "scheme must be")
}

func TestSet(t *testing.T) {
	t.Setenv("OPLEDGER_TEST_STRIPE_SECRET", string(secret))
	set, err := webhook.NewSet(map[string]webhook.Config{
		"stripe": {Scheme: webhook.SchemeStripe, SecretEnv: "OPLEDGER_TEST_STRIPE_SECRET"},
	})
	require.NoError(t, err)
	h := header(webhook.StripeHeader, webhook.SignStripe(secret, time.Now(), body))
	require.NoError(t, set.Verify("stripe", h, body))
	require.ErrorIs(t, set.Verify("shopify", h, body), webhook.ErrUnknownSource)
	require.ErrorIs(t, set.Verify("stripe", http.Header{}, body), webhook.ErrUnauthorized)

	_, err = webhook.NewSet(map[string]webhook.Config{"forms": {Scheme: webhook.SchemeStripe, SecretEnv: "OPLEDGER_TEST_NOPE"}})
	require.ErrorContains(t, err, "source forms")
}

package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger/webhook"
)

// FuzzVerify checks arbitrary signature headers and bodies: Verify never
// panics, fails only with ErrUnauthorized and an error that repeats
// neither the header nor the secret, and accepts only a header holding
// the body's HMAC under the secret (for Stripe, over a timestamp of that
// header within the tolerance). What SignStripe and SignShopify sign
// verifies, and not for another body.
func FuzzVerify(f *testing.F) {
	f.Add(webhook.SignStripe(secret, now, body), body, true)
	f.Add(webhook.SignStripe(secret, now.Add(-time.Hour), body), body, true)
	f.Add("t=1,v1=zz,t=,v1="+strings.Repeat("0", 64), []byte("x"), true)
	f.Add(" t = 1 , v1=", []byte{}, true)
	f.Add("t=-9223372036854775808,v1="+strings.Repeat("a", 64), body, true)
	f.Add(webhook.SignShopify(secret, body), body, false)
	f.Add("====", []byte("x"), false)
	f.Add(base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32)), body, false)
	stripe, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeStripe}, secret)
	if err != nil {
		f.Fatal(err)
	}
	stripe = stripe.WithClock(func() time.Time { return now })
	shopify, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeShopify}, secret)
	if err != nil {
		f.Fatal(err)
	}
	mac := func(parts ...[]byte) []byte {
		m := hmac.New(sha256.New, secret)
		for _, p := range parts {
			m.Write(p)
		}
		return m.Sum(nil)
	}
	f.Fuzz(func(t *testing.T, value string, payload []byte, isStripe bool) {
		v, name := shopify, webhook.ShopifyHeader
		if isStripe {
			v, name = stripe, webhook.StripeHeader
		}
		err := v.Verify(header(name, value), payload)
		if err != nil {
			if !errors.Is(err, webhook.ErrUnauthorized) {
				t.Fatalf("%v does not match ErrUnauthorized", err)
			}
			v := strings.TrimSpace(value)
			if len(v) >= 8 && strings.Contains(err.Error(), v) || strings.Contains(err.Error(), string(secret)) {
				t.Fatalf("the error %q repeats the header or the secret", err)
			}
		} else {
			genuine := false
			if isStripe {
				for _, tp := range strings.Split(value, ",") {
					k, ts, _ := strings.Cut(strings.TrimSpace(tp), "=")
					unix, perr := strconv.ParseInt(ts, 10, 64)
					if k != "t" || perr != nil || now.Sub(time.Unix(unix, 0)).Abs() > webhook.DefaultTolerance {
						continue
					}
					want := mac([]byte(ts), []byte{'.'}, payload)
					for _, sp := range strings.Split(value, ",") {
						k, sig, _ := strings.Cut(strings.TrimSpace(sp), "=")
						got, herr := hex.DecodeString(sig)
						genuine = genuine || k == "v1" && herr == nil && hmac.Equal(got, want)
					}
				}
			} else {
				got, berr := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
				genuine = berr == nil && hmac.Equal(got, mac(payload))
			}
			if !genuine {
				t.Fatalf("accepted %q for a body it does not sign: %q", value, payload)
			}
		}

		// A signature made for the payload verifies, and not another body.
		sig := webhook.SignShopify(secret, payload)
		if isStripe {
			sig = webhook.SignStripe(secret, now, payload)
		}
		if err := v.Verify(header(name, sig), payload); err != nil {
			t.Fatalf("a genuine signature was refused: %v", err)
		}
		if err := v.Verify(header(name, sig), append(bytes.Clone(payload), 'x')); !errors.Is(err, webhook.ErrBadSignature) {
			t.Fatalf("a signature verified another body: %v", err)
		}
	})
}

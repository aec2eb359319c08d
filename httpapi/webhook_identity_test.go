package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/webhook"
)

// TestWebhookWithoutIdentityNamesWhatIsMissing: a signed webhook without
// its event id or type is refused 400 naming what is missing and where
// the provider puts it (a header of Shopify's, a field of Stripe's
// body). It said "the webhook carries no event id or type" whichever was
// missing, naming no header, so a sender could not tell what to fix.
func TestWebhookWithoutIdentityNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	stripe, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeStripe}, testWebhookSecret)
	require.NoError(t, err)
	shopify, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeShopify}, testWebhookSecret)
	require.NoError(t, err)
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, httpapi.Options{Webhooks: map[string]httpapi.WebhookSource{
		"stripe":  {Tenant: "acme", Verify: stripe, Scheme: webhook.SchemeStripe},
		"shopify": {Tenant: "acme", Verify: shopify, Scheme: webhook.SchemeShopify}}})
	for _, tc := range []struct {
		name, source string
		body         string
		hdr          http.Header
		want         string
	}{
		{"ShopifyNoTopic", "shopify", `{"id":1}`, http.Header{"X-Shopify-Event-Id": {"e1"}},
			"the webhook carries no event type: its X-Shopify-Topic header is missing or empty"},
		{"ShopifyNoEventID", "shopify", `{"id":1}`, http.Header{"X-Shopify-Topic": {"orders/create"}},
			"the webhook carries no event id: its X-Shopify-Event-Id and X-Shopify-Webhook-Id headers are missing or empty"},
		{"ShopifyNeither", "shopify", `{"id":1}`, http.Header{},
			"the webhook carries no event id: its X-Shopify-Event-Id and X-Shopify-Webhook-Id headers are missing or empty; no event type: its X-Shopify-Topic header is missing or empty"},
		{"StripeNoType", "stripe", `{"id":"evt_1"}`, http.Header{},
			`the webhook carries no event type: its body has no "type" (or an empty one)`},
		{"StripeNoID", "stripe", `{"type":"invoice.paid"}`, http.Header{},
			`the webhook carries no event id: its body has no "id" (or an empty one)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			hdr := tc.hdr.Clone()
			if tc.source == "stripe" {
				hdr.Set(webhook.StripeHeader, webhook.SignStripe(testWebhookSecret, time.Now(), body))
			} else {
				hdr.Set(webhook.ShopifyHeader, webhook.SignShopify(testWebhookSecret, body))
			}
			status, data := b.rawWith(t, "POST", "/v1/webhooks/"+tc.source, "", body, hdr)
			require.Equal(t, http.StatusBadRequest, status, string(data))
			require.Equal(t, "invalid_input", problemKind(t, data))
			require.Equal(t, tc.want, problemDetail(t, data))
		})
	}
}

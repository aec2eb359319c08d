package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/webhook"
)

// fuzzRules map the fuzzed events: an object ordered by a payload value,
// corrections as updates, a sensitive field.
const fuzzRules = `
rules:
  - name: order
    type: order.created
    object: {kind: order, id: "{data.id}", order_by: data.version}
    operations:
      - key: "order:{data.id}:create"
        action: crm.create
        destination: crm
        payload: {id: "{data.id}", customer: "{data.customer}", note: "v{data.version} {data.note}"}
        sensitive_fields: [customer]
        update_key: "order:{data.id}:update:{data.version}"
  - name: whole
    type: checkout.session.completed
    operations:
      - key: "checkout:{data.object.id}"
        action: a
        destination: d
        payload: "{data}"
`

// FuzzEventIntake posts arbitrary events to POST /v1/events and arbitrary
// bodies, signed, to a Stripe webhook source, each twice, with mapping
// rules: never a 5xx, a 4xx is a problem document, a repeat of a taken
// event is a duplicate, a webhook's answer carries nothing but its
// status, and a body whose signature does not match is refused and
// recorded nowhere.
func FuzzEventIntake(f *testing.F) {
	for _, s := range []string{
		`{"source":"shop","event_id":"e1","type":"order.created","payload":{"id":"o1","version":2,"customer":"ana@example.invalid","note":"x"}}`,
		`{"source":"shop","event_id":"e2","type":"order.created","payload":{"id":"o1","version":1,"customer":"ana@example.invalid","note":"x"}}`,
		`{"source":"shop","event_id":"e3","type":"order.created","payload":{"id":"o1","version":"1e999999","customer":"b","note":"y"}}`,
		`{"source":"shop","event_id":"e4","type":"order.created","payload":{"id":"o 1","version":3}}`,
		`{"source":"shop","event_id":"e5","type":"order.created","occurred_at":"0001-01-01T00:00:00Z","payload":null}`,
		`{"id":"evt_1","type":"checkout.session.completed","created":1700000000,"data":{"object":{"id":"cs_1"}}}`,
		`{"id":"evt_2","type":"checkout.session.completed","created":"x","data":{"object":{"id":{"a":1}}}}`,
		`{"id":"evt 3","type":""}`,
		`[1,2`,
	} {
		f.Add(s, "")
	}
	f.Add(`{"id":"evt_4","type":"t"}`, "abc-1")
	secret := []byte("whsec_fuzz")
	verifier, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeStripe}, secret)
	if err != nil {
		f.Fatal(err)
	}
	rules, err := opledger.ParseRules([]byte(fuzzRules))
	if err != nil {
		f.Fatal(err)
	}
	l, err := opledger.Open(context.Background(), "sqlite:"+filepath.Join(f.TempDir(), "fuzz.db"), opledger.Options{SQLiteSynchronousNormal: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	h, err := httpapi.New(l, httpapi.Options{Auth: staticAuth{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Rules: rules,
		Webhooks: map[string]httpapi.WebhookSource{"stripe": {Tenant: "fuzz", Verify: verifier, Scheme: webhook.SchemeStripe}}})
	if err != nil {
		f.Fatal(err)
	}
	post := func(t *testing.T, path, body string, header http.Header) (int, []byte) {
		t.Helper()
		req := httptest.NewRequest("POST", "http://opledger.test"+path, strings.NewReader(body))
		req.Header = header
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, rec.Code, rec.Body.String())
		}
		if rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("POST %s: %d without problem JSON: %s", path, rec.Code, rec.Body.String())
		}
		return rec.Code, rec.Body.Bytes()
	}
	f.Fuzz(func(t *testing.T, body, requestID string) {
		// The API's route.
		api := http.Header{"Authorization": {"Bearer fuzz"}, "Content-Type": {"application/json"}}
		s1, b1 := post(t, "/v1/events", body, api)
		s2, b2 := post(t, "/v1/events", body, api)
		if s1 < 300 {
			var res opledger.EventResult
			if s2 != http.StatusOK || json.Unmarshal(b2, &res) != nil || !res.Duplicate {
				t.Fatalf("the repeat of an event taken with %d: %d %s", s1, s2, b2)
			}
		}
		_ = b1

		// A provider's webhook: signed, and with a signature of another body.
		signed := http.Header{webhook.StripeHeader: {webhook.SignStripe(secret, time.Now(), []byte(body))}, "X-Request-Id": {requestID}}
		forged := http.Header{webhook.StripeHeader: {webhook.SignStripe(secret, time.Now(), []byte(body+" "))}}
		if s, b := post(t, "/v1/webhooks/stripe", body, forged); s != http.StatusUnauthorized {
			t.Fatalf("a body signed otherwise: %d %s", s, b)
		}
		w1, a1 := post(t, "/v1/webhooks/stripe", body, signed)
		w2, a2 := post(t, "/v1/webhooks/stripe", body, signed)
		for _, a := range []struct {
			status int
			body   []byte
		}{{w1, a1}, {w2, a2}} {
			if a.status >= 300 {
				continue
			}
			var answer map[string]json.RawMessage
			if err := json.Unmarshal(a.body, &answer); err != nil {
				t.Fatal(err)
			}
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range answer {
					if !yield(k) {
						return
					}
				}
			})
			if !slices.Equal(keys, []string{"duplicate", "status"}) {
				t.Fatalf("the webhook's answer says more than its status: %s", a.body)
			}
		}
		if w1 < 300 && (w2 != http.StatusOK || !bytes.Contains(a2, []byte(`"duplicate":true`))) {
			t.Fatalf("the repeat of a webhook taken with %d: %d %s", w1, w2, a2)
		}
	})
}

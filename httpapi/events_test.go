package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/webhook"
)

var testWebhookSecret = []byte("whsec_test_only")

const testRules = `
rules:
  - name: intake-accepted
    source: forms
    type: submission.accepted
    operations:
      - key: "intake:{data.submission_id}:create"
        action: crm.create_inquiry
        destination: crm
        owner: intake-team
        payload:
          submission: "{data.submission_id}"
  - name: stripe-paid
    source: stripe
    type: invoice.paid
    operations:
      - key: "stripe:{data.data.object.id}:receipt"
        action: email.send_receipt
        destination: email
        payload:
          invoice: "{data.data.object.id}"
`

// apiOptions are the event rules and webhook sources of the test server.
func apiOptions(t *testing.T) httpapi.Options {
	t.Helper()
	rules, err := opledger.ParseRules([]byte(testRules))
	require.NoError(t, err)
	v, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeStripe}, testWebhookSecret)
	require.NoError(t, err)
	return httpapi.Options{Rules: rules, Webhooks: map[string]httpapi.WebhookSource{
		"stripe": {Tenant: "acme", Verify: v, Scheme: webhook.SchemeStripe}}}
}

// exerciseEventsAndWorkflows drives the event, webhook and workflow routes
// to each documented status.
func exerciseEventsAndWorkflows(t *testing.T, b *apiBundle) {
	ctx := context.Background()
	tok := b.token
	big := []byte(`{"source":"forms","event_id":"e","type":"t","payload":"` + strings.Repeat("x", 1<<20) + `"}`)
	expect := func(method, path, token string, body []byte, hdr http.Header, want int, kind string) []byte {
		t.Helper()
		status, data := b.rawWith(t, method, path, token, body, hdr)
		require.Equal(t, want, status, "%s %s: %s", method, path, data)
		if kind != "" {
			require.Equal(t, kind, problemKind(t, data))
		}
		return data
	}

	// Events: new, duplicate (the same operations, nothing created), refusals.
	ev := []byte(`{"source":"forms","event_id":"evt-1","delivery_id":"d1","type":"submission.accepted","payload":{"submission_id":"847"}}`)
	var first, again opledger.EventResult
	require.NoError(t, json.Unmarshal(expect("POST", "/v1/events", tok, ev, nil, 201, ""), &first))
	require.Len(t, first.Operations, 1)
	require.Equal(t, "intake:847:create", first.Operations[0].Key)
	ev2 := strings.Replace(string(ev), `"d1"`, `"d2"`, 1)
	require.NoError(t, json.Unmarshal(expect("POST", "/v1/events", tok, []byte(ev2), nil, 200, ""), &again))
	require.True(t, again.Duplicate)
	require.Equal(t, first.Operations[0].Key, again.Operations[0].Key)
	expect("POST", "/v1/events", tok, []byte(`{"source":"forms","event_id":"evt-2","type":"submission.accepted","payload":{}}`), nil, 422, "mapping_failed")
	require.Contains(t, string(expect("POST", "/v1/events", tok, []byte(`{"source":"forms","type":"x"}`), nil, 400, "invalid_input")), "event_id is required")
	require.Contains(t, string(expect("POST", "/v1/events", tok, []byte(`{"event_id":"e9","type":"x"}`), nil, 400, "invalid_input")), "source is required")
	expect("POST", "/v1/events", tok, big, nil, 413, "payload_too_large")
	// A time no store keeps and JSON cannot encode is refused (it was
	// stored, and every page holding it answered with an empty body).
	expect("POST", "/v1/events", tok, []byte(`{"source":"forms","event_id":"evt-9","type":"x","occurred_at":"9999-12-31T23:59:59-01:00","payload":{}}`), nil, 400, "invalid_input")
	expect("GET", "/v1/events?source=%00", tok, nil, nil, 400, "invalid_input")
	expect("GET", "/v1/events?source=%ff", tok, nil, nil, 400, "invalid_input")
	expect("GET", "/v1/operations?owner=%00", tok, nil, nil, 400, "invalid_input")
	expect("GET", "/v1/operations?destination=%ff", tok, nil, nil, 400, "invalid_input")
	expect("GET", "/v1/events?source=forms", tok, nil, nil, 200, "")
	expect("GET", "/v1/events?limit=x", tok, nil, nil, 400, "invalid_input")
	detail := expect("GET", "/v1/events/forms/evt-1", tok, nil, nil, 200, "")
	require.Contains(t, string(detail), `"d2"`, "both deliveries recorded")
	var deliveries struct {
		Deliveries []map[string]any `json:"deliveries"`
	}
	require.NoError(t, json.Unmarshal(detail, &deliveries))
	require.Len(t, deliveries.Deliveries, 2)
	for _, d := range deliveries.Deliveries {
		require.NotContains(t, d, "id", "the store's number of a delivery counts every tenant's: not shown")
	}
	expect("GET", "/v1/events/forms/nope", tok, nil, nil, 404, "not_found")
	expect("GET", "/v1/events/a@b/evt-1", tok, nil, nil, 400, "")

	// Webhooks: the signature comes first; a bad one records nothing.
	hook := []byte(`{"id":"evt_stripe_1","type":"invoice.paid","created":1764500000,"data":{"object":{"id":"in_17"}}}`)
	sign := func(body []byte, secret []byte) http.Header {
		return http.Header{webhook.StripeHeader: {webhook.SignStripe(secret, time.Now(), body)}}
	}
	expect("POST", "/v1/webhooks/stripe", "", hook, sign(hook, []byte("wrong")), 401, "invalid_signature")
	expect("POST", "/v1/webhooks/stripe", "", hook, nil, 401, "invalid_signature")
	_, err := b.ledger.GetEvent(ctx, "stripe", "evt_stripe_1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "an unauthenticated webhook records nothing")
	var taken struct {
		Duplicate bool   `json:"duplicate"`
		Status    string `json:"status"`
	}
	require.NoError(t, json.Unmarshal(expect("POST", "/v1/webhooks/stripe", "", hook, sign(hook, testWebhookSecret), 201, ""), &taken))
	require.Equal(t, "applied", taken.Status)
	require.False(t, taken.Duplicate)
	// The answer says the event was taken, never what it led to: the route
	// has no token, and a captured delivery can be posted again.
	c, err := b.ledger.Claim(ctx, "stripe:in_17:receipt", opledger.ClaimOptions{Worker: "w", Dispatch: true})
	require.NoError(t, err)
	_, err = b.ledger.Report(ctx, "stripe:in_17:receipt", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "MSG-INTERNAL-9", Response: json.RawMessage(`{"url":"https://mail.corp.internal/9"}`)})
	require.NoError(t, err)
	replayed := expect("POST", "/v1/webhooks/stripe", "", hook, sign(hook, testWebhookSecret), 200, "")
	require.JSONEq(t, `{"duplicate":true,"status":"applied"}`, string(replayed),
		"nor a number of the delivery: the store's count every tenant's, and a captured delivery posted again would read them")
	odd := sign(hook, testWebhookSecret)
	odd.Set("X-Request-Id", "req 1/ä")
	expect("POST", "/v1/webhooks/stripe", "", hook, odd, 200, "") // not refused for a header it does not sign
	// Nor for a query string: the URL a provider is given may carry one
	// (only the token routes' writes refuse them).
	expect("POST", "/v1/webhooks/stripe?source=dashboard", "", hook, sign(hook, testWebhookSecret), 200, "")
	expect("POST", "/v1/webhooks/github", "", hook, nil, 404, "not_found")
	noID := []byte(`{"type":"invoice.paid"}`)
	expect("POST", "/v1/webhooks/stripe", "", noID, sign(noID, testWebhookSecret), 400, "invalid_input")
	unmapped := []byte(`{"id":"evt_stripe_2","type":"invoice.paid","data":{}}`)
	expect("POST", "/v1/webhooks/stripe", "", unmapped, sign(unmapped, testWebhookSecret), 422, "mapping_failed")
	expect("POST", "/v1/webhooks/stripe", "", big, sign(big, testWebhookSecret), 413, "payload_too_large")
	// A signed event whose time is out of range is recorded without it.
	farOff := []byte(`{"id":"evt_stripe_3","type":"invoice.paid","created":253402300800,"data":{"object":{"id":"in_18"}}}`)
	require.True(t, json.Valid(expect("POST", "/v1/webhooks/stripe", "", farOff, sign(farOff, testWebhookSecret), 201, "")))
	require.True(t, json.Valid(expect("GET", "/v1/events", tok, nil, nil, 200, "")), "the list still encodes")
	op, err := b.ledger.Get(ctx, "stripe:in_17:receipt")
	require.NoError(t, err, "the signed webhook became an operation")
	require.Equal(t, opledger.StateSucceeded, op.State)

	// Workflows.
	wf := []byte(`{"owner":"ops","steps":[{"name":"task","action":"crm.create_task","destination":"crm","payload":{"t":1}},
		{"name":"email","action":"email.send","destination":"email","payload":{"task":"{steps.task.ref}"}}]}`)
	var created opledger.Workflow
	require.NoError(t, json.Unmarshal(expect("PUT", "/v1/workflows/wf-17", tok, wf, nil, 201, ""), &created))
	expect("PUT", "/v1/workflows/wf-17", tok, wf, nil, 200, "")
	// A step the workflow has not recorded is its own: not recorded alone.
	expect("PUT", "/v1/operations/wf-17%2Femail", tok, []byte(`{"action":"email.send","destination":"email","payload":{"x":1}}`), nil, 409, "invalid_state")
	expect("PUT", "/v1/workflows/wf-17", tok, []byte(`{"steps":[{"name":"task","action":"crm.create_task","destination":"crm","payload":{"t":2}}]}`), nil, 422, "fingerprint_mismatch")
	expect("PUT", "/v1/workflows/wf-17", tok, []byte(`{"steps":[]}`), nil, 400, "invalid_input")
	expect("PUT", "/v1/workflows/wf-17", tok, big, nil, 413, "payload_too_large")
	expect("GET", "/v1/workflows/wf-17", tok, nil, nil, 200, "")
	expect("GET", "/v1/workflows?prefix=wf-&open=true", tok, nil, nil, 200, "")
	expect("GET", "/v1/workflows?open=maybe", tok, nil, nil, 400, "invalid_input")
	expect("GET", "/v1/workflows", "", nil, nil, 401, "unauthorized")
	expect("GET", "/v1/workflows/nope", tok, nil, nil, 404, "not_found")
	// A step key already used by a standalone operation: refused.
	expect("PUT", "/v1/operations/wf-18%2Ftask", tok, []byte(`{"action":"crm.create_task","destination":"crm","payload":{}}`), nil, 201, "")
	expect("PUT", "/v1/workflows/wf-18", tok, wf, nil, 409, "invalid_state")
	expect("GET", "/v1/workflows/a@b", tok, nil, nil, 400, "invalid_key")
	expect("POST", "/v1/workflows/wf-17/resume", tok, nil, nil, 200, "")
	expect("POST", "/v1/workflows/nope/resume", tok, nil, nil, 404, "not_found")
	expect("POST", "/v1/workflows/a@b/resume", tok, nil, nil, 400, "invalid_key")

	// Step 2's content depends on step 1: it cannot be approved before
	// it is recorded.
	expect("POST", "/v1/workflows/wf-17/steps/email/approve", tok, []byte(`{"version":1,"fingerprint":"sha256:00","approver":"lead"}`), nil, 409, "invalid_state")

	// Step 2 revised while it waits: it will need approval; step 1 is dispatched, fixed.
	expect("POST", "/v1/workflows/wf-17/steps/email/revise", tok, []byte(`{"payload":{"task":"{steps.task.ref}","cc":"lead"},"version":2}`), nil, 200, "")
	expect("POST", "/v1/workflows/wf-17/steps/email/revise", tok, []byte(`{"payload":{},"version":1}`), nil, 400, "invalid_input")
	expect("POST", "/v1/workflows/wf-17/steps/nope/revise", tok, []byte(`{"payload":{},"version":2}`), nil, 404, "not_found")
	expect("POST", "/v1/workflows/wf-17/steps/email/revise", tok, big, nil, 413, "payload_too_large")
	c, err = b.ledger.Claim(ctx, "wf-17/task", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = b.ledger.Dispatch(ctx, "wf-17/task", c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	expect("POST", "/v1/workflows/wf-17/steps/task/revise", tok, []byte(`{"payload":{"t":3},"version":2}`), nil, 409, "")
	expect("POST", "/v1/workflows/wf-17/steps/task/approve", tok, []byte(`{"version":1,"fingerprint":"x","approver":"lead"}`), nil, 409, "")
	expect("POST", "/v1/workflows/wf-17/steps/nope/approve", tok, []byte(`{"version":1,"fingerprint":"x","approver":"lead"}`), nil, 404, "not_found")
	// A name no step can have is bad input, not a step not found.
	expect("POST", "/v1/workflows/wf-17/steps/%20/approve", tok, []byte(`{"version":1,"fingerprint":"x","approver":"lead"}`), nil, 400, "invalid_input")
	expect("POST", "/v1/workflows/wf-17/steps/-x/revise", tok, []byte(`{"payload":{},"version":2}`), nil, 400, "invalid_input")
	expect("POST", "/v1/workflows/wf-17/steps/task/approve", tok, []byte(`{"version":1}`), nil, 400, "invalid_input")
	expect("POST", "/v1/workflows/wf-17/steps/task/approve", tok, big, nil, 413, "payload_too_large")
	_, err = b.ledger.Report(ctx, "wf-17/task", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "T-1"})
	require.NoError(t, err)
	var resumed opledger.Workflow
	require.NoError(t, json.Unmarshal(expect("POST", "/v1/workflows/wf-17/resume", tok, nil, nil, 200, ""), &resumed))
	step, err := b.ledger.Get(ctx, "wf-17/email")
	require.NoError(t, err)
	require.Equal(t, opledger.StateAwaitingApproval, step.State, "the revised step waits for approval")
	require.JSONEq(t, `{"task":"T-1","cc":"lead"}`, string(step.Payload), "earlier refs filled in once")
	expect("POST", "/v1/workflows/wf-17/steps/email/approve", tok,
		[]byte(`{"version":2,"fingerprint":"`+step.Fingerprint+`","approver":"lead"}`), nil, 200, "")
	_, stepReplayed, err := b.acme.ApproveWorkflowStep(ctx, "wf-17", "email", opledger.Approval{Version: 2, Fingerprint: step.Fingerprint, Approver: "lead"})
	require.NoError(t, err)
	require.True(t, stepReplayed, "the same approval again records nothing")
	attempts, err := b.ledger.Attempts(ctx, "wf-17/task")
	require.NoError(t, err)
	require.Len(t, attempts, 1, "step 1 was not repeated")

	// A workflow whose next step cannot be recorded can be given up on;
	// one whose current step is recorded cannot (cancel that step).
	stuckWF := []byte(`{"steps":[{"name":"a","action":"crm.create","destination":"crm","payload":{}},
		{"name":"b","action":"email.send","destination":"email","payload":{"link":"{steps.a.response.url}"}}]}`)
	expect("PUT", "/v1/workflows/wf-19", tok, stuckWF, nil, 201, "")
	c, err = b.ledger.Claim(ctx, "wf-19/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = b.ledger.Report(ctx, "wf-19/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1"})
	require.NoError(t, err)
	expect("POST", "/v1/workflows/wf-19/cancel", tok, []byte(`{"operator":"lead"}`), nil, 400, "reason_required")
	expect("POST", "/v1/workflows/wf-19/cancel", tok, big, nil, 413, "payload_too_large")
	expect("POST", "/v1/workflows/nope/cancel", tok, []byte(`{"reason":"x"}`), nil, 404, "not_found")
	expect("POST", "/v1/workflows/wf-17/cancel", tok, []byte(`{"reason":"x"}`), nil, 409, "invalid_state")
	var cancelled opledger.Workflow
	require.NoError(t, json.Unmarshal(expect("POST", "/v1/workflows/wf-19/cancel", tok, []byte(`{"operator":"lead","reason":"customer left"}`), nil, 200, ""), &cancelled))
	require.Equal(t, opledger.WorkflowCancelled, cancelled.Status)

	// The stats carry the event figures.
	stats := expect("GET", "/v1/stats", tok, nil, nil, 200, "")
	var st struct {
		Events opledger.EventStats `json:"events"`
	}
	require.NoError(t, json.Unmarshal(stats, &st))
	require.Equal(t, 3, st.Events.Events, "forms evt-1, stripe evt_stripe_1 and evt_stripe_3")
	require.Equal(t, 4, st.Events.DuplicateDeliveries, "forms d2, and the stripe webhook three times more")
}

// A webhook source without a tenant the ledger takes, or without a
// verifier, is refused when the handler is built, not answered 400 on
// every delivery.
func TestWebhookSourcesChecked(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	v, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeStripe}, testWebhookSecret)
	require.NoError(t, err)
	for src, want := range map[httpapi.WebhookSource]string{
		{Tenant: "", Verify: v, Scheme: webhook.SchemeStripe}:    "httpapi: webhook source stripe: tenant: invalid input: tenant: key is empty",
		{Tenant: "a b", Verify: v, Scheme: webhook.SchemeStripe}: "httpapi: webhook source stripe: tenant:",
		{Tenant: "acme", Scheme: webhook.SchemeStripe}:           "httpapi: webhook source stripe has no Verify",
	} {
		_, err := httpapi.New(l, httpapi.Options{Auth: l, Webhooks: map[string]httpapi.WebhookSource{"stripe": src}})
		require.ErrorContains(t, err, want)
	}
}

// edgeRules order an object's versions by a payload field.
const edgeRules = `
rules:
  - name: order-updated
    type: orders/updated
    object: {kind: order, id: data.id, order_by: data.version}
    operations:
      - key: "order:{data.id}:sync"
        action: erp.upsert_order
        destination: erp
        payload: {order: "{data.id}", version: "{data.version}", total: "{data.total}"}
`

// TestEventIntakeEdges drives the event routes to the refusals that
// depend on more than the request's shape: event payloads past their own
// limit under a larger body limit, values a store cannot keep, and signed
// webhooks carrying fields the handler leaves out.
func TestEventIntakeEdges(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rules, err := opledger.ParseRules([]byte(edgeRules))
			require.NoError(t, err)
			stripe, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeStripe}, testWebhookSecret)
			require.NoError(t, err)
			shopify, err := webhook.NewWithSecrets(webhook.Config{Scheme: webhook.SchemeShopify}, testWebhookSecret)
			require.NoError(t, err)
			b := startAPIWith(t, st.NewDSN(t), nil, httpapi.Options{MaxBodyBytes: 4 << 20, Rules: rules, Webhooks: map[string]httpapi.WebhookSource{
				"stripe":  {Tenant: "acme", Verify: stripe, Scheme: webhook.SchemeStripe},
				"shopify": {Tenant: "acme", Verify: shopify, Scheme: webhook.SchemeShopify}}})
			expect := func(method, path, token string, body []byte, hdr http.Header, want int, kind string) []byte {
				t.Helper()
				status, data := b.rawWith(t, method, path, token, body, hdr)
				require.Equal(t, want, status, "%s %s: %s", method, path, data)
				if kind != "" {
					require.Equal(t, kind, problemKind(t, data))
				}
				return data
			}
			event := func(id, payload string) []byte {
				return []byte(`{"source":"shop","event_id":"` + id + `","type":"orders/updated","payload":` + payload + `}`)
			}

			// Within the body limit but past the event payload limit: 413,
			// as on the webhook route.
			big := event("e-big", `"`+strings.Repeat("x", opledger.MaxEventPayload)+`"`)
			expect("POST", "/v1/events", b.token, big, nil, 413, "payload_too_large")

			// An ordering value PostgreSQL cannot store: refused as a
			// mapping failure on both stores.
			data := expect("POST", "/v1/events", b.token, event("e-nul", `{"id":"1","version":"a\u0000","total":1}`), nil, 422, "mapping_failed")
			require.Contains(t, string(data), "object.order_by")
			// A number out of range: the detail never repeats the value.
			data = expect("POST", "/v1/events", b.token, event("e-range", `{"id":"1","version":2,"total":1e400}`), nil, 422, "mapping_failed")
			require.Contains(t, string(data), "operations[0].payload: invalid input: payload cannot be canonicalized: a number is beyond the range of a double")
			require.NotContains(t, string(data), "1e400")
			_, err = b.ledger.GetEvent(ctx, "shop", "e-nul")
			require.ErrorIs(t, err, opledger.ErrNotFound, "a refused event records nothing")

			// A signed Stripe event whose created is not a whole number of
			// seconds is recorded without a time, not refused.
			for i, created := range []string{`1.5e9`, `"1500000000"`, `null`, `{}`, `-1`} {
				id := fmt.Sprintf("evt_created_%d", i)
				hook := []byte(`{"id":"` + id + `","type":"orders/updated","created":` + created + `,"version":1,"total":1}`)
				hdr := http.Header{webhook.StripeHeader: {webhook.SignStripe(testWebhookSecret, time.Now(), hook)}}
				expect("POST", "/v1/webhooks/stripe", "", hook, hdr, 201, "")
				d, err := b.ledger.GetEvent(ctx, "stripe", id)
				require.NoError(t, err, created)
				require.Nil(t, d.Event.OccurredAt, created)
			}

			// A signed Stripe body that is not a JSON object is refused in
			// JSON's terms, never Go's ("cannot unmarshal array into Go
			// value of type struct { ID string ..."), and nothing is
			// recorded.
			before, err := b.ledger.EventStats(ctx, false)
			require.NoError(t, err)
			for body, want := range map[string]string{
				`[{"id":"evt_x","type":"orders/updated"}]`: "the webhook body must be a JSON object (got an array)",
				` "evt_x"`:                         "the webhook body must be a JSON object (got a string)",
				`12`:                               "the webhook body must be a JSON object (got a number)",
				`true`:                             "the webhook body must be a JSON object (got a boolean)",
				`null`:                             "the webhook body must be a JSON object (got null)",
				`{"id":5,"type":"orders/updated"}`: "the webhook body is not a JSON event: field id at line 1, column 8: expected a string, got JSON number",
				`{"id":"evt_x","type":["orders/updated"]}`: "the webhook body is not a JSON event: field type at line 1, column 23: expected a string, got JSON array",
			} {
				hook := []byte(body)
				hdr := http.Header{webhook.StripeHeader: {webhook.SignStripe(testWebhookSecret, time.Now(), hook)}}
				var p httpapi.Problem
				require.NoError(t, json.Unmarshal(expect("POST", "/v1/webhooks/stripe", "", hook, hdr, 400, "invalid_input"), &p))
				require.Equal(t, want, p.Detail, body)
				require.NotContains(t, p.Detail, "Go ", body)
			}
			after, err := b.ledger.EventStats(ctx, false)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused webhook records nothing")

			// A Shopify webhook id that is not shaped like a delivery id is
			// left out, as Stripe's X-Request-Id is.
			hook := []byte(`{"id":"S9","version":1,"total":1}`)
			hdr := http.Header{webhook.ShopifyHeader: {webhook.SignShopify(testWebhookSecret, hook)},
				"X-Shopify-Event-Id": {"shp-evt-1"}, "X-Shopify-Topic": {"orders/updated"}, "X-Shopify-Webhook-Id": {"not a key!"}}
			expect("POST", "/v1/webhooks/shopify", "", hook, hdr, 201, "")
			d, err := b.ledger.GetEvent(ctx, "shopify", "shp-evt-1")
			require.NoError(t, err)
			require.Len(t, d.Deliveries, 1)
			require.Empty(t, d.Deliveries[0].DeliveryID)
			// A usable one is kept.
			hdr.Set("X-Shopify-Webhook-Id", "whk-2")
			expect("POST", "/v1/webhooks/shopify", "", hook, hdr, 200, "")
			d, err = b.ledger.GetEvent(ctx, "shopify", "shp-evt-1")
			require.NoError(t, err)
			require.Equal(t, "whk-2", d.Deliveries[1].DeliveryID)
		})
	}
}

package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/webhook"
)

// WebhookSource is a provider that posts its webhooks straight to
// POST /v1/webhooks/{source}: the signature authenticates it, and its events
// belong to Tenant.
type WebhookSource struct {
	Tenant string
	Verify *webhook.Verifier
	Scheme webhook.Scheme
}

// refuseEventRequest counts a request to POST /v1/events refused before
// it became an event, by reason: one of refusedEventReasons.
func (s *server) refuseEventRequest(reason string) {
	s.refusedEventRequests.WithLabelValues(reason).Inc()
}

func (s *server) receiveEvent(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok {
		return
	}
	// A request refused here records nothing: the sender is told, and
	// this process counts it (opledger_event_requests_refused_total), as
	// it counts a refused webhook delivery.
	refuse := s.refuseEventRequest
	var ev opledger.Event
	if err := decode(r, s.opts.MaxJSONDepth, &ev); err != nil {
		refuse(decodeKind(err))
		s.writeError(w, r, err)
		return
	}
	if res, ok := s.intake(w, r, l, ev, eventsRoute, refuse); ok {
		s.writeJSON(w, r, intakeStatus(res), res)
	}
}

// intakeStatus is 201 for a new event, 200 for a duplicate delivery.
func intakeStatus(res *opledger.EventResult) int {
	if res.Duplicate {
		return http.StatusOK
	}
	return http.StatusCreated
}

// intake records an event that came by route (its label in
// opledger_events_refused_total) and returns the result, or writes the
// error and returns false. refused, when not nil, is told the problem
// type of an event refused as the delivery's fault (invalid_input,
// payload_too_large), before it became an event.
func (s *server) intake(w http.ResponseWriter, r *http.Request, l *opledger.Ledger, ev opledger.Event, route string, refused func(reason string)) (*opledger.EventResult, bool) {
	res, err := l.ReceiveEvent(r.Context(), s.opts.Rules, ev)
	var re *opledger.RuleError
	if errors.As(err, &re) {
		s.refusedEvents.WithLabelValues(re.Rule, route).Inc()
		writeProblem(w, r, http.StatusUnprocessableEntity, "mapping_failed", err.Error(), nil)
		return nil, false
	}
	// A body within the request limit (--max-body-bytes may exceed the
	// event payload limit) can still carry a payload past MaxEventPayload:
	// too large, as on the webhook route.
	if errors.Is(err, opledger.ErrEventPayloadTooLarge) {
		if refused != nil {
			refused("payload_too_large")
		}
		writeProblem(w, r, http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf("event payload is larger than %d bytes", opledger.MaxEventPayload), nil)
		return nil, false
	}
	if err != nil {
		if refused != nil && errors.Is(err, opledger.ErrInvalidInput) {
			refused("invalid_input")
		}
		s.writeError(w, r, err)
		return nil, false
	}
	return res, true
}

// webhookAnswer is what a provider's webhook is answered: that the event
// was taken, not what it led to. The route has no bearer token, and a
// captured delivery can be posted again (Shopify's signature never
// expires), so the answer carries nothing of the operations (their
// references, saved responses, attempts) nor the event's reason, which
// names their keys. The tenant's API and console show the rest. Nor does
// it number the delivery: the store's numbers count every tenant's
// deliveries, and a delivery posted again would read how many came
// between.
type webhookAnswer struct {
	Duplicate bool                 `json:"duplicate"`
	Status    opledger.EventStatus `json:"status"`
}

// webhookIn takes a provider's webhook: the signature over the raw body is
// checked first, independently of any dedup; a bad or missing signature is
// 401 and records nothing.
func (s *server) webhookIn(w http.ResponseWriter, r *http.Request) {
	source := r.PathValue("source")
	src, ok := s.opts.Webhooks[source]
	if !ok {
		// Counted under a fixed source label, not the path's name: that
		// is the sender's text.
		s.refusedWebhooks.WithLabelValues(unknownWebhookSource, "unknown_source").Inc()
		writeProblem(w, r, http.StatusNotFound, "not_found", "no webhook source with that name is configured", nil)
		return
	}
	// A delivery refused here records nothing: the provider is told, and
	// this process counts it (opledger_webhooks_refused_total).
	refuse := func(reason string) { s.refusedWebhooks.WithLabelValues(source, reason).Inc() }
	// A compressed body is refused before it is read, as on every route
	// (decode): its signature is over the body as the provider sent it.
	if err := contentCoding(r.Header); err != nil {
		refuse(decodeKind(err))
		s.writeError(w, r, err)
		return
	}
	// The body is the event's payload: past either limit it is too large.
	body, err := readBody(http.MaxBytesReader(w, r.Body, min(s.opts.MaxBodyBytes, opledger.MaxEventPayload)))
	if err != nil {
		refuse(decodeKind(err))
		s.writeError(w, r, err)
		return
	}
	if err := src.Verify.Verify(r.Header, body); err != nil {
		refuse("invalid_signature")
		w.Header().Set("WWW-Authenticate", `Signature realm="opledger"`)
		writeProblem(w, r, http.StatusUnauthorized, "invalid_signature", err.Error(), nil)
		return
	}
	ev, err := providerEvent(src.Scheme, source, r.Header, body)
	if err != nil {
		refuse("invalid_input")
		writeProblem(w, r, http.StatusBadRequest, "invalid_input", err.Error(), nil)
		return
	}
	l, err := s.ledger.WithTenant(src.Tenant)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if res, ok := s.intake(w, r, l, ev, webhookRoute(source), refuse); ok {
		s.writeJSON(w, r, intakeStatus(res), webhookAnswer{Duplicate: res.Duplicate, Status: res.Status})
	}
}

// providerEvent reads the event identity from a provider's webhook: Stripe
// puts it in the body (id, type, created), Shopify in headers.
func providerEvent(scheme webhook.Scheme, source string, h http.Header, body []byte) (opledger.Event, error) {
	ev := opledger.Event{Source: source, Payload: body}
	switch scheme {
	case webhook.SchemeStripe:
		var env struct {
			ID   string `json:"id"`
			Type string `json:"type"`
			// Created is read as it comes: any JSON value decodes.
			Created json.RawMessage `json:"created"`
		}
		if err := stripeBody(body, &env); err != nil {
			return ev, err
		}
		ev.EventID, ev.Type = env.ID, env.Type
		// An unusable time (not a whole number of seconds, not positive,
		// out of the years a store and JSON take) is left out rather than
		// refusing a signed event.
		if created, err := strconv.ParseInt(string(env.Created), 10, 64); err == nil && created > 0 {
			if t := time.Unix(created, 0).UTC(); opledger.ValidEventTime(t) {
				ev.OccurredAt = t
			}
		}
		// Stripe sends no delivery id; a proxy's X-Request-Id serves as
		// one when it is shaped like one, and is ignored otherwise rather
		// than refusing a signed event over a header it does not sign.
		if id := h.Get("X-Request-Id"); opledger.ValidateKey(id) == nil {
			ev.DeliveryID = id
		}
	case webhook.SchemeShopify:
		ev.EventID = h.Get("X-Shopify-Event-Id")
		if ev.EventID == "" {
			ev.EventID = h.Get("X-Shopify-Webhook-Id")
		}
		// Not covered by Shopify's signature: used as the delivery id only
		// when it is shaped like one, as Stripe's X-Request-Id is.
		if id := h.Get("X-Shopify-Webhook-Id"); opledger.ValidateKey(id) == nil {
			ev.DeliveryID = id
		}
		ev.Type = h.Get("X-Shopify-Topic")
		// Not covered by Shopify's signature: used only when it is a
		// usable time.
		if t, err := time.Parse(time.RFC3339Nano, h.Get("X-Shopify-Triggered-At")); err == nil && opledger.ValidEventTime(t) {
			ev.OccurredAt = t.UTC()
		}
	default:
		return ev, fmt.Errorf("unknown webhook scheme %q", scheme)
	}
	// Named where the provider puts them, so that a sender knows what to
	// fix.
	idAt, typeAt := `its body has no "id" (or an empty one)`, `its body has no "type" (or an empty one)`
	if scheme == webhook.SchemeShopify {
		idAt, typeAt = "its X-Shopify-Event-Id and X-Shopify-Webhook-Id headers are missing or empty", "its X-Shopify-Topic header is missing or empty"
	}
	var missing []string
	if ev.EventID == "" {
		missing = append(missing, "no event id: "+idAt)
	}
	if ev.Type == "" {
		missing = append(missing, "no event type: "+typeAt)
	}
	if len(missing) > 0 {
		return ev, errors.New("the webhook carries " + strings.Join(missing, "; "))
	}
	return ev, nil
}

// stripeBody decodes a Stripe body into env, or says why it is not an
// event in the sender's terms (JSON kinds, positions), never in the
// decoder's (Go types). null, which decodes into nothing, is refused too.
func stripeBody(body []byte, env any) error {
	if json.Valid(body) {
		if kind := documentKind(body); kind != "an object" {
			return fmt.Errorf("the webhook body must be a JSON object (got %s)", kind)
		}
	}
	if err := json.Unmarshal(body, env); err != nil {
		return errors.New("the webhook body is not a JSON event: " + describeJSONError(err, body, nil))
	}
	return nil
}

// documentKind names the kind of the valid JSON document doc, with an
// article: "an object", "an array", "a string", "a number", "a boolean"
// or "null".
func documentKind(doc []byte) string {
	switch bytes.TrimLeft(doc, " \t\r\n")[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func (s *server) getEvent(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok || !s.noQuery(w, r) {
		return
	}
	d, err := l.GetEvent(r.Context(), r.PathValue("source"), r.PathValue("event_id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, d)
}

// eventListParams are the query parameters of GET /v1/events.
var eventListParams = []string{"source", "status", "limit", "cursor"}

func (s *server) listEvents(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok {
		return
	}
	q, err := queryParams(r, eventListParams...)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	o := opledger.EventListOptions{Source: q["source"], Status: opledger.EventStatus(q["status"]), Cursor: q["cursor"]}
	if o.Limit, err = limitParam(q["limit"], opledger.MaxListLimit); err != nil {
		s.writeError(w, r, err)
		return
	}
	page, err := l.ListEvents(r.Context(), o)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

func (s *server) putWorkflow(w http.ResponseWriter, r *http.Request) {
	var spec opledger.WorkflowSpec
	l, ok := s.begin(w, r, &spec)
	if !ok {
		return
	}
	wf, created, err := l.PutWorkflow(r.Context(), r.PathValue("key"), spec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		for _, st := range spec.Steps {
			s.noteUnserved(r, st.Destination)
		}
	}
	s.writeJSON(w, r, status, wf)
}

// workflowListParams are the query parameters of GET /v1/workflows.
var workflowListParams = []string{"prefix", "open", "limit", "cursor", "stuck"}

func (s *server) listWorkflows(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok {
		return
	}
	q, err := queryParams(r, workflowListParams...)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	o := opledger.WorkflowListOptions{Prefix: q["prefix"], Cursor: q["cursor"]}
	if o.Limit, err = limitParam(q["limit"], opledger.MaxWorkflowListLimit); err != nil {
		s.writeError(w, r, err)
		return
	}
	if o.Open, err = boolParam("open", q["open"]); err != nil {
		s.writeError(w, r, err)
		return
	}
	stuck, err := boolParam("stuck", q["stuck"])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if stuck {
		s.listStuckWorkflows(w, r, l, q, o.Limit)
		return
	}
	page, err := l.ListWorkflows(r.Context(), o)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// listStuckWorkflows answers GET /v1/workflows?stuck=true: up to limit of
// the workflows that cannot go on (Ledger.StuckWorkflows), in key order,
// in one page. It takes no other parameter: revising a step takes its
// workflow off the list, so the next request shows those after it.
func (s *server) listStuckWorkflows(w http.ResponseWriter, r *http.Request, l *opledger.Ledger, q map[string]string, limit int) {
	for _, name := range []string{"prefix", "open", "cursor"} {
		if q[name] != "" {
			writeProblem(w, r, http.StatusBadRequest, "invalid_input", "stuck=true takes only limit, not "+name, nil)
			return
		}
	}
	if limit == 0 {
		limit = opledger.DefaultWorkflowListLimit
	}
	items, err := l.StuckWorkflows(r.Context(), limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	now, err := l.Now(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, opledger.WorkflowPage{Items: items, Now: now})
}

func (s *server) getWorkflow(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok || !s.noQuery(w, r) {
		return
	}
	wf, err := l.GetWorkflow(r.Context(), r.PathValue("key"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, wf)
}

func (s *server) resumeWorkflow(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok {
		return
	}
	wf, err := l.ResumeWorkflow(r.Context(), r.PathValue("key"))
	if _, ok := errors.AsType[*opledger.StepError](err); ok {
		// The request was fine: the next step cannot be recorded, so the
		// workflow is held, and its status says why (as a repeated PUT
		// answers).
		wf, err = l.GetWorkflow(r.Context(), r.PathValue("key"))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, wf)
}

func (s *server) approveStep(w http.ResponseWriter, r *http.Request) {
	var a opledger.Approval
	l, ok := s.begin(w, r, &a)
	if !ok {
		return
	}
	wf, replayed, err := l.ApproveWorkflowStep(r.Context(), r.PathValue("key"), r.PathValue("step"), a)
	if !s.approved(w, r, err) {
		return
	}
	s.writeRepeatable(w, r, http.StatusOK, wf, replayed)
}

// cancelWorkflow records an operator's decision to give up on a workflow
// whose current step has no operation (a stuck one) or failed.
func (s *server) cancelWorkflow(w http.ResponseWriter, r *http.Request) {
	var c opledger.WorkflowCancel
	l, ok := s.begin(w, r, &c)
	if !ok {
		return
	}
	wf, replayed, err := l.CancelWorkflow(r.Context(), r.PathValue("key"), c)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeRepeatable(w, r, http.StatusOK, wf, replayed)
}

func (s *server) reviseStep(w http.ResponseWriter, r *http.Request) {
	var rev opledger.Revision
	l, ok := s.begin(w, r, &rev)
	if !ok {
		return
	}
	wf, replayed, err := l.ReviseWorkflowStep(r.Context(), r.PathValue("key"), r.PathValue("step"), rev)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeRepeatable(w, r, http.StatusOK, wf, replayed)
}

# Generates httpapi/openapi.json and its copy docs/openapi.json, the OpenAPI 3.1
# description of the API. Run from the repository root after changing routes:
#   python3 httpapi/openapi.py
# TestOpenAPIMatchesRoutes fails when a route and the document disagree.
import json
def ref(n): return {"$ref": "#/components/schemas/"+n}
def problem(desc): return {"description": desc, "content": {"application/problem+json": {"schema": ref("Problem")}}}
def js(desc, schema): return {"description": desc, "content": {"application/json": {"schema": schema}}}
def body(schema, required=True): return {"required": required, "content": {"application/json": {"schema": schema}}}
key = {"name": "key", "in": "path", "required": True, "description": "Operation key; percent-encode '/' as %2F.", "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"}}
attempt = {"name": "id", "in": "path", "required": True, "description": "Attempt id (ULID) from the claim.", "schema": {"type": "string"}}
unauthorized = problem("Missing or unknown bearer token (unauthorized)")
bad = problem("Invalid input, key or JSON (invalid_input, invalid_key, invalid_json, reason_required)")
too_large = problem("Body larger than the limit (payload_too_large)")
def op(summary, params, responses, reqbody=None, security=True, opid=None):
    o = {"summary": summary, "operationId": opid, "parameters": params, "responses": dict(responses)}
    if reqbody: o["requestBody"] = reqbody
    if not security: o["security"] = []; return o
    else:
        o["responses"].setdefault("401", unauthorized)
        if reqbody or params:
            o["responses"].setdefault("400", bad)
        if reqbody:
            o["responses"].setdefault("413", too_large)
    if not params: del o["parameters"]
    return o
t = lambda *x: {"type": list(x) if len(x) > 1 else x[0]}
ts = {"type": ["string", "null"], "format": "date-time"}
state = {"type": "string", "enum": ["awaiting_approval", "pending", "in_progress", "uncertain", "held", "succeeded", "failed"]}
schemas = {
 "Intent": {"type": "object", "additionalProperties": False, "required": ["action", "destination"], "properties": {
   "action": t("string"), "destination": t("string"), "payload": {"description": "Any JSON value: the content to approve and execute."},
   "version": {"type": "integer", "minimum": 1, "default": 1}, "owner": t("string"), "source_event": t("string"),
   "requires_approval": t("boolean"), "sensitive_fields": {"type": "array", "items": t("string"), "description": "Dotted paths masked in every response."}}},
 "Operation": {"type": "object", "required": ["key", "action", "destination", "version", "fingerprint", "state"], "properties": {
   "tenant": t("string"), "key": t("string"), "action": t("string"), "destination": t("string"), "version": t("integer"),
   "fingerprint": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}, "payload": {"description": "Sensitive fields masked as \"***\"."},
   "sensitive_fields": {"type": ["array", "null"], "items": t("string")}, "owner": t("string"), "source_event": t("string"),
   "requires_approval": t("boolean"), "approved_by": t("string"), "state": state,
   "failure_kind": {"type": "string", "enum": ["", "rejected", "exhausted", "cancelled"]}, "dispatched": t("boolean"),
   "first_dispatched_at": ts, "attempt_count": t("integer"), "fencing_token": t("integer"), "current_attempt_id": t("string"),
   "lease_expires_at": ts, "not_before": ts, "review_by": ts, "unresolved_since": ts, "protected": t("boolean"),
   "protected_until": {"type": "string", "format": "date-time", "description": "On a protected operation: when the destination's idempotency-key retention ends; the protected retry is not made after it."},
   "destination_ref": t("string"), "response": {"description": "Saved destination response (JSON) replayed to repeats."},
   "last_error": t("string"), "duplicate_effects": t("integer"), "tombstoned": t("boolean"),
   "created_at": {"type": "string", "format": "date-time"}, "updated_at": {"type": "string", "format": "date-time"}}},
 "Attempt": {"type": "object", "properties": {"id": t("string"), "number": t("integer"), "fencing_token": t("integer"), "worker": t("string"),
   "protected": t("boolean"), "claimed_at": {"type": "string", "format": "date-time"}, "lease_expires_at": {"type": "string", "format": "date-time"},
   "dispatched_at": ts, "finished_at": ts, "outcome": t("string"), "destination_ref": t("string"), "error": t("string"), "stale": t("boolean"), "late_outcome": t("string")}},
 "TimelineEntry": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}, "actor": t("string"), "attempt_id": t("string"),
   "event": t("string"), "from": t("string"), "to": t("string"), "evidence": t("string")}},
 "OperationDetail": {"allOf": [ref("Operation"), {"type": "object", "properties": {"attempts": {"type": "array", "items": ref("Attempt")},
   "timeline": {"type": "array", "items": ref("TimelineEntry")}}}]},
 "OutcomeResult": {"allOf": [ref("Operation"), {"type": "object", "properties": {"stale_report": {"type": "boolean",
   "description": "true when the attempt no longer held the operation: the report was kept as evidence only."}}}]},
 "Page": {"type": "object", "required": ["items", "next_cursor"], "properties": {"items": {"type": "array", "items": ref("Operation")}, "next_cursor": t("string")}},
 "ClaimRequest": {"type": "object", "additionalProperties": False, "properties": {"worker": t("string"), "lease_seconds": {"type": "number", "minimum": 0},
   "intent": {"allOf": [ref("Intent")], "description": "Record the operation first if the key is new, in the same transaction."},
   "dispatch": {"type": "boolean", "description": "Mark the attempt dispatched in the same transaction, as a dispatch call right after the claim would: for a caller that starts the external call at once."}}},
 "Claim": {"type": "object", "required": ["attempt_id", "fencing_token", "lease_expires_at", "destination_idempotency_key", "operation"], "properties": {
   "attempt_id": t("string"), "fencing_token": t("integer"), "lease_expires_at": {"type": "string", "format": "date-time"},
   "destination_idempotency_key": t("string"), "protected": t("boolean"),
   "protected_until": {"type": "string", "format": "date-time", "description": "On a protected claim: do not start the call at or after this time."},
   "operation": ref("Operation")}},
 "Replay": {"type": "object", "properties": {"replayed": {"const": True}, "operation": ref("Operation")}},
 "DispatchRequest": {"type": "object", "additionalProperties": False, "required": ["fencing_token"], "properties": {"fencing_token": t("integer")}},
 "OutcomeRequest": {"type": "object", "additionalProperties": False, "required": ["fencing_token", "outcome"], "properties": {
   "fencing_token": t("integer"), "outcome": {"type": "string", "enum": ["succeeded", "rejected", "retryable", "uncertain"]},
   "destination_ref": t("string"), "response": {}, "error": t("string"), "retry_after_seconds": {"type": "number", "minimum": 0}}},
 "ReconcileRequest": {"type": "object", "additionalProperties": False, "properties": {"found": t("boolean"), "matches": t("boolean"),
   "destination_ref": t("string"), "authoritative": t("boolean"), "evidence": t("string"),
   "visibility_delay_seconds": {"type": "number", "minimum": 0}, "protection_retention_seconds": {"type": "number", "minimum": 0}}},
 "ApproveRequest": {"type": "object", "additionalProperties": False, "required": ["version", "fingerprint", "approver"], "properties": {
   "version": t("integer"), "fingerprint": t("string"), "approver": t("string")}},
 "ReviseRequest": {"type": "object", "additionalProperties": False, "required": ["payload", "version"], "properties": {
   "payload": {}, "version": t("integer"), "actor": t("string")}},
 "ResolveRequest": {"type": "object", "additionalProperties": False, "required": ["decision", "reason"], "properties": {
   "decision": {"type": "string", "enum": ["mark_succeeded", "authorize_retry", "cancel"]}, "destination_ref": t("string"),
   "reason": {"type": "string", "minLength": 1}, "operator": t("string")}},
 "Stats": {"type": "object", "properties": {"operations_by_state": {"type": "object", "additionalProperties": t("integer")},
   "unresolved": t("integer"), "reviews_overdue": t("integer"), "attempts": {"type": "array", "items": {"type": "object", "properties": {"destination": t("string"), "outcome": t("string"), "count": t("integer")}}},
   "attempts_total": t("integer"), "confirmed_effects": t("integer"), "duplicate_effects": t("integer"), "recoveries": t("integer"),
   "recovery_mean_seconds": t("number"), "recovery_p90_seconds": t("number"), "recovery_total_seconds": t("number"),
   "recovery_buckets": {"type": "array", "items": t("integer")}}},
 "Event": {"type": "object", "additionalProperties": False, "required": ["source", "event_id", "type"], "properties": {
   "source": t("string"), "event_id": t("string"), "delivery_id": t("string"), "type": t("string"),
   "occurred_at": {"type": "string", "format": "date-time"}, "payload": {"description": "The event's JSON body."}}},
 "EventResult": {"type": "object", "properties": {"duplicate": t("boolean"), "out_of_order": t("boolean"),
   "status": {"type": "string", "enum": ["applied", "out_of_order", "conflict", "unmapped"]}, "reason": t("string"),
   "event": {"type": "object"}, "delivery": {"type": "object"}, "operations": {"type": "array", "items": ref("Operation")}}},
 "EventDetail": {"type": "object", "properties": {"event": {"type": "object"}, "deliveries": {"type": "array", "items": {"type": "object"}},
   "operations": {"type": "array", "items": ref("Operation")}}},
 "EventPage": {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object"}}, "next_cursor": t("string")}},
 "WorkflowSpec": {"type": "object", "additionalProperties": False, "required": ["steps"], "properties": {
   "steps": {"type": "array", "items": {"type": "object", "required": ["name", "action", "destination"], "properties": {
     "name": t("string"), "action": t("string"), "destination": t("string"),
     "payload": {"description": "JSON; strings may use {steps.<name>.ref}, {steps.<name>.response.<path>}, {workflow.key}"},
     "version": t("integer"), "requires_approval": t("boolean"), "owner": t("string"), "sensitive_fields": {"type": "array", "items": t("string")}}}},
   "owner": t("string"), "requires_approval": t("boolean"), "source_event": t("string")}},
 "Workflow": {"type": "object", "properties": {"key": t("string"), "status": {"type": "string", "enum": ["running", "awaiting_approval", "held", "succeeded", "failed"]},
   "reason": t("string"), "steps": {"type": "array", "items": {"type": "object"}}}},
 "Problem": {"type": "object", "required": ["type", "title", "status"], "properties": {
   "type": {"type": "string", "description": "https://opledger.dev/problems/ + a stable suffix: fingerprint_mismatch, in_progress, not_due, invalid_state, stale_fencing_token, not_found, invalid_key, invalid_input, invalid_json, reason_required, unauthorized, payload_too_large, unavailable, internal"},
   "title": t("string"), "status": t("integer"), "detail": t("string"), "instance": t("string"), "state": state, "request_id": t("string"),
   "operation": ref("Operation")}},
}
paths = {
 "/v1/operations/{key}": {
   "put": op("Record an intent", [key], {"201": js("Recorded", ref("Operation")), "200": js("Repeat with the same fingerprint: the operation as it is", ref("Operation")),
      "422": problem("Same key, different content (fingerprint_mismatch); the stored operation is untouched")}, body(ref("Intent")), opid="recordOperation"),
   "get": op("Get an operation with its attempts and timeline", [key], {"200": js("The operation", ref("OperationDetail")), "404": problem("Unknown key (not_found)")}, opid="getOperation")},
 "/v1/operations": {"get": op("List operations, newest first, or the held ones by review time", [
    {"name": "state", "in": "query", "schema": t("string"), "description": "Comma-separated states"},
    {"name": "owner", "in": "query", "schema": t("string")}, {"name": "destination", "in": "query", "schema": t("string")},
    {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["newest", "review"], "default": "newest"},
     "description": "newest: newest first. review: held operations only, earliest review_by first (state empty or held)"},
    {"name": "duplicate_effects", "in": "query", "schema": {"type": "boolean", "default": False},
     "description": "true: only operations with duplicate effects (the destination acted more than once)"},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}},
    {"name": "cursor", "in": "query", "schema": t("string")}], {"200": js("A page", ref("Page"))}, opid="listOperations")},
 "/v1/operations/{key}/claim": {"post": op("Claim an operation for one attempt", [key], {
    "201": js("Claimed", ref("Claim")), "200": js("Already succeeded: the saved result; send nothing", ref("Replay")),
    "404": problem("Unknown key (not_found)"), "409": problem("Not claimable now (in_progress, not_due, invalid_state) with the state"),
    "422": problem("Inline intent with other content (fingerprint_mismatch)")}, body(ref("ClaimRequest")), opid="claimOperation")},
 "/v1/operations/{key}/attempts/{id}/dispatch": {"post": op("Mark the recovery point before the external call", [key, attempt], {
    "200": js("Dispatched", ref("Operation")), "404": problem("Unknown key or attempt"), "409": problem("Stale fencing token or lease over (stale_fencing_token): do not call the destination")},
    body(ref("DispatchRequest")), opid="dispatchAttempt")},
 "/v1/operations/{key}/attempts/{id}/outcome": {"post": op("Report an attempt's outcome", [key, attempt], {
    "200": js("The new state; stale reports are kept as evidence (stale_report: true)", ref("OutcomeResult")), "404": problem("Unknown key or attempt")},
    body(ref("OutcomeRequest")), opid="reportOutcome")},
 "/v1/operations/{key}/reconcile": {"post": op("Apply a lookup result or a protection to an uncertain operation", [key], {
    "200": js("The new state", ref("Operation")), "404": problem("Unknown key"), "409": problem("Not uncertain (invalid_state)")}, body(ref("ReconcileRequest")), opid="reconcileOperation")},
 "/v1/operations/{key}/approve": {"post": op("Approve exactly this version and fingerprint", [key], {
    "200": js("Approved: pending", ref("Operation")), "404": problem("Unknown key"), "409": problem("Not awaiting approval (invalid_state) or other content (fingerprint_mismatch)")},
    body(ref("ApproveRequest")), opid="approveOperation")},
 "/v1/operations/{key}/revise": {"post": op("Revise content before any dispatch", [key], {
    "200": js("Revised: awaiting approval", ref("Operation")), "404": problem("Unknown key"), "409": problem("Dispatched before, in progress or final (invalid_state, in_progress)")},
    body(ref("ReviseRequest")), opid="reviseOperation")},
 "/v1/operations/{key}/resolve": {"post": op("Record an operator decision (reason required)", [key], {
    "200": js("The new state", ref("Operation")), "404": problem("Unknown key"), "409": problem("Decision not allowed in this state (invalid_state)")},
    body(ref("ResolveRequest")), opid="resolveOperation")},
 "/v1/events": {
   "post": op("Receive an inbound event (dedup by source + event_id)", [], {"201": js("New event, mapped to its operations", ref("EventResult")),
      "200": js("Duplicate delivery: recorded; the operations the first produced; nothing created", ref("EventResult")),
      "422": problem("A mapping rule cannot map the event (mapping_failed); nothing recorded")}, body(ref("Event")), opid="receiveEvent"),
   "get": op("List events, newest first", [{"name": "source", "in": "query", "schema": t("string")}, {"name": "status", "in": "query", "schema": t("string")},
      {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500}}, {"name": "cursor", "in": "query", "schema": t("string")}],
      {"200": js("A page", ref("EventPage"))}, opid="listEvents")},
 "/v1/events/{source}/{event_id}": {"get": op("An event with its deliveries and operations", [
    {"name": "source", "in": "path", "required": True, "schema": t("string")}, {"name": "event_id", "in": "path", "required": True, "schema": t("string")}],
    {"200": js("The event", ref("EventDetail")), "404": problem("Unknown event (not_found)")}, opid="getEvent")},
 "/v1/webhooks/{source}": {"post": op("A provider's signed webhook (Stripe-Signature or X-Shopify-Hmac-Sha256); no bearer token", [
    {"name": "source", "in": "path", "required": True, "schema": t("string")}],
    {"201": js("New event", ref("EventResult")), "200": js("Duplicate delivery", ref("EventResult")),
     "400": problem("No event id or type in the webhook (invalid_input)"), "401": problem("Missing, bad or stale signature (unauthorized); nothing recorded"),
     "404": problem("No webhook source with that name (not_found)"), "413": problem("Body too large (payload_too_large)"),
     "422": problem("A mapping rule cannot map the event (mapping_failed)")},
    {"required": True, "content": {"application/json": {"schema": {"description": "The provider's raw event"}}}}, security=False, opid="receiveWebhook")},
 "/v1/workflows/{key}": {
   "put": op("Record a workflow (first step recorded at once, later steps when the previous succeeds)", [key],
      {"201": js("Recorded", ref("Workflow")), "200": js("Repeat: the workflow as it is", ref("Workflow")),
       "422": problem("Same key, other steps (fingerprint_mismatch)")}, body(ref("WorkflowSpec")), opid="putWorkflow"),
   "get": op("A workflow with its steps' states", [key], {"200": js("The workflow", ref("Workflow")), "404": problem("Unknown workflow (not_found)")}, opid="getWorkflow")},
 "/v1/workflows/{key}/resume": {"post": op("Resume: record the next step if the previous succeeded; succeeded steps are skipped", [key],
    {"200": js("The workflow", ref("Workflow")), "404": problem("Unknown workflow (not_found)")}, opid="resumeWorkflow")},
 "/v1/workflows/{key}/steps/{step}/approve": {"post": op("Approve exactly this version of a step", [key, {"name": "step", "in": "path", "required": True, "schema": t("string")}],
    {"200": js("The workflow", ref("Workflow")), "404": problem("Unknown workflow or step (not_found)"), "409": problem("Not awaiting approval, or other content")},
    body(ref("ApproveRequest")), opid="approveWorkflowStep")},
 "/v1/workflows/{key}/steps/{step}/revise": {"post": op("Revise a step's content before it is dispatched; it then awaits approval", [key, {"name": "step", "in": "path", "required": True, "schema": t("string")}],
    {"200": js("The workflow", ref("Workflow")), "404": problem("Unknown workflow or step (not_found)"), "409": problem("Already dispatched (invalid_state)")},
    body(ref("ReviseRequest")), opid="reviseWorkflowStep")},
 "/v1/stats": {"get": op("The tenant's figures", [], {"200": js("Figures", ref("Stats"))}, opid="getStats")},
 "/v1/openapi.json": {"get": op("This document", [], {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}}, security=False, opid="getOpenAPI")},
 "/healthz": {"get": op("Liveness", [], {"200": js("Alive", {"type": "object"})}, security=False, opid="healthz")},
 "/readyz": {"get": op("Readiness: the store answers", [], {"200": js("Ready", {"type": "object"}), "503": problem("Store unreachable (unavailable)")}, security=False, opid="readyz")},
 "/metrics": {"get": op("Prometheus metrics", [], {"200": {"description": "Prometheus text format", "content": {"text/plain": {}}}}, security=False, opid="metrics")},
}
doc = {"openapi": "3.1.0", "info": {"title": "opledger API", "version": "1", "description": "The operation ledger's HTTP API. Errors are RFC 9457 problem details. Every /v1 request except this document needs Authorization: Bearer <token>; a token belongs to one tenant and sees nothing of another."},
  "servers": [{"url": "http://127.0.0.1:8080"}], "security": [{"bearer": []}],
  "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}, "schemas": schemas}, "paths": paths}
out = json.dumps(doc, indent=2) + "\n"
for p in ["httpapi/openapi.json", "docs/openapi.json"]:
    open(p, "w").write(out)

// Package client is a small Go client for the opledger HTTP API. The CLI
// and the tests use it; automations written in Go can too.
//
// Errors from the API come back as *Error, which carries the RFC 9457
// problem and matches the opledger sentinels with errors.Is
// (opledger.ErrFingerprintMismatch, opledger.ErrInProgress, ...).
//
// Allowed imports: opledger, httpapi (for the problem type),
// internal/opjson (to encode as the API does), the standard library.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/opjson"
)

// Client calls one opledger server with one token.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client for the server at baseURL (e.g.
// "http://127.0.0.1:8080") using the bearer token. A nil httpClient means
// one with a 30 s timeout that keeps up to 64 idle connections to the
// server, so that many goroutines can share one Client.
func New(baseURL, token string, httpClient *http.Client) *Client {
	if httpClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		httpClient = &http.Client{Timeout: 30 * time.Second, Transport: tr}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: httpClient}
}

// Error is a problem the API answered with.
type Error struct {
	Status  int
	Problem httpapi.Problem
}

// Error describes the error.
func (e *Error) Error() string {
	if e.Problem.Detail != "" {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Kind(), e.Status, e.Problem.Detail)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Kind(), e.Status)
}

// Kind is the stable suffix of the problem type, e.g. "in_progress".
func (e *Error) Kind() string { return strings.TrimPrefix(e.Problem.Type, httpapi.ProblemTypeBase) }

// Is matches the opledger sentinel errors by problem kind, and by the
// problem's state as *opledger.StateError does: an invalid_state problem
// whose state is succeeded matches opledger.ErrAlreadySucceeded, one
// whose state is in_progress opledger.ErrInProgress.
func (e *Error) Is(target error) bool {
	switch e.Kind() {
	case "fingerprint_mismatch":
		return target == opledger.ErrFingerprintMismatch
	case "in_progress":
		return target == opledger.ErrInProgress || target == opledger.ErrInvalidState
	case "not_due":
		return target == opledger.ErrNotDue || target == opledger.ErrInvalidState
	case "invalid_state":
		switch target {
		case opledger.ErrInvalidState:
			return true
		case opledger.ErrAlreadySucceeded:
			return e.Problem.State == opledger.StateSucceeded
		case opledger.ErrInProgress:
			return e.Problem.State == opledger.StateInProgress
		}
		return false
	case "stale_fencing_token":
		return target == opledger.ErrStaleFencingToken
	case "stale_finding":
		return target == opledger.ErrStaleFinding
	case "stale_decision":
		return target == opledger.ErrStaleDecision
	case "not_found":
		return target == opledger.ErrNotFound
	case "invalid_key":
		return target == opledger.ErrInvalidKey
	case "invalid_input", "invalid_json", "mapping_failed":
		// mapping_failed: a rule could not map the event (a
		// *opledger.RuleError in the library, which matches it too).
		return target == opledger.ErrInvalidInput
	case "payload_too_large":
		// Past the server's body limit, or an event payload past
		// MaxEventPayload: input it refuses.
		return target == opledger.ErrInvalidInput
	case "reason_required":
		return target == opledger.ErrReasonRequired
	case "unauthorized":
		return target == opledger.ErrUnauthorized
	}
	return false
}

// do sends a request with an optional JSON body and decodes a JSON answer
// into out. It returns the status code.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode >= 400 {
		e := &Error{Status: resp.StatusCode}
		if err := json.Unmarshal(data, &e.Problem); err != nil {
			e.Problem.Detail = strings.TrimSpace(string(data))
		}
		return resp.StatusCode, e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s %s response: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func opPath(key string, rest ...string) string {
	p := "/v1/operations/" + url.PathEscape(key)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// Intent is the body of a record request (the key goes in the path).
type Intent struct {
	Action           string          `json:"action"`
	Destination      string          `json:"destination"`
	Payload          json.RawMessage `json:"payload,omitempty"`
	Version          int64           `json:"version,omitempty"`
	Owner            string          `json:"owner,omitempty"`
	SourceEvent      string          `json:"source_event,omitempty"`
	RequiresApproval bool            `json:"requires_approval,omitempty"`
	SensitiveFields  []string        `json:"sensitive_fields,omitempty"`
}

// Record records an intent under key; created is false for a repeat.
func (c *Client) Record(ctx context.Context, key string, in Intent) (op *opledger.Operation, created bool, err error) {
	op = new(opledger.Operation)
	status, err := c.do(ctx, http.MethodPut, opPath(key), in, op)
	if err != nil {
		return nil, false, err
	}
	return op, status == http.StatusCreated, nil
}

// OperationDetail is an operation with its attempts and timeline.
type OperationDetail struct {
	opledger.Operation
	Attempts []opledger.Attempt       `json:"attempts"`
	Timeline []opledger.TimelineEntry `json:"timeline"`
}

// MarshalJSON encodes the detail as the API sends it: the operation's
// fields as opledger.Operation encodes them (payload and response masked
// at its sensitive fields), then attempts and timeline. Without it the
// embedded Operation's MarshalJSON would encode the operation alone.
func (d OperationDetail) MarshalJSON() ([]byte, error) {
	return opjson.WithFields(&d.Operation, map[string]any{"attempts": d.Attempts, "timeline": d.Timeline})
}

// Get returns an operation with its attempts and timeline.
func (c *Client) Get(ctx context.Context, key string) (*OperationDetail, error) {
	var d OperationDetail
	if _, err := c.do(ctx, http.MethodGet, opPath(key), nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// List returns a page of operations, newest first.
func (c *Client) List(ctx context.Context, o opledger.ListOptions) (*opledger.Page, error) {
	q := url.Values{}
	var states []string
	for _, s := range o.States {
		states = append(states, string(s))
	}
	if len(states) > 0 {
		q.Set("state", strings.Join(states, ","))
	}
	for k, v := range map[string]string{"owner": o.Owner, "destination": o.Destination, "order": string(o.Order), "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.DuplicateEffects {
		q.Set("duplicate_effects", "true")
	}
	var page opledger.Page
	path := "/v1/operations"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if _, err := c.do(ctx, http.MethodGet, path, nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// ClaimRequest is the body of a claim.
type ClaimRequest struct {
	Worker       string  `json:"worker,omitempty"`
	LeaseSeconds float64 `json:"lease_seconds,omitempty"`
	// Intent records the operation first when the key is new.
	Intent *Intent `json:"intent,omitempty"`
	// Dispatch marks the attempt dispatched in the claim's own write
	// (opledger.ClaimOptions.Dispatch), for a caller that starts the
	// external call as soon as the claim returns: one request and one
	// durable write fewer than Claim then Dispatch.
	Dispatch bool `json:"dispatch,omitempty"`
}

// ReplayError carries the saved result of an operation that already
// succeeded; nothing must be sent. It matches opledger.ErrAlreadySucceeded.
type ReplayError struct{ Operation *opledger.Operation }

// Error describes the error.
func (e *ReplayError) Error() string {
	return "operation " + e.Operation.Key + " already succeeded with ref " + e.Operation.DestinationRef
}

// Is matches opledger.ErrAlreadySucceeded.
func (e *ReplayError) Is(target error) bool { return target == opledger.ErrAlreadySucceeded }

// Claim claims an operation. A succeeded operation gives a *ReplayError
// with the saved result.
func (c *Client) Claim(ctx context.Context, key string, r ClaimRequest) (*opledger.Claim, error) {
	var raw json.RawMessage
	status, err := c.do(ctx, http.MethodPost, opPath(key, "claim"), r, &raw)
	if err != nil {
		return nil, err
	}
	if status == http.StatusOK {
		var replay struct {
			Operation *opledger.Operation `json:"operation"`
		}
		if err := json.Unmarshal(raw, &replay); err != nil {
			return nil, fmt.Errorf("decode replay: %w", err)
		}
		return nil, &ReplayError{Operation: replay.Operation}
	}
	var cl opledger.Claim
	if err := json.Unmarshal(raw, &cl); err != nil {
		return nil, fmt.Errorf("decode claim: %w", err)
	}
	return &cl, nil
}

// Dispatch marks the recovery point of an attempt.
func (c *Client) Dispatch(ctx context.Context, key, attemptID string, token int64) (*opledger.Operation, error) {
	var op opledger.Operation
	if _, err := c.do(ctx, http.MethodPost, opPath(key, "attempts", attemptID, "dispatch"),
		map[string]int64{"fencing_token": token}, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// Report is the body of an outcome report.
type Report struct {
	FencingToken      int64            `json:"fencing_token"`
	Outcome           opledger.Outcome `json:"outcome"`
	DestinationRef    string           `json:"destination_ref,omitempty"`
	Response          json.RawMessage  `json:"response,omitempty"`
	Error             string           `json:"error,omitempty"`
	RetryAfterSeconds float64          `json:"retry_after_seconds,omitempty"`
}

// ReportResult is the operation after a report, and whether the report
// was stale (kept as evidence only).
type ReportResult struct {
	opledger.Operation
	StaleReport bool `json:"stale_report"`
}

// MarshalJSON encodes the result as the API sends it: the operation's
// fields as opledger.Operation encodes them (payload and response masked
// at its sensitive fields), then stale_report. Without it the embedded
// Operation's MarshalJSON would encode the operation alone.
func (r ReportResult) MarshalJSON() ([]byte, error) {
	return opjson.WithFields(&r.Operation, map[string]any{"stale_report": r.StaleReport})
}

// Report reports an attempt's outcome.
func (c *Client) Report(ctx context.Context, key, attemptID string, r Report) (*ReportResult, error) {
	var res ReportResult
	if _, err := c.do(ctx, http.MethodPost, opPath(key, "attempts", attemptID, "outcome"), r, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Finding is the body of a reconcile request.
type Finding struct {
	Found                      bool    `json:"found"`
	Matches                    bool    `json:"matches"`
	DestinationRef             string  `json:"destination_ref,omitempty"`
	Authoritative              bool    `json:"authoritative"`
	Evidence                   string  `json:"evidence,omitempty"`
	VisibilityDelaySeconds     float64 `json:"visibility_delay_seconds,omitempty"`
	ProtectionRetentionSeconds float64 `json:"protection_retention_seconds,omitempty"`
	// AttemptCount is the operation's attempt_count the lookup was made
	// for; the server refuses the finding (409 stale_finding, matching
	// opledger.ErrStaleFinding) if another attempt was made since.
	AttemptCount int `json:"attempt_count,omitempty"`
	// LookedAt is when the lookup began; absence counts only for a lookup
	// begun after the visibility delay.
	LookedAt *time.Time `json:"looked_at,omitempty"`
}

// Reconcile applies a lookup result to an uncertain operation.
func (c *Client) Reconcile(ctx context.Context, key string, f Finding) (*opledger.Operation, error) {
	return c.post(ctx, key, "reconcile", f)
}

// Approve approves exactly one version and fingerprint.
func (c *Client) Approve(ctx context.Context, key string, a opledger.Approval) (*opledger.Operation, error) {
	return c.post(ctx, key, "approve", a)
}

// Revise replaces the content of a never-dispatched operation.
func (c *Client) Revise(ctx context.Context, key string, r opledger.Revision) (*opledger.Operation, error) {
	return c.post(ctx, key, "revise", r)
}

// Resolve records an operator decision; the reason is required.
func (c *Client) Resolve(ctx context.Context, key string, d opledger.Decision) (*opledger.Operation, error) {
	return c.post(ctx, key, "resolve", d)
}

func (c *Client) post(ctx context.Context, key, action string, body any) (*opledger.Operation, error) {
	var op opledger.Operation
	if _, err := c.do(ctx, http.MethodPost, opPath(key, action), body, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// Stats returns the tenant's figures.
func (c *Client) Stats(ctx context.Context) (*opledger.Stats, error) {
	var st opledger.Stats
	if _, err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// ReceiveEvent posts an inbound event; duplicate is true for a repeated
// delivery (nothing created).
func (c *Client) ReceiveEvent(ctx context.Context, ev opledger.Event) (*opledger.EventResult, error) {
	var res opledger.EventResult
	if _, err := c.do(ctx, http.MethodPost, "/v1/events", ev, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ListEvents returns a page of events, newest first.
func (c *Client) ListEvents(ctx context.Context, o opledger.EventListOptions) (*opledger.EventPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"source": o.Source, "status": string(o.Status), "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	path := "/v1/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page opledger.EventPage
	if _, err := c.do(ctx, http.MethodGet, path, nil, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// GetEvent returns an event with its deliveries and operations.
func (c *Client) GetEvent(ctx context.Context, source, eventID string) (*opledger.EventDetail, error) {
	var d opledger.EventDetail
	if _, err := c.do(ctx, http.MethodGet, "/v1/events/"+url.PathEscape(source)+"/"+url.PathEscape(eventID), nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

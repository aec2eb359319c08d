package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/advance"
	"github.com/opledger/opledger/internal/opjson"
)

// receiveEventPattern is the route of POST /v1/events, whose refusals
// are counted (opledger_event_requests_refused_total).
const receiveEventPattern = "POST /v1/events"

func (s *server) routes() []route {
	return []route{
		{"PUT /v1/operations/{key}", s.putOperation, withToken},
		{"GET /v1/operations/{key}", s.getOperation, withToken},
		{"GET /v1/operations", s.listOperations, withToken},
		{"POST /v1/operations/{key}/claim", s.claim, withToken},
		{"POST /v1/operations/{key}/attempts/{id}/dispatch", s.dispatch, withToken},
		{"POST /v1/operations/{key}/attempts/{id}/lease", s.extendLease, withToken},
		{"POST /v1/operations/{key}/attempts/{id}/release", s.release, withToken},
		{"POST /v1/operations/{key}/attempts/{id}/outcome", s.outcome, withToken},
		{"POST /v1/operations/{key}/reconcile", s.reconcile, withToken},
		{"POST /v1/operations/{key}/approve", s.approve, decision},
		{"POST /v1/operations/{key}/revise", s.revise, withToken},
		{"POST /v1/operations/{key}/resolve", s.resolve, decision},
		{receiveEventPattern, s.receiveEvent, withToken},
		{"GET /v1/events", s.listEvents, withToken},
		{"GET /v1/events/{source}/{event_id}", s.getEvent, withToken},
		{"POST /v1/webhooks/{source}", s.webhookIn, public},
		{"PUT /v1/workflows/{key}", s.putWorkflow, withToken},
		{"GET /v1/workflows", s.listWorkflows, withToken},
		{"GET /v1/workflows/{key}", s.getWorkflow, withToken},
		{"POST /v1/workflows/{key}/resume", s.resumeWorkflow, withToken},
		{"POST /v1/workflows/{key}/steps/{step}/approve", s.approveStep, decision},
		{"POST /v1/workflows/{key}/steps/{step}/revise", s.reviseStep, withToken},
		{"POST /v1/workflows/{key}/cancel", s.cancelWorkflow, decision},
		{"GET /v1/stats", s.stats, withToken},
		{"GET /v1/openapi.json", s.openapi, public},
		{"GET /healthz", s.healthz, public},
		{"GET /readyz", s.readyz, public},
		{"GET /metrics", s.serveMetrics, public},
	}
}

// intentBody is the body of PUT /v1/operations/{key}; the key comes from
// the path.
type intentBody struct {
	Action           string          `json:"action"`
	Destination      string          `json:"destination"`
	Payload          json.RawMessage `json:"payload"`
	Version          int64           `json:"version"`
	Owner            string          `json:"owner"`
	SourceEvent      string          `json:"source_event"`
	RequiresApproval bool            `json:"requires_approval"`
	SensitiveFields  []string        `json:"sensitive_fields"`
}

func (b intentBody) intent(key string) opledger.Intent {
	return opledger.Intent{Key: key, Action: b.Action, Destination: b.Destination, Payload: b.Payload,
		Version: b.Version, Owner: b.Owner, SourceEvent: b.SourceEvent, RequiresApproval: b.RequiresApproval,
		SensitiveFields: b.SensitiveFields}
}

func (s *server) putOperation(w http.ResponseWriter, r *http.Request) {
	var body intentBody
	l, ok := s.begin(w, r, &body)
	if !ok {
		return
	}
	op, created, err := l.Record(r.Context(), body.intent(r.PathValue("key")))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.noteUnserved(r, op.Destination)
	}
	s.writeJSON(w, r, status, op)
}

// operationDetail is GET /v1/operations/{key}: the operation with its
// attempts and timeline.
type operationDetail struct {
	*opledger.Operation
	Attempts []*opledger.Attempt       `json:"attempts"`
	Timeline []*opledger.TimelineEntry `json:"timeline"`
}

// MarshalJSON merges the operation's (masked) fields with the lists.
func (d operationDetail) MarshalJSON() ([]byte, error) {
	return opjson.WithFields(d.Operation, map[string]any{"attempts": d.Attempts, "timeline": d.Timeline})
}

func (s *server) getOperation(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok || !s.noQuery(w, r) {
		return
	}
	key := r.PathValue("key")
	op, err := l.Get(r.Context(), key)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	d := operationDetail{Operation: op, Attempts: []*opledger.Attempt{}, Timeline: []*opledger.TimelineEntry{}}
	if a, err := l.Attempts(r.Context(), key); err != nil {
		s.writeError(w, r, err)
		return
	} else if a != nil {
		d.Attempts = op.MaskedAttempts(a)
	}
	if tl, err := l.Timeline(r.Context(), key); err != nil {
		s.writeError(w, r, err)
		return
	} else if tl != nil {
		d.Timeline = tl
	}
	s.writeJSON(w, r, http.StatusOK, d)
}

// listParams are the query parameters of GET /v1/operations.
var listParams = []string{"state", "owner", "destination", "duplicate_effects", "except_cancelled", "order", "limit", "cursor"}

func (s *server) listOperations(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok {
		return
	}
	q, err := queryParams(r, listParams...)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	opts := opledger.ListOptions{Owner: q["owner"], Destination: q["destination"], Cursor: q["cursor"],
		Order: opledger.Order(q["order"])}
	// state=held, (a list built from a variable left unset) would list
	// fewer states than meant, and state=, every state.
	if opts.States, err = opledger.ParseStates(q["state"]); err != nil {
		writeProblem(w, r, http.StatusBadRequest, "invalid_input", "state: "+opledger.InvalidInputDetail(err), nil)
		return
	}
	if opts.Limit, err = limitParam(q["limit"], opledger.MaxListLimit); err != nil {
		s.writeError(w, r, err)
		return
	}
	if opts.DuplicateEffects, err = boolParam("duplicate_effects", q["duplicate_effects"]); err != nil {
		s.writeError(w, r, err)
		return
	}
	if opts.ExceptCancelled, err = boolParam("except_cancelled", q["except_cancelled"]); err != nil {
		s.writeError(w, r, err)
		return
	}
	page, err := l.List(r.Context(), opts)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// limitParam reads a list's limit parameter, from 1 to max: 0 (the
// default page) when it is absent.
func limitParam(v string, max int) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, &decodeError{http.StatusBadRequest, "invalid_input",
			fmt.Sprintf("limit takes a whole number from 1 to %d (got %.20q)", max, v)}
	}
	return n, nil
}

// boolParam reads a true/false query parameter: false when it is absent.
func boolParam(name, v string) (bool, error) {
	switch v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, &decodeError{http.StatusBadRequest, "invalid_input", fmt.Sprintf("%s must be true or false, not %.20q", name, v)}
}

type claimBody struct {
	Worker       string      `json:"worker"`
	LeaseSeconds float64     `json:"lease_seconds"`
	Intent       *intentBody `json:"intent"`
	Dispatch     bool        `json:"dispatch"`
}

// maxSeconds bounds every duration in seconds a body gives: a week, as
// opledger.MaxLease bounds a lease.
var maxSeconds = opledger.MaxLease.Seconds()

func seconds(v float64, field string) (time.Duration, error) {
	if v < 0 || v > maxSeconds {
		return 0, &decodeError{http.StatusBadRequest, "invalid_input", fmt.Sprintf("%s must be between 0 and %.0f", field, maxSeconds)}
	}
	return time.Duration(v * float64(time.Second)), nil
}

func (s *server) claim(w http.ResponseWriter, r *http.Request) {
	var body claimBody
	l, ok := s.begin(w, r, &body)
	if !ok {
		return
	}
	lease, err := seconds(body.LeaseSeconds, "lease_seconds")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	key := r.PathValue("key")
	opts := opledger.ClaimOptions{Worker: body.Worker, Lease: lease, Dispatch: body.Dispatch}
	if body.Intent != nil {
		in := body.Intent.intent(key)
		opts.Intent = &in
	}
	c, err := l.Claim(r.Context(), key, opts)
	var se *opledger.StateError
	if errors.As(err, &se) && se.State == opledger.StateSucceeded {
		// A repeat: the saved result, nothing to send.
		s.writeRepeatable(w, r, http.StatusOK, struct {
			Replayed  bool                `json:"replayed"`
			Operation *opledger.Operation `json:"operation"`
		}{true, se.Operation}, true)
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The claimant is about to send the payload: it gets the real one,
	// whoever recorded the operation (an event's rule, a workflow).
	answer := *c
	answer.Operation = c.Operation.ForClaimant()
	s.writeJSON(w, r, http.StatusCreated, &answer)
}

// attemptBody is what every request about an attempt (dispatch, lease,
// outcome) carries, and the start of their bodies: the fencing token its
// claim returned.
type attemptBody struct {
	FencingToken *int64 `json:"fencing_token"`
}

func (b *attemptBody) attempt() *attemptBody { return b }

// beginAttempt is begin for a request about an attempt, which must carry
// its fencing token: without one it cannot say which claim made it.
func (s *server) beginAttempt(w http.ResponseWriter, r *http.Request, body interface{ attempt() *attemptBody }) (*opledger.Ledger, int64, bool) {
	l, ok := s.begin(w, r, body)
	if !ok {
		return nil, 0, false
	}
	token := body.attempt().FencingToken
	if token == nil {
		s.writeError(w, r, &decodeError{http.StatusBadRequest, "invalid_input", "fencing_token is required: send the token the claim returned"})
		return nil, 0, false
	}
	return l, *token, true
}

func (s *server) dispatch(w http.ResponseWriter, r *http.Request) {
	var body attemptBody
	l, token, ok := s.beginAttempt(w, r, &body)
	if !ok {
		return
	}
	op, err := l.Dispatch(r.Context(), r.PathValue("key"), r.PathValue("id"), token)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, op)
}

type releaseBody struct {
	attemptBody
	Reason string `json:"reason"`
}

// release gives back a claim that was never dispatched
// (opledger.Ledger.Release): the operation is due again at once.
func (s *server) release(w http.ResponseWriter, r *http.Request) {
	var body releaseBody
	l, token, ok := s.beginAttempt(w, r, &body)
	if !ok {
		return
	}
	op, err := l.Release(r.Context(), r.PathValue("key"), r.PathValue("id"), token, body.Reason)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, op)
}

type extendLeaseBody struct {
	attemptBody
	LeaseSeconds float64 `json:"lease_seconds"`
}

func (s *server) extendLease(w http.ResponseWriter, r *http.Request) {
	var body extendLeaseBody
	l, token, ok := s.beginAttempt(w, r, &body)
	if !ok {
		return
	}
	// Required here, unlike a claim's, where 0 is the default: one
	// message for every value refused.
	lease, err := seconds(body.LeaseSeconds, "lease_seconds")
	if err != nil || lease <= 0 {
		err = &decodeError{http.StatusBadRequest, "invalid_input", fmt.Sprintf("lease_seconds is required, more than 0 and at most %.0f: how long from now the lease should hold", maxSeconds)}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	op, err := l.ExtendLease(r.Context(), r.PathValue("key"), r.PathValue("id"), token, lease)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, op)
}

type outcomeBody struct {
	attemptBody
	Outcome           string          `json:"outcome"`
	DestinationRef    string          `json:"destination_ref"`
	Response          json.RawMessage `json:"response"`
	Error             string          `json:"error"`
	RetryAfterSeconds float64         `json:"retry_after_seconds"`
}

// retryAfter reads a report's retry_after_seconds: not negative, and
// bounded by opledger.MaxRetryAfter rather than refused, since a report refused
// for it would be lost, and its dispatched attempt taken for uncertain
// when its lease ran out, though the destination did not act.
func retryAfter(v float64) (time.Duration, error) {
	if v < 0 {
		return 0, &decodeError{http.StatusBadRequest, "invalid_input", "retry_after_seconds must not be negative"}
	}
	if v >= opledger.MaxRetryAfter.Seconds() {
		return opledger.MaxRetryAfter, nil
	}
	return time.Duration(v * float64(time.Second)), nil
}

// outcome answers 200 with the operation's new state. A stale report (from
// an attempt that no longer holds the operation, with its own token) is
// recorded as evidence and also answers 200, with "stale_report": true and
// the operation as it is; a token that is not the attempt's is a 409.
func (s *server) outcome(w http.ResponseWriter, r *http.Request) {
	var body outcomeBody
	l, token, ok := s.beginAttempt(w, r, &body)
	if !ok {
		return
	}
	after, err := retryAfter(body.RetryAfterSeconds)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	op, err := l.Report(r.Context(), r.PathValue("key"), r.PathValue("id"), token, opledger.Report{
		Outcome: opledger.Outcome(body.Outcome), DestinationRef: body.DestinationRef, Response: body.Response,
		Error: body.Error, RetryAfter: after})
	var stale *opledger.StaleError
	if errors.As(err, &stale) && stale.Recorded {
		s.advanceWorkflow(r, l, stale.Operation) // a late success may have settled it
		s.writeMerged(w, r, http.StatusOK, stale.Operation, staleReport)
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.advanceWorkflow(r, l, op)
	s.writeMerged(w, r, http.StatusOK, op, currentReport)
}

// advanceWorkflow moves on the workflow whose step op is once op has
// succeeded, as the executor and the reconciler do after a success of
// theirs: the next step is recorded before the answer, not at the next
// sweep. A failure is logged, not answered: the success is recorded, and
// the workflow sweep (Ledger.Maintain) moves the workflow on later.
func (s *server) advanceWorkflow(r *http.Request, l *opledger.Ledger, op *opledger.Operation) {
	if op == nil || op.State != opledger.StateSucceeded {
		return
	}
	if _, _, step := opledger.SplitWorkflowStepKey(op.Key); !step {
		return // no workflow's step (AdvanceWorkflowOf would do nothing): no logger to make
	}
	advance.WorkflowOf(r.Context(), l, op.Key, s.log.With("request_id", requestID(r.Context())))
}

// The members an outcome's answer adds, made once (writeMerged reads them).
var (
	staleReport   = map[string]any{"stale_report": true}
	currentReport = map[string]any{"stale_report": false}
)

// writeMerged answers status with op and the extra members beside its
// own (writeEncoded).
func (s *server) writeMerged(w http.ResponseWriter, r *http.Request, status int, op *opledger.Operation, extra map[string]any) {
	b, err := opjson.WithFields(op, extra)
	s.writeEncoded(w, r, status, b, err)
}

type reconcileBody struct {
	// Found is required of a lookup: a finding that leaves it out says
	// nothing, and read as false it would hold the operation for a
	// person. A protection (ProtectionRetentionSeconds) may leave it out.
	Found                      *bool   `json:"found"`
	Matches                    bool    `json:"matches"`
	DestinationRef             string  `json:"destination_ref"`
	Authoritative              bool    `json:"authoritative"`
	Evidence                   string  `json:"evidence"`
	VisibilityDelaySeconds     float64 `json:"visibility_delay_seconds"`
	ProtectionRetentionSeconds float64 `json:"protection_retention_seconds"`
	// AttemptCount and LookedAt tie the finding to what the lookup saw
	// (opledger.Finding).
	AttemptCount int        `json:"attempt_count"`
	LookedAt     *time.Time `json:"looked_at"`
}

// maxProtectionRetentionSeconds is the longest protection a finding may
// claim: 400 days, past any destination's documented retention of keys.
const maxProtectionRetentionSeconds = 400 * 24 * 3600

func (s *server) reconcile(w http.ResponseWriter, r *http.Request) {
	var body reconcileBody
	l, ok := s.begin(w, r, &body)
	if !ok {
		return
	}
	delay, err := seconds(body.VisibilityDelaySeconds, "visibility_delay_seconds")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if body.ProtectionRetentionSeconds < 0 || body.ProtectionRetentionSeconds > maxProtectionRetentionSeconds {
		s.writeError(w, r, &decodeError{http.StatusBadRequest, "invalid_input",
			fmt.Sprintf("protection_retention_seconds must be between 0 and %d (400 days)", maxProtectionRetentionSeconds)})
		return
	}
	if body.AttemptCount < 0 {
		s.writeError(w, r, &decodeError{http.StatusBadRequest, "invalid_input", "attempt_count must not be negative"})
		return
	}
	if body.Found == nil && body.Authoritative {
		// Taken for an authoritative "found nothing", it would prove
		// absence and release a plain resend, protection or not.
		s.writeError(w, r, &decodeError{http.StatusBadRequest, "invalid_input",
			"authoritative is a lookup's: send found with it (false when the lookup found none)"})
		return
	}
	if body.Found == nil && body.ProtectionRetentionSeconds == 0 {
		s.writeError(w, r, &decodeError{http.StatusBadRequest, "invalid_input",
			"found is required: true when the destination has a record of the effect, false when the lookup found none " +
				"(a protection, protection_retention_seconds, may leave it out)"})
		return
	}
	f := opledger.Finding{Found: body.Found != nil && *body.Found, Matches: body.Matches,
		DestinationRef: body.DestinationRef, Authoritative: body.Authoritative, Evidence: body.Evidence,
		VisibilityDelay: delay, ProtectionRetention: time.Duration(body.ProtectionRetentionSeconds * float64(time.Second)),
		AttemptCount: body.AttemptCount}
	if body.LookedAt != nil {
		f.LookedAt = *body.LookedAt
	}
	op, decided, err := l.Reconcile(r.Context(), r.PathValue("key"), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.advanceWorkflow(r, l, op)
	// decided beside the operation's fields: whether the finding was the
	// decision, or only recorded (Ledger.Reconcile).
	s.writeMerged(w, r, http.StatusOK, op, map[string]any{"decided": decided})
}

func (s *server) approve(w http.ResponseWriter, r *http.Request) {
	var body opledger.Approval
	l, ok := s.begin(w, r, &body)
	if !ok {
		return
	}
	op, replayed, err := l.Approve(r.Context(), r.PathValue("key"), body)
	if !s.approved(w, r, err) {
		return
	}
	s.writeRepeatable(w, r, http.StatusOK, op, replayed)
}

// approved answers an approval's error, and reports whether the answer
// is still to be written.
func (s *server) approved(w http.ResponseWriter, r *http.Request, err error) bool {
	var me *opledger.MismatchError
	switch {
	case errors.As(err, &me):
		// Approving content the operation does not have is a conflict with
		// its current content, not a new intent.
		writeProblem(w, r, http.StatusConflict, "fingerprint_mismatch", err.Error(), mismatchProblem(me))
		return false
	case err != nil:
		s.writeError(w, r, err)
		return false
	}
	return true
}

func (s *server) revise(w http.ResponseWriter, r *http.Request) {
	var body opledger.Revision
	l, ok := s.begin(w, r, &body)
	if !ok {
		return
	}
	op, replayed, err := l.Revise(r.Context(), r.PathValue("key"), body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeRepeatable(w, r, http.StatusOK, op, replayed)
}

func (s *server) resolve(w http.ResponseWriter, r *http.Request) {
	var body opledger.Decision
	l, ok := s.begin(w, r, &body)
	if !ok {
		return
	}
	op, replayed, err := l.Resolve(r.Context(), r.PathValue("key"), body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !replayed {
		s.advanceWorkflow(r, l, op)
	}
	s.writeRepeatable(w, r, http.StatusOK, op, replayed)
}

func (s *server) stats(w http.ResponseWriter, r *http.Request) {
	l, ok := s.begin(w, r, nil)
	if !ok || !s.noQuery(w, r) {
		return
	}
	st, err := l.Stats(r.Context(), false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ev, err := l.EventStats(r.Context(), false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, statsBody{Stats: st, Events: ev})
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the store answers and accepts a write (see
// readiness), 503 otherwise, saying which: unavailable when it does not
// answer or refuses writes, schema_newer once a newer release has
// migrated it (every write of this server is refused from then on).
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	err := s.ledger.Ping(ctx)
	answers := err == nil
	if answers {
		err = s.ready.check(r.Context(), s.ledger.Ready)
		if r.Context().Err() != nil {
			return // the caller has gone: nobody to answer, nothing to log
		}
	}
	switch {
	case err == nil:
		s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ready", "store": s.ledger.StoreName()})
	case errors.Is(err, opledger.ErrSchemaNewer):
		s.log.ErrorContext(r.Context(), "readiness: a newer release has migrated the store; this server's writes are refused", "error", err)
		writeProblem(w, r, http.StatusServiceUnavailable, "schema_newer", err.Error(), nil)
	case !answers || errors.Is(err, opledger.ErrStoreUnavailable):
		// The ping answered but the probe could not connect: the
		// server went away in between, or takes no new connection.
		s.log.WarnContext(r.Context(), "readiness: store unreachable", "error", err)
		writeProblem(w, r, http.StatusServiceUnavailable, "unavailable", "the store does not answer", nil)
	default:
		s.log.WarnContext(r.Context(), "readiness: the store refuses writes", "error", err)
		detail := "the store answers but does not accept writes (a read-only file system or database, or an I/O error: see the server's log)"
		switch {
		case errors.Is(err, opledger.ErrStoreFull):
			detail = "the store answers but its disk is full"
		case errors.Is(err, opledger.ErrStoreBusy):
			detail = "the store answers but another process holds its write lock"
		case sqlState(err) == "42501": // insufficient_privilege
			detail = "the store answers but refuses this server's writes (permission denied): its database role lacks a privilege (docs/configuration.md, PostgreSQL roles; the server's log names it)"
		case errors.Is(err, errProbeTimeout):
			// On SQLite the usual cause: the busy timeout (10 s by
			// default) is longer than the probe's wait.
			detail = "the store answers but a write did not commit within 5 s (another process holding its write lock, or a commit that hangs)"
		}
		writeProblem(w, r, http.StatusServiceUnavailable, "unavailable", detail, nil)
	}
}

// sqlState is the SQLSTATE code of a PostgreSQL error in err's chain
// (the driver's errors have a SQLState method), "" when there is none.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// readyProbeEvery is how often GET /readyz writes to the store at most:
// requests within it share the last probe's result.
const readyProbeEvery = time.Second

// readiness shares the write probes of GET /readyz (Ledger.Ready, a
// durable commit; /readyz needs no token): a request runs a probe only
// when the last one started more than readyProbeEvery ago, and requests
// arriving while one runs wait for it and take its result, for
// readyProbeTimeout at most. One probe runs at a time. A store whose
// commit does not return (a synchronous standby gone, a SQLite write lock
// held until the busy timeout) is not ready, and no request waits on it
// past the timeout. A probe that outlived the timeout says how the store
// was when it started: its result goes to the requests that waited for
// it, and the next request runs a probe of its own.
type readiness struct {
	every   time.Duration // readyProbeEvery; 0 in a zero readiness means the same
	timeout time.Duration // readyProbeTimeout; 0 means the same
	mu      sync.Mutex
	// at is when the last probe that ended within the timeout started;
	// zero: none yet, or the last one outlived the timeout (not shared).
	at  time.Time
	err error
	// running is closed when the probe under way ends; nil when none is.
	running chan struct{}
}

// readyProbeTimeout bounds how long a request of GET /readyz waits for a
// probe, and the probe itself.
const readyProbeTimeout = 5 * time.Second

// errProbeTimeout is check's answer when the probe has not ended within
// the timeout.
var errProbeTimeout = errors.New("the readiness write did not commit in time")

// check returns the result of a probe started at most readyProbeEvery
// ago that ended within readyProbeTimeout, starting probe if there is
// none and none is running, and waiting for
// the running one at most readyProbeTimeout (errProbeTimeout). The probe
// is not cut short by the request that started it going away (others may
// be waiting for it); its context ends after readyProbeTimeout, which a
// store may not heed at once (a PostgreSQL COMMIT, once sent, is waited
// for), so the next request waits for the same probe rather than start
// another.
func (rd *readiness) check(ctx context.Context, probe func(context.Context) error) error {
	every, timeout := cmp.Or(rd.every, readyProbeEvery), cmp.Or(rd.timeout, readyProbeTimeout)
	rd.mu.Lock()
	if rd.running == nil && !rd.at.IsZero() && time.Since(rd.at) < every {
		defer rd.mu.Unlock()
		return rd.err
	}
	done := rd.running
	if done == nil {
		done = make(chan struct{})
		rd.running = done
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		go func() {
			defer cancel()
			started := time.Now()
			err := probe(pctx)
			if err != nil && pctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
				// The probe's own deadline, heeded once the store let it
				// go on (a SQLite lock freed): it waited, nothing refused it.
				err = fmt.Errorf("%w: %w", errProbeTimeout, err)
			}
			rd.mu.Lock()
			rd.err, rd.at, rd.running = err, started, nil
			if time.Since(started) >= timeout {
				rd.at = time.Time{} // about the store as it was, not as it is
			}
			rd.mu.Unlock()
			close(done)
		}()
	}
	rd.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
		rd.mu.Lock()
		defer rd.mu.Unlock()
		return rd.err
	case <-timer.C:
		return errProbeTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *server) serveMetrics(w http.ResponseWriter, r *http.Request) { s.metrics.ServeHTTP(w, r) }

func (s *server) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}

// statsBody is GET /v1/stats: the operation figures and the event figures.
type statsBody struct {
	*opledger.Stats
	Events *opledger.EventStats `json:"events"`
}

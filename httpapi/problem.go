package httpapi

import (
	"cmp"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/redact"
)

// ProblemTypeBase prefixes every problem type; the suffix is stable
// (fingerprint_mismatch, in_progress, ...) and is what clients match on.
const ProblemTypeBase = "https://opledger.dev/problems/"

// Problem is an RFC 9457 problem detail.
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	State     opledger.State `json:"state,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	// Operation is the operation as it is now, where the refusal concerns one.
	Operation *opledger.Operation `json:"operation,omitempty"`
	// AttemptToken is, in a stale_fencing_token problem, the fencing token
	// the attempt named in the request was issued (opledger.StaleError's
	// AttemptToken); absent where the ledger does not know it.
	AttemptToken int64 `json:"attempt_token,omitempty"`
	// Mismatch is, in a fingerprint_mismatch problem, what the request
	// was refused against (opledger.MismatchError's fields).
	Mismatch *Mismatch `json:"mismatch,omitempty"`
}

// mismatchProblem is the problem of a fingerprint_mismatch: its state and
// mismatch, from the library's error.
func mismatchProblem(me *opledger.MismatchError) *Problem {
	return &Problem{State: me.State, Mismatch: &Mismatch{Key: me.Key, StoredFingerprint: me.Stored, GivenFingerprint: me.Given,
		Tombstoned: me.Tombstoned, StoredVersion: me.StoredVersion, GivenVersion: me.GivenVersion, RevisedTo: me.RevisedTo}}
}

// Mismatch is what a fingerprint_mismatch problem was refused against:
// the fields of the library's *opledger.MismatchError but its state,
// which is the problem's.
type Mismatch struct {
	// Key is the key of the operation, or of the workflow, on record.
	Key string `json:"key"`
	// StoredFingerprint is the fingerprint on record, GivenFingerprint
	// the refused request's.
	StoredFingerprint string `json:"stored_fingerprint"`
	GivenFingerprint  string `json:"given_fingerprint"`
	// Tombstoned tells that the record is the tombstone of a compacted
	// operation.
	Tombstoned bool `json:"tombstoned,omitempty"`
	// StoredVersion and GivenVersion are an approval's: the version on
	// record and the one approved.
	StoredVersion int64 `json:"stored_version,omitempty"`
	GivenVersion  int64 `json:"given_version,omitempty"`
	// RevisedTo is the version the operation was revised to, when an
	// intent met it at a higher version than the intent's.
	RevisedTo int64 `json:"revised_to,omitempty"`
}

var titles = map[string]string{
	"fingerprint_mismatch":   "Same key, different content",
	"in_progress":            "Operation is in progress",
	"not_due":                "Operation is not due yet",
	"invalid_state":          "Not allowed in the operation's current state",
	"stale_fencing_token":    "Stale fencing token",
	"stale_finding":          "The operation has had another attempt since the lookup",
	"stale_decision":         "The operation has changed since it was seen",
	"not_found":              "Not found",
	"invalid_key":            "Invalid key",
	"invalid_input":          "Invalid input",
	"invalid_json":           "Invalid JSON",
	"reason_required":        "A reason is required",
	"unauthorized":           "Missing or unknown bearer token",
	"forbidden":              "The token's access does not allow this",
	"invalid_signature":      "Missing or invalid webhook signature",
	"payload_too_large":      "Request body too large",
	"method_not_allowed":     "Method not allowed",
	"unsupported_media":      "Unsupported media type",
	"internal":               "Internal error",
	"unavailable":            "Store unavailable",
	"store_busy":             "The ledger is busy with another process's write",
	"store_full":             "The ledger's disk is full",
	"schema_newer":           "A newer release has migrated the ledger",
	"mapping_failed":         "The event's rule could not map it",
	"destination_not_served": "The destination does not serve this tenant",
	// Kinds of the Idempotency-Key proxy (package proxy).
	"idempotency_key_required": "Idempotency-Key header required",
	"invalid_idempotency_key":  "Invalid Idempotency-Key header",
	"upstream_response_lost":   "The upstream's response was lost",
	"upstream_unreachable":     "The upstream could not be reached",
	"no_upstream":              "No upstream for this path",
	"upstream_conflict":        "The key was recorded for another upstream",
	"request_timeout":          "The request body did not arrive in time",
	"key_scope_changed":        "The upstream's key scope differs from the one its operations were recorded under",
}

// WriteProblem writes an RFC 9457 problem response of the stable kind
// (the suffix of ProblemTypeBase, e.g. "fingerprint_mismatch") with its
// title. p may carry the state and operation; nil means none. Other
// handlers of the project (package proxy) use it so that every surface
// answers with the same problem types.
func WriteProblem(w http.ResponseWriter, r *http.Request, status int, kind, detail string, p *Problem) {
	writeProblem(w, r, status, kind, detail, p)
}

// writeProblem writes a problem response.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, kind, detail string, p *Problem) {
	if p == nil {
		p = &Problem{}
	}
	p.Type = ProblemTypeBase + kind
	p.Title = titles[kind]
	p.Status = status
	p.Detail = detail
	p.Instance = instance(r)
	p.RequestID = requestID(r.Context())
	if n := notes(r.Context()); n != nil {
		n.problem = kind
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// instance is a problem's instance: the request's path, unless the route
// takes from it a value (a key, an event id, a step) that is not a valid
// key. Such a value was refused (invalid_key, invalid_input), and a
// refusal never repeats it (see opledger.KeyError): it may be personal
// data, such as an e-mail address. Such a problem has no instance. A
// request no route takes (404, 405) has its path as instance when
// shownPath shows it.
func instance(r *http.Request) string {
	if r.Pattern == "" || r.Pattern == "/" {
		return shownPath(r)
	}
	for rest := r.Pattern; ; {
		_, after, ok := strings.Cut(rest, "{")
		if !ok {
			return r.URL.Path
		}
		name, tail, _ := strings.Cut(after, "}")
		if opledger.ValidateKey(r.PathValue(strings.TrimSuffix(name, "..."))) != nil {
			return ""
		}
		rest = tail
	}
}

// shownPath is the path of a request no route takes, to be repeated in
// its refusal: "" when a segment of it is not in the key syntax, since
// that segment may be a key refused for holding personal data (an
// e-mail address), and a refusal never repeats such a value.
func shownPath(r *http.Request) string {
	for seg := range strings.SplitSeq(r.URL.Path, "/") {
		if seg != "" && opledger.ValidateKey(seg) != nil {
			return ""
		}
	}
	return r.URL.Path
}

// StoreBusyRetryAfter is the Retry-After of a store_busy problem, in
// seconds: another process's write lock is usually gone by then. The
// proxy answers the same.
const StoreBusyRetryAfter = "1"

// StoreUnavailableRetryAfter is the Retry-After of an unavailable problem,
// in seconds: a database restarting or failing over takes a few. The
// proxy answers the same.
const StoreUnavailableRetryAfter = "5"

// RetryAfterSeconds is a Retry-After for a request refused until at: the
// whole seconds from now to at, rounded up (a caller that comes back
// then finds it due, not half a second early), at least 1.
func RetryAfterSeconds(now, at time.Time) int {
	return max(1, int(math.Ceil(at.Sub(now).Seconds())))
}

// StatusCallerGone is the status of the request log line of a request
// whose caller went away before its answer (nginx's 499, "client closed
// request"); no caller sees it.
const StatusCallerGone = 499

// writeError maps a ledger error to its status and problem type. Errors it
// does not know are 500s, logged with the request id and never shown.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		de       *decodeError
		se       *opledger.StateError
		me       *opledger.MismatchError
		stale    *opledger.StaleError
		p        = &Problem{}
		status   int
		kind     string
		showText = true
		// text, when set, is shown instead of err's: the store's refusals
		// (store_busy, store_full) end with the driver's words for them
		// (SQLITE_BUSY, a SQLSTATE, the statement it stopped at, a file
		// of the database server's), which the log keeps, under the
		// request id, and the caller cannot act on.
		text string
	)
	if gone := r.Context().Err(); gone != nil && errors.Is(err, gone) {
		// The caller went away (a request's context ends so, or when its
		// handler returns) while the ledger worked for it: nobody reads an
		// answer, and nothing failed that the operator could mend. What
		// the request did is what the ledger recorded; the caller's
		// repeat of it finds out. The request line says 499, as proxies
		// log a request whose client closed it.
		s.log.InfoContext(r.Context(), "request ended: the caller went away before its answer",
			"request_id", requestID(r.Context()), "method", r.Method, "route", r.Pattern)
		w.WriteHeader(StatusCallerGone)
		return
	}
	switch {
	case errors.As(err, &de):
		status, kind = de.status, de.kind
		if status == http.StatusUnsupportedMediaType {
			// The content codings a body may be sent with (RFC 9110,
			// section 12.5.3): none but identity (contentCoding).
			w.Header().Set("Accept-Encoding", "identity")
		}
	case errors.As(err, &me):
		status, kind = http.StatusUnprocessableEntity, "fingerprint_mismatch"
		p = mismatchProblem(me)
	case errors.As(err, &stale):
		status, kind = http.StatusConflict, "stale_fencing_token"
		p.AttemptToken = stale.AttemptToken
	case errors.As(err, &se):
		status, kind = http.StatusConflict, "invalid_state"
		switch {
		case errors.Is(err, opledger.ErrInProgress):
			kind = "in_progress"
		case errors.Is(err, opledger.ErrNotDue):
			kind = "not_due"
			if op := se.Operation; op != nil && op.NotBefore != nil {
				// When it is due, by the store's clock, which decides.
				if now, err := s.ledger.Now(r.Context()); err == nil {
					w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds(now, *op.NotBefore)))
				}
			}
		}
	case errors.Is(err, opledger.ErrAlreadyDispatched):
		// Its call may have reached the destination: only its outcome
		// (or its lease's end) settles it.
		status, kind = http.StatusConflict, "invalid_state"
	case errors.Is(err, opledger.ErrStaleFinding):
		status, kind = http.StatusConflict, "stale_finding"
	case errors.Is(err, opledger.ErrStaleDecision):
		status, kind = http.StatusConflict, "stale_decision"
	case errors.Is(err, opledger.ErrInvalidState):
		// A refusal that carries no operation (a workflow step not
		// recorded yet).
		status, kind = http.StatusConflict, "invalid_state"
	case errors.Is(err, opledger.ErrNotFound):
		status, kind = http.StatusNotFound, "not_found"
	case errors.Is(err, opledger.ErrInvalidKey):
		status, kind = http.StatusBadRequest, "invalid_key"
	case errors.Is(err, opledger.ErrReasonRequired):
		status, kind = http.StatusBadRequest, "reason_required"
	case errors.Is(err, opledger.ErrDestinationNotServed):
		status, kind = http.StatusUnprocessableEntity, "destination_not_served"
	case errors.Is(err, opledger.ErrInvalidInput):
		status, kind = http.StatusBadRequest, "invalid_input"
	case errors.Is(err, opledger.ErrStoreBusy):
		// Another process held the store's lock past the wait: nothing
		// was recorded, and the request may be sent again.
		status, kind = http.StatusServiceUnavailable, "store_busy"
		w.Header().Set("Retry-After", StoreBusyRetryAfter)
		s.logUnavailable(r, kind, err)
		text = opledger.ErrStoreBusy.Error()
	case errors.Is(err, opledger.ErrStoreUnavailable):
		// No connection to the database could be made: nothing was sent
		// to it, so nothing was recorded, and the request may be sent
		// again once it answers (/readyz says when).
		status, kind = http.StatusServiceUnavailable, "unavailable"
		w.Header().Set("Retry-After", StoreUnavailableRetryAfter)
		s.logUnavailable(r, kind, err)
		text = opledger.ErrStoreUnavailable.Error()
	case errors.Is(err, opledger.ErrStoreFull):
		// Nothing was recorded; writes fail until the operator frees
		// space, so no Retry-After.
		status, kind = http.StatusServiceUnavailable, "store_full"
		s.logUnavailable(r, kind, err)
		text = opledger.ErrStoreFull.Error()
	case errors.Is(err, opledger.ErrSchemaNewer):
		// A newer release has migrated the store: nothing was recorded,
		// and this server records nothing more. The newer release's
		// servers take the request.
		status, kind = http.StatusServiceUnavailable, "schema_newer"
		s.logUnavailable(r, kind, err)
	default:
		status, kind, showText = http.StatusInternalServerError, "internal", false
		// The log names the route, not the path: the key in it (and an
		// error that repeats it) stays out, as keys may carry personal data.
		s.log.ErrorContext(r.Context(), "request failed", "request_id", requestID(r.Context()),
			"method", r.Method, "route", r.Pattern, "error", redact.Keys(r.PathValue("key"), err))
	}
	if op := opledger.OperationOf(err); op != nil {
		// A refusal about an operation carries it and its state.
		p.State, p.Operation = op.State, op
	}
	detail := "the request failed; the server log has the details under this request_id"
	if showText {
		detail = cmp.Or(text, err.Error())
	}
	writeProblem(w, r, status, kind, detail, p)
}

// logUnavailable tells the operator about a request refused because the
// store could not take it (store_busy, store_full, unavailable): something
// outside the server (another process's lock, the disk, the database
// server or the network to it) needs their attention.
func (s *server) logUnavailable(r *http.Request, kind string, err error) {
	s.log.WarnContext(r.Context(), "request refused: the store could not take it", "request_id", requestID(r.Context()),
		"method", r.Method, "route", r.Pattern, "problem", kind, "error", redact.Keys(r.PathValue("key"), err))
}

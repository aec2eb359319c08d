package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/opledger/opledger/httpapi"
)

// Served is the lab's three simulated destinations served over HTTP at
// one address, for trying opledger serve (or a program of yours) against
// destinations that misbehave on demand: the CRM under /crm/, the e-mail
// provider under /email/ and the payment provider under /payment/, each
// taking POST /records as documented in docs/lab.md, with a small control
// API beside it:
//
//	POST /{name}/faults   ["lost_response", "429"]   the next calls get these faults, one each: {"queued": 2}
//	                                                 (lookup_error: the next lookup, at the CRM only)
//	GET  /{name}/counters                            {"attempts": …, "effects": …, "lookups": …}
//
// DestinationsYAML writes the destinations file that sends to them.
type Served struct {
	CRM     *CRM
	Email   *Email
	Payment *Payment
}

// NewServed returns the three destinations on the real clock. The CRM's
// new records are visible to lookups at once; the payment provider keeps
// its idempotency keys 24 hours.
func NewServed() *Served {
	return &Served{CRM: NewCRM(CRMOptions{}), Email: NewEmail(EmailOptions{}), Payment: NewPayment(PaymentOptions{})}
}

// injectable is what the control API needs of a destination.
type injectable interface {
	Name() string
	Handler() http.Handler
	Inject(faults ...Fault) error
	Counters() Counters
}

// maxFaultsBytes bounds a request body of POST /{name}/faults.
const maxFaultsBytes = 1 << 16

// Handler serves the destinations and their control API. The control
// API's refusals (a body that is not a list of fault names, an unknown
// fault, a lookup fault for a destination without lookups, a body too
// large, a method a control route does not take, a path
// under no destination) are RFC 9457 problems, as on opledger's own HTTP
// API; the destinations' own routes answer as the simulated services do.
func (s *Served) Handler() http.Handler {
	mux := http.NewServeMux()
	var prefixes []string
	for _, d := range []injectable{s.CRM, s.Email, s.Payment} {
		prefix := "/" + d.Name()
		prefixes = append(prefixes, prefix+"/")
		mux.Handle(prefix+"/", http.StripPrefix(prefix, d.Handler()))
		mux.HandleFunc("POST "+prefix+"/faults", func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFaultsBytes))
			if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
				httpapi.WriteProblem(w, r, http.StatusRequestEntityTooLarge, "payload_too_large",
					fmt.Sprintf("the body is larger than %d bytes", maxFaultsBytes), nil)
				return
			}
			// One JSON list, nothing after it: ["429"] ["validation"]
			// would otherwise queue the first list alone, and null none.
			var names []string
			if err != nil || json.Unmarshal(body, &names) != nil || names == nil {
				httpapi.WriteProblem(w, r, http.StatusBadRequest, "invalid_json",
					`the body is a JSON list of faults, e.g. ["lost_response"]; faults: `+joinNames(Faults), nil)
				return
			}
			faults := make([]Fault, 0, len(names))
			for _, n := range names {
				f, err := ParseFault(n)
				if err != nil {
					httpapi.WriteProblem(w, r, http.StatusBadRequest, "invalid_input", err.Error(), nil)
					return
				}
				faults = append(faults, f)
			}
			// Inject refuses a lookup fault where nothing looks up, and
			// then queues none.
			if err := d.Inject(faults...); err != nil {
				httpapi.WriteProblem(w, r, http.StatusBadRequest, "invalid_input", err.Error(), nil)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]int{"queued": len(faults)})
		})
		mux.HandleFunc("GET "+prefix+"/counters", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(d.Counters())
		})
		// The control routes' other methods would otherwise reach the
		// destination, which knows no such route.
		mux.HandleFunc(prefix+"/faults", methodNotAllowed(prefix+"/faults", http.MethodPost))
		mux.HandleFunc(prefix+"/counters", methodNotAllowed(prefix+"/counters", http.MethodGet, http.MethodHead))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The detail does not repeat the path, which may be anything;
		// the problem's instance has it when it is safe to show.
		httpapi.WriteProblem(w, r, http.StatusNotFound, "not_found",
			"no destination is served at this path; the destinations are under "+strings.Join(prefixes, ", "), nil)
	})
	return mux
}

// methodNotAllowed refuses a request to the control route path of a
// method other than allowed (the first is the one named).
func methodNotAllowed(path string, allowed ...string) http.HandlerFunc {
	allow := strings.Join(allowed, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		httpapi.WriteProblem(w, r, http.StatusMethodNotAllowed, "method_not_allowed", path+" takes "+allowed[0], nil)
	}
}

// DestinationsYAML is a destinations file (docs/destinations.md) for the
// destinations served at baseURL (http://HOST:PORT, no trailing slash),
// each declaring what it offers: the CRM an authoritative lookup and a
// unique reference, the payment provider an idempotency key, the e-mail
// provider nothing. The CRM's reference is built from the operation's
// tenant and key, as docs/destinations.md advises for a destination that
// several tenants send to: keys are unique only within a tenant.
func (s *Served) DestinationsYAML(baseURL string) string {
	const body = `'{"key": {{json .Key}}, "payload": {{json .Payload}}}'`
	const crmBody = `'{"key": {{json .Key}}, "external_ref": {{json (print .Tenant "|" .Key)}}, "payload": {{json .Payload}}}'`
	return fmt.Sprintf(`# The lab's simulated destinations, served by "opledger lab destinations"
# at %[1]s. Make the next call to one misbehave:
#   curl -X POST %[1]s/crm/faults -d '["lost_response"]'
# (faults: %[2]s), and read what it did:
#   curl %[1]s/crm/counters
destinations:
  # A CRM: a duplicate create answers 409, and a lookup finds a record by
  # its external reference, so an uncertain create is looked up, not
  # guessed. Keys are unique only within a tenant, so the reference is
  # the tenant and the key ("|" is in no tenant's name), and a record
  # found must carry both: one tenant's operation is never taken for
  # another's that has the same key.
  - name: crm
    url: %[1]s/crm/records
    body: %[5]s
    ref: /id
    unique_reference:
      conflict_status: 409
    lookup:
      url: '%[1]s/crm/records?external_ref={{urlquery .Tenant "|" .Key}}'
      results: /items
      authoritative: true
      visibility_delay: 1s
      match:
        - record: /external_ref
          value: '{{.Tenant}}|{{.Key}}'
        - record: /key
          value: '{{.Key}}'
  # An e-mail provider: no lookup, no idempotency key. An uncertain send
  # is held for its owner: a resend could be a second e-mail.
  - name: email
    url: %[1]s/email/records
    body: %[3]s
    ref: /id
  # A payment provider: an Idempotency-Key kept 24 hours, so an uncertain
  # charge is retried under the same key, and charged once.
  - name: payment
    url: %[1]s/payment/records
    body: %[3]s
    ref: /id
    idempotency:
      header: %[4]s
      retention: 24h
`, baseURL, joinNames(Faults), body, IdempotencyHeader, crmBody)
}

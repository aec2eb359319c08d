// Package destination describes the external systems operations act on
// (DESIGN.md section 6): what each one guarantees, how to call it, how to
// look an effect up there, and how to classify the result of an HTTP call
// as rejected, retryable or uncertain.
//
// # Capabilities
//
// A destination declares its guarantees in Capabilities, and the reconciler
// uses only what is declared:
//
//   - an idempotency key (header and retention): an uncertain attempt may be
//     retried, marked protected, while the retention window that opened at
//     the first dispatch is still open;
//   - a lookup by external reference (authoritative or not, with a
//     visibility delay): an uncertain operation becomes succeeded (the
//     record matches), held (other content) or pending (authoritatively
//     absent after the delay);
//   - a unique external reference (a conflict status): a duplicate create
//     fails at the destination; the conflict means "exists, look it up";
//   - none: every uncertain outcome is held for a person.
//
// # Implementations
//
// A Go program implements Destination (and Lookuper when it declares a
// lookup) directly. HTTP destinations are configured in YAML instead: see
// Load, HTTPConfig and docs/destinations.md. SendHTTP classifies any HTTP
// call for code that talks to a destination itself.
//
// Allowed imports: opledger, internal/marker, internal/configfile,
// internal/jsonnum, internal/readerr (an answer's read errors),
// internal/redact (the masking of secrets), the standard library, a YAML
// decoder.
package destination

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/marker"
)

// Destination is an external system that operations act on.
type Destination interface {
	// Name is the name operations carry in Intent.Destination.
	Name() string
	// Capabilities declares what the destination guarantees.
	Capabilities() Capabilities
	// Call performs the external call of one attempt with the operation's
	// stored, approved payload (call.Operation.Payload). A destination
	// with an idempotency key sends call.IdempotencyKey on every attempt.
	// Errors are classified with opledger.Rejected, opledger.Retryable and
	// opledger.Uncertain; an unclassified error is judged by
	// opledger.OutcomeOf (uncertain unless the connection never opened).
	// A Result without a Ref counts as uncertain. A Result with a Ref
	// and an error is the error's outcome: the executor keeps the Ref on
	// the attempt, as the destination's evidence of what it made for
	// whoever settles the operation, never as the operation's reference
	// (it confirms nothing). Error texts are shown to operators: they
	// must carry no secrets and no payload data.
	Call(ctx context.Context, call opledger.Call) (opledger.Result, error)
}

// Preparer is implemented by destinations that can tell, before anything
// is sent, that a call cannot be made (an HTTP destination whose
// templates need a field the payload lacks). The executor asks before it
// marks the dispatch, so that such an attempt ends rejected with nothing
// dispatched, instead of looking as if a call may have gone out.
type Preparer interface {
	// Prepare builds what Call would send for call, sends nothing, and
	// returns the error Call would return for content that cannot be
	// sent: opledger.Rejected, or opledger.Retryable for a condition that
	// may pass. Any other error counts as rejected: nothing was sent.
	Prepare(call opledger.Call) error
}

// Lookuper is implemented by destinations that declare Capabilities.Lookup.
type Lookuper interface {
	// Lookup searches the destination for the effect of op and compares
	// what it finds with op's payload. An error means the lookup itself
	// failed (the reconciler backs off and, after repeated failures, holds
	// the operation); "nothing found" is a LookupResult, not an error. An
	// error marked opledger.Retryable with a wait (the destination's
	// Retry-After on a throttled lookup) makes the reconciler wait at
	// least that long before it looks again. An
	// error matching ErrNoLookup says that no lookup can be made for op
	// (its content cannot fill the lookup's request), now or later: the
	// reconciler holds the operation at once, with the error as the
	// reason.
	//
	// refs are the references op's attempts reported without a success
	// (a Result's Ref returned with an error, or a late report's), newest
	// attempt first, each once; usually none. Each is the destination's
	// own word that it made a record, so a lookup can fetch it by the
	// reference rather than search for it. When there are any, a lookup
	// that finds nothing proves nothing, however authoritative: the
	// operation is then held rather than sent again (or, while the
	// destination's idempotency key is inside its retention, retried
	// under it, protected).
	Lookup(ctx context.Context, op *opledger.Operation, refs []string) (LookupResult, error)
}

// TenantLimiter is implemented by destinations that serve some tenants
// only (HTTPConfig.Tenants). An executor sends such a destination nothing
// for an operation of another tenant (the attempt ends rejected, nothing
// sent), and a reconciler makes no lookup at it for one. A ledger opened
// with Set.Tenants refuses to record such an operation at all.
type TenantLimiter interface {
	// Tenants returns the tenants whose operations may be sent to the
	// destination; nil means every tenant.
	Tenants() []string
}

// Serves reports whether d takes operations of tenant: every destination
// does, unless it is a TenantLimiter that does not list tenant.
func Serves(d Destination, tenant string) bool {
	l, ok := d.(TenantLimiter)
	if !ok {
		return true
	}
	tenants := l.Tenants()
	return tenants == nil || slices.Contains(tenants, tenant)
}

// RetryPolicyProvider is implemented by destinations with a retry policy
// of their own; the others use the ledger's default.
type RetryPolicyProvider interface {
	// RetryPolicy returns the destination's policy, or nil for the default.
	RetryPolicy() *opledger.RetryPolicy
}

// LookupResult is what a lookup found.
type LookupResult struct {
	// Found: the destination has a record for the operation.
	Found bool
	// Matches: the record has the intended content. Only meaningful with
	// Found.
	Matches bool
	// Ref is the found record's reference (required with Matches).
	Ref string
	// Evidence is a short, safe summary for the timeline: no secrets, no
	// payload values.
	Evidence string
}

// Capabilities are what a destination guarantees. The zero value declares
// nothing: every uncertain outcome is then held for a person.
type Capabilities struct {
	// IdempotencyKey, when set, says the destination deduplicates requests
	// carrying the same key for Retention after their first use.
	IdempotencyKey *IdempotencyKey
	// Lookup, when set, says the destination can be searched for an effect
	// by its external reference; the destination implements Lookuper.
	Lookup *Lookup
	// UniqueReference, when set, says a duplicate create is refused by the
	// destination with ConflictStatus.
	UniqueReference *UniqueReference
}

// IdempotencyKey declares a destination idempotency key.
type IdempotencyKey struct {
	// Header is the request header that carries the key, e.g.
	// "Idempotency-Key". Empty when the key travels in the body.
	Header string
	// Retention is how long the destination remembers a key after its
	// first use. A protected retry is only made inside this window,
	// counted from the operation's first dispatch. Must be positive.
	Retention time.Duration
}

// Lookup declares a lookup by external reference.
type Lookup struct {
	// Authoritative: "not found" proves the effect did not happen (once
	// VisibilityDelay has passed since the last call ended,
	// opledger.LastCallEnd). A lookup that is
	// not authoritative can confirm an effect but never its absence.
	Authoritative bool
	// VisibilityDelay is how long after a create the record may still be
	// missing from lookups (search indexes, replicas), counted from the
	// end of the last call. Zero declares a record visible as soon as the
	// call that made it ended; a destination that may go on with a
	// request after its caller stopped waiting (a timeout) should declare
	// at least as long as its calls may take, as an HTTP destination's
	// unset visibility_delay does (its timeout).
	VisibilityDelay time.Duration
}

// UniqueReference declares that the destination enforces a unique external
// reference: a second create with the same reference is refused.
type UniqueReference struct {
	// ConflictStatus is the HTTP status of that refusal, usually 409. A Go
	// destination that is not called over HTTP may leave it zero and
	// return an error matching ErrExists instead.
	ConflictStatus int
}

// None reports whether nothing is declared.
func (c Capabilities) None() bool {
	return c.IdempotencyKey == nil && c.Lookup == nil && c.UniqueReference == nil
}

// Validate checks the declared values.
func (c Capabilities) Validate() error {
	var errs []error
	if k := c.IdempotencyKey; k != nil && k.Retention <= 0 {
		errs = append(errs, errors.New("idempotency key retention must be positive"))
	}
	if l := c.Lookup; l != nil && l.VisibilityDelay < 0 {
		errs = append(errs, errors.New("lookup visibility delay must not be negative"))
	}
	if u := c.UniqueReference; u != nil && u.ConflictStatus != 0 {
		if u.ConflictStatus < 400 || u.ConflictStatus > 499 {
			errs = append(errs, fmt.Errorf("unique reference conflict status %d is not a 4xx status", u.ConflictStatus))
		} else if why := retryStatusConflict(u.ConflictStatus); why != "" {
			errs = append(errs, errors.New("unique reference conflict status "+why))
		}
	}
	return errors.Join(errs...)
}

// String describes the capabilities in a few words, for logs and evidence.
func (c Capabilities) String() string {
	var parts []string
	if k := c.IdempotencyKey; k != nil {
		parts = append(parts, "idempotency key kept "+k.Retention.String())
	}
	if l := c.Lookup; l != nil {
		s := "lookup"
		if l.Authoritative {
			s = "authoritative lookup"
		}
		if l.VisibilityDelay > 0 {
			s += " (visibility delay " + l.VisibilityDelay.String() + ")"
		}
		parts = append(parts, s)
	}
	if c.UniqueReference != nil {
		parts = append(parts, "unique external reference")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ErrExists is matched by the error of a call that the destination refused
// because the record already exists (a unique external reference
// conflict). Such a call is uncertain, not rejected: the existing record may
// be this operation's own effect, so the reconciler looks it up; and its
// absence from a lookup is then never taken as proof that nothing happened.
var ErrExists = marker.ErrExists

// ErrNoLookup is returned (wrapped) by a Lookuper that can make no lookup
// for an operation: its content cannot fill the lookup's request, so
// trying again fails the same way. The reconciler holds the operation at
// once instead of backing off (see Lookuper).
var ErrNoLookup = errors.New("no lookup can be made for this operation")

// Set is the destinations a process is configured with, by name.
type Set struct {
	byName map[string]Destination
	names  []string
}

// NewSet collects destinations. None may be nil, names must be unique,
// capabilities valid, and a destination that declares a lookup must
// implement Lookuper.
func NewSet(ds ...Destination) (*Set, error) {
	s := &Set{byName: make(map[string]Destination, len(ds))}
	for i, d := range ds {
		if d == nil {
			return nil, fmt.Errorf("destination %d of %d is nil", i+1, len(ds))
		}
		name := d.Name()
		if err := opledger.ValidateKey(name); err != nil {
			return nil, fmt.Errorf("destination name %q: %w", name, err)
		}
		if _, dup := s.byName[name]; dup {
			return nil, fmt.Errorf("destination %s is configured twice", name)
		}
		caps := d.Capabilities()
		if err := caps.Validate(); err != nil {
			return nil, fmt.Errorf("destination %s: %w", name, err)
		}
		if _, ok := d.(Lookuper); caps.Lookup != nil && !ok {
			return nil, fmt.Errorf("destination %s declares a lookup but has no Lookup method", name)
		}
		if p, ok := d.(RetryPolicyProvider); ok {
			if err := validatePolicy(p.RetryPolicy()); err != nil {
				return nil, fmt.Errorf("destination %s: %w", name, err)
			}
		}
		s.byName[name] = d
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	return s, nil
}

// Get returns the destination called name.
func (s *Set) Get(name string) (Destination, bool) {
	d, ok := s.byName[name]
	return d, ok
}

// Names lists the destination names, sorted.
func (s *Set) Names() []string { return append([]string(nil), s.names...) }

// Len is the number of destinations.
func (s *Set) Len() int { return len(s.names) }

// RetryPolicies returns the destinations' own retry policies by name, for
// opledger.Options.DestinationRetryPolicies. Destinations without one are
// absent and use the ledger's default.
func (s *Set) RetryPolicies() map[string]opledger.RetryPolicy {
	out := map[string]opledger.RetryPolicy{}
	for name, d := range s.byName {
		if p, ok := d.(RetryPolicyProvider); ok {
			if rp := p.RetryPolicy(); rp != nil {
				out[name] = *rp
			}
		}
	}
	return out
}

// Tenants returns, for opledger.Options.DestinationTenants, the tenants
// of each destination that serves some tenants only (a TenantLimiter
// with a list). Destinations that serve every tenant are absent.
func (s *Set) Tenants() map[string][]string {
	out := map[string][]string{}
	for name, d := range s.byName {
		if l, ok := d.(TenantLimiter); ok {
			if tenants := l.Tenants(); tenants != nil {
				out[name] = tenants
			}
		}
	}
	return out
}

// Close closes every destination that holds resources (an io.Closer), for
// example the idle connections of HTTP destinations.
func (s *Set) Close() error {
	var errs []error
	for _, name := range s.names {
		if c, ok := s.byName[name].(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close destination %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// validatePolicy mirrors the checks opledger.Open makes on a policy, so a
// bad one is reported with its destination's name.
func validatePolicy(p *opledger.RetryPolicy) error {
	if p == nil {
		return nil
	}
	if p.MaxAttempts < 1 {
		return errors.New("retry: max attempts must be at least 1")
	}
	if p.InitialDelay < 0 || p.MaxDelay < 0 || p.Deadline < 0 {
		return errors.New("retry: delays must not be negative")
	}
	if p.MaxDelay > 0 && p.InitialDelay > p.MaxDelay {
		return errors.New("retry: initial delay is above max delay")
	}
	return nil
}

package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// CRMOptions configure a CRM.
type CRMOptions struct {
	// Name of the destination. Default "crm".
	Name string
	// Now is the destination's clock. Default time.Now.
	Now func() time.Time
	// VisibilityDelay is how long a new record stays invisible to lookups.
	VisibilityDelay time.Duration
}

// CRM is a simulated destination with a unique external reference and an
// authoritative lookup by it. The reference is the payload's
// "external_ref" when it has one, otherwise the operation key. A second
// create with a known reference is refused with 409 Conflict, which
// destination.ClassifyStatus reads as "already exists" (uncertain,
// destination.ErrExists). A record is invisible to lookups for
// VisibilityDelay after its creation.
type CRM struct {
	base
	delay   time.Duration
	records map[string]*crmRecord // by external reference
}

// crmRecord is one record of the CRM.
type crmRecord struct {
	ID          string          `json:"id"`
	ExternalRef string          `json:"external_ref"`
	Key         string          `json:"key"`
	Payload     json.RawMessage `json:"payload"`
	// visibleAt is when lookups start to find the record.
	visibleAt time.Time
}

// NewCRM returns an empty CRM.
func NewCRM(o CRMOptions) *CRM {
	c := &CRM{base: newBase(o.Name, "crm", o.Now), delay: o.VisibilityDelay, records: map[string]*crmRecord{}}
	c.looksUp = true
	return c
}

// Capabilities: an authoritative lookup with the visibility delay, and a
// unique external reference refused with 409.
func (c *CRM) Capabilities() destination.Capabilities {
	return destination.Capabilities{
		Lookup:          &destination.Lookup{Authoritative: true, VisibilityDelay: c.delay},
		UniqueReference: &destination.UniqueReference{ConflictStatus: http.StatusConflict},
	}
}

// policy is how the CRM's answers are classified.
func (c *CRM) policy() destination.HTTPPolicy {
	return destination.HTTPPolicy{ExistsStatus: http.StatusConflict, Now: c.now}
}

// Call creates the record in process, with the injected fault if any.
func (c *CRM) Call(_ context.Context, call opledger.Call) (opledger.Result, error) {
	r, err := callRequest(call)
	return c.result(c.do(r, err, c.create), c.policy())
}

// create serves one create; the caller holds mu.
func (c *CRM) create(r request) answer {
	if r.externalRef == "" {
		r.externalRef = r.key
	}
	return c.serve(func() answer {
		if _, ok := c.records[r.externalRef]; ok {
			return errorAnswer(http.StatusConflict, "a record with this external_ref exists")
		}
		lag := c.delay
		if c.current == FaultDelayedVisibility {
			lag = max(lag, LaggingVisibility)
		}
		rec := &crmRecord{ID: c.nextRef(), ExternalRef: r.externalRef, Key: r.key, Payload: r.payload, visibleAt: c.now().Add(lag)}
		c.records[r.externalRef] = rec
		c.effect(r.key, rec.ID)
		return jsonAnswer(http.StatusCreated, rec)
	})
}

// find serves one lookup of ref: the record visible now under ref (nil
// when none is), or, when the lookup fails (FaultLookupError), the
// non-2xx answer its search gets. The caller holds mu.
func (c *CRM) find(ref string) (*crmRecord, *answer) {
	if c.lookupFailed() {
		a := errorAnswer(http.StatusServiceUnavailable, "injected: the lookup service is unavailable, nothing was searched")
		return nil, &a
	}
	rec, ok := c.records[ref]
	if !ok || c.now().Before(rec.visibleAt) {
		return nil, nil
	}
	return rec, nil
}

// Lookup searches the record of op by its external reference and compares
// its payload with op's. A record created less than VisibilityDelay ago is
// not found. It searches as the CRM's HTTP lookup does, so refs are not
// read: the CRM's calls report a reference only with a success. A lookup
// that takes FaultLookupError searches nothing and fails with the error
// destination.HTTP's lookup returns for the same answer (503).
func (c *CRM) Lookup(_ context.Context, op *opledger.Operation, _ []string) (destination.LookupResult, error) {
	p, err := canonical(op.Payload)
	if err != nil {
		return destination.LookupResult{}, err
	}
	ref := payloadRef(p)
	if ref == "" {
		ref = op.Key
	}
	c.mu.Lock()
	rec, failed := c.find(ref)
	c.mu.Unlock()
	if failed != nil {
		// What destination.HTTP's lookup says of the same answer.
		return destination.LookupResult{}, fmt.Errorf("lookup: %s", opledger.ErrorText(c.classify(*failed, http.MethodGet, c.policy())))
	}
	if rec == nil {
		return destination.LookupResult{Evidence: c.name + " lookup: no record"}, nil
	}
	if !bytes.Equal(rec.Payload, p) {
		return destination.LookupResult{Found: true, Ref: rec.ID,
			Evidence: c.name + " lookup: record " + rec.ID + " differs from the intent"}, nil
	}
	return destination.LookupResult{Found: true, Matches: true, Ref: rec.ID,
		Evidence: c.name + " lookup: record " + rec.ID + " matches the intent"}, nil
}

// Reset forgets every record, fault and counter.
func (c *CRM) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resetLocked()
	c.records = map[string]*crmRecord{}
}

// Handler serves the CRM over HTTP: POST /records creates, GET
// /records?external_ref=X searches the visible records (503 Service
// Unavailable for a search that takes FaultLookupError).
func (c *CRM) Handler() http.Handler {
	mux := c.mux(c.create)
	mux.HandleFunc("GET /records", func(w http.ResponseWriter, req *http.Request) {
		c.mu.Lock()
		rec, failed := c.find(req.URL.Query().Get("external_ref"))
		var a answer
		switch {
		case failed != nil:
			a = *failed
		case rec != nil:
			a = jsonAnswer(http.StatusOK, map[string]any{"items": []*crmRecord{rec}})
		default:
			a = jsonAnswer(http.StatusOK, map[string]any{"items": []*crmRecord{}})
		}
		c.mu.Unlock()
		writeAnswer(w, a)
	})
	return mux
}

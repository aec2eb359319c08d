package opledger

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// Get returns the operation with key. A compacted operation comes back from
// its tombstone with Tombstoned set. Unknown keys return ErrNotFound.
func (l *Ledger) Get(ctx context.Context, key string) (*Operation, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var op *Operation
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) (err error) {
		op, err = l.get(ctx, r, key)
		return err
	})
	return op, err
}

// get reads the operation with key, or its tombstone; ErrNotFound when
// the ledger holds neither.
func (l *Ledger) get(ctx context.Context, r store.Reader, key string) (*Operation, error) {
	row, err := r.GetOperation(ctx, l.tenant, key)
	if err == nil {
		return toOperation(row), nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	ts, err := r.GetTombstone(ctx, l.tenant, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("get %s: operation %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return tombstoneOperation(ts), nil
}

// Attempts returns the attempts of an operation, oldest first: none for
// one not yet claimed, or compacted. Unknown keys return ErrNotFound.
// Their errors are masked at the operation's sensitive fields as they
// are now, those a repeat added after the error was stored included.
func (l *Ledger) Attempts(ctx context.Context, key string) ([]*Attempt, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var out []*Attempt
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		rows, err := r.ListAttempts(ctx, l.tenant, key)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			_, err = l.get(ctx, r, key) // none, or no such operation?
			return err
		}
		secrets, err := l.secretsOf(ctx, r, key)
		if err != nil {
			return err
		}
		for _, a := range rows {
			a := toAttempt(a)
			a.Error = scrubText(secrets, a.Error)
			out = append(out, a)
		}
		return nil
	})
	return out, err
}

// secretsOf is what masks the text stored about the operation at key
// with its sensitive fields as they are now (nil: nothing to mask). Text
// is masked when it is stored; a repeat or a revision that marks a field
// sensitive later does not rewrite the text stored before it, so
// Attempts and Timeline mask that text again as they return it.
func (l *Ledger) secretsOf(ctx context.Context, r store.Reader, key string) (*secretText, error) {
	row, err := r.GetOperation(ctx, l.tenant, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // compacted: no text is left to mask
	}
	if err != nil || len(row.SensitiveFields) == 0 {
		return nil, err
	}
	return newSecretText(row.Payload, row.EarlierPayloads, row.SensitiveFields), nil
}

// Timeline returns the timeline of an operation, oldest first: none for
// one compacted. Unknown keys return ErrNotFound. Its evidence is masked
// at the operation's sensitive fields as they are now, those a repeat
// added after the entry was written included.
func (l *Ledger) Timeline(ctx context.Context, key string) ([]*TimelineEntry, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	var out []*TimelineEntry
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		rows, err := r.ListTimeline(ctx, l.tenant, key)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			_, err = l.get(ctx, r, key)
			return err
		}
		secrets, err := l.secretsOf(ctx, r, key)
		if err != nil {
			return err
		}
		for _, e := range rows {
			e := toTimelineEntry(e)
			e.Evidence = scrubText(secrets, e.Evidence)
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// ListOptions filter a list of operations.
type ListOptions struct {
	// States lists only the operations in any of these states; empty,
	// every state. A name that is not a State is refused
	// (ErrInvalidInput).
	States []State
	// Owner lists only the operations of this owner (Operation.Owner,
	// compared exactly); empty, any owner.
	Owner string
	// Destination lists only the operations for this destination,
	// compared exactly; empty, any destination.
	Destination string
	// DuplicateEffects lists only operations with duplicate effects
	// (Operation.DuplicateEffects > 0): the incidents to look into at
	// their destinations.
	DuplicateEffects bool
	// ExceptCancelled leaves out the failed operations that need no
	// decision: those an operator cancelled (FailureCancelled), and the
	// failed step of a workflow an operator cancelled (CancelWorkflow;
	// its timeline says so), which keeps its state and failure kind. The
	// rest are the failed ones the console's exception queue shows.
	ExceptCancelled bool
	// Order is the order of the list: OrderNewest when empty.
	Order Order
	// Limit is the page size: 0 for 50, at most 500; a negative one is
	// refused.
	Limit int
	// Cursor continues a previous page (Page.NextCursor) of the same
	// Order.
	Cursor string
}

// Order is the order List returns operations in.
type Order string

const (
	// OrderNewest lists operations newest first, by creation.
	OrderNewest Order = "newest"
	// OrderReview lists held operations only, earliest review_by first:
	// the order in which their owners have to decide. States must be
	// empty or exactly [StateHeld].
	OrderReview Order = "review"
)

// Page is one page of operations, in the order asked for.
type Page struct {
	// Items are the page's operations, in the order asked for.
	Items []*Operation `json:"items"`
	// NextCursor fetches the next page; empty on the last page.
	NextCursor string `json:"next_cursor"`
	// Now is the ledger's clock (Ledger.Now) when the page was read, in
	// the same read: what the ages of its operations (CreatedAt and the
	// other times, which that clock stamped) are measured against, rather
	// than the clock of the machine that shows them. Zero in a page from
	// a server older than this field.
	Now time.Time `json:"now"`
}

// MaxListLimit is the largest page List and ListEvents return, and the
// most operations ReconcileQueue returns at once.
const MaxListLimit = 500

// pageLimit is the page size a Limit option asks for: def when 0, refused
// when negative (a mistake, never silently the default) or above most.
func pageLimit(limit, def, most int) (int, error) {
	switch {
	case limit == 0:
		return def, nil
	case limit < 0 || limit > most:
		return 0, invalidInput("limit is %d: it must be from 1 to %d (0 means %d)", limit, most, def)
	}
	return limit, nil
}

// List returns operations filtered and paged: newest first, or the held
// ones by review time (OrderReview).
func (l *Ledger) List(ctx context.Context, o ListOptions) (*Page, error) {
	p := store.ListParams{Tenant: l.tenant, Owner: o.Owner, Destination: o.Destination, Duplicates: o.DuplicateEffects,
		ExceptCancelled: o.ExceptCancelled}
	var err error
	if p.Limit, err = pageLimit(o.Limit, 50, MaxListLimit); err != nil {
		return nil, err
	}
	if err := checkText("owner", o.Owner, "destination", o.Destination); err != nil {
		return nil, err
	}
	for _, s := range o.States {
		if !s.Valid() {
			return nil, invalidInput("unknown state %q (states: %s)", s, StateNames())
		}
		p.States = append(p.States, string(s))
	}
	switch o.Order {
	case "", OrderNewest:
	case OrderReview:
		if len(o.States) > 1 || len(o.States) == 1 && o.States[0] != StateHeld {
			return nil, invalidInput("order %q lists held operations only: leave the state out or give only %q", OrderReview, StateHeld)
		}
		p.ByReview = true
	default:
		return nil, invalidInput("unknown order %q: use %q or %q", o.Order, OrderNewest, OrderReview)
	}
	scope := listScope(p)
	if o.Cursor != "" {
		at, key, err := decodeCursor(o.Cursor, scope)
		if err != nil {
			return nil, err
		}
		p.AfterAt, p.AfterKey = at, key
	}
	page := &Page{Items: []*Operation{}}
	// Fetch one more than asked to know whether a next page exists.
	p.Limit++
	err = l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		rows, err := r.ListOperations(ctx, p)
		if err != nil {
			return err
		}
		if page.Now, err = l.now(ctx, r); err != nil {
			return err
		}
		for i, row := range rows {
			if i == p.Limit-1 {
				last := rows[i-1]
				at := last.CreatedAt
				if p.ByReview {
					at = last.ReviewBy
				}
				page.NextCursor = encodeCursor(at, last.Key, scope)
				break
			}
			page.Items = append(page.Items, toOperation(row))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// listScope names the list a cursor belongs to: its order and filters,
// hashed. A cursor of one list is refused by any other, instead of
// continuing it from a place that list never had.
func listScope(p store.ListParams) string {
	states := slices.Compact(slices.Sorted(slices.Values(p.States)))
	if p.ByReview {
		states = nil // held only, whether or not the caller said so
	}
	scope := fmt.Sprintf("%t\x00%s\x00%s\x00%t\x00%s", p.ByReview, p.Owner, p.Destination, p.Duplicates,
		strings.Join(states, ","))
	if p.ExceptCancelled {
		scope += "\x00except cancelled" // only then: the cursors of other lists stay as they were
	}
	h := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(h[:4])
}

func encodeCursor(at time.Time, key, scope string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(scope + "|" + strconv.FormatInt(at.UnixMicro(), 10) + "|" + key))
}

func decodeCursor(c, scope string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		s, sameList := strings.CutPrefix(string(b), scope+"|")
		micros, key, ok := strings.Cut(s, "|")
		if v, perr := strconv.ParseInt(micros, 10, 64); sameList && ok && perr == nil && v > 0 && ValidateKey(key) == nil {
			return time.UnixMicro(v).UTC(), key, nil
		}
	}
	return time.Time{}, "", errForeignCursor()
}

// errForeignCursor refuses a cursor that does not continue the list of
// operations it was given to. (The workflows and events lists, which
// have no order to choose, word theirs with their own filters.)
func errForeignCursor() error {
	return invalidInput("cursor does not continue this list: it was issued for another order or other filters, or not by opledger (give the same order and filters, or start without a cursor)")
}

// CountFailedByKind counts the tenant's failed operations by failure
// kind; a kind with none is left out.
func (l *Ledger) CountFailedByKind(ctx context.Context) (map[FailureKind]int, error) {
	out := map[FailureKind]int{}
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		m, err := r.CountFailedByKind(ctx, l.tenant)
		for k, v := range m {
			out[FailureKind(k)] = v
		}
		return err
	})
	return out, err
}

// CountFailedNeedingDecision counts the tenant's failed operations that
// a list with ListOptions.ExceptCancelled keeps: those of the exception
// queue.
func (l *Ledger) CountFailedNeedingDecision(ctx context.Context) (int, error) {
	var n int
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		n, err = r.CountFailedNeedingDecision(ctx, l.tenant)
		return err
	})
	return n, err
}

// CountByState counts the tenant's operations in each state.
func (l *Ledger) CountByState(ctx context.Context) (map[State]int, error) {
	out := map[State]int{}
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		m, err := r.CountByState(ctx, l.tenant)
		for k, v := range m {
			out[State(k)] = v
		}
		return err
	})
	return out, err
}

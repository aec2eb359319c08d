package opledger

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// Speculative transitions.
//
// Most transitions of a claim are made by the process that claimed it: it
// claims (recording the intent of a new key in the same step), maybe marks
// the dispatch, and reports. That process already knows the operation as it
// wrote it. So a Ledger keeps a snapshot of each claim it made and decides
// the next step of that claim on the snapshot, without reading, and the
// store writes the decision only if the operation is still at the
// snapshot's revision (a new key: only if the key has neither a row nor a
// tombstone). The write is the same compare-and-set every transition ends
// with; what is saved is the read before it, and on stores that implement
// store.ConditionalWriter with group commit (PostgreSQL), concurrent
// callers' transitions share transactions. When the condition fails, or
// the decision needs anything the snapshot does not hold, the transition
// is made again the ordinary way: the outcome is always the one a fresh
// read would have given.

// errNotSpeculable: the decision needs a read the snapshot cannot answer.
var errNotSpeculable = errors.New("decision needs a read")

// speculation is the store side of a decision made on a snapshot.
type speculation struct {
	// attempt is the snapshot's current attempt (nil: none known).
	attempt *store.Attempt
	// writes are the decision's writes, in order.
	writes []store.Write
	// base is the snapshot's operation row, as stored at the revision
	// the decision starts from (nil: the key is new).
	base *store.Operation
}

// getTombstone reads the tombstone of the key. A speculation assumes
// there is none: the conditional insert of a new key fails if there is.
func (t *txn) getTombstone() (*store.Tombstone, error) {
	if t.spec != nil {
		return nil, store.ErrNotFound
	}
	return t.tx.GetTombstone(t.ctx, t.tenant, t.key)
}

// getAttempt reads an attempt of the operation.
func (t *txn) getAttempt(id string) (*store.Attempt, error) {
	if t.spec != nil {
		if t.spec.attempt == nil || t.spec.attempt.ID != id {
			return nil, errNotSpeculable
		}
		a := *t.spec.attempt
		return &a, nil
	}
	return t.tx.GetAttempt(t.ctx, t.tenant, t.key, id)
}

// listAttempts reads every attempt of the operation.
func (t *txn) listAttempts() ([]*store.Attempt, error) {
	if t.spec != nil {
		return nil, errNotSpeculable
	}
	return t.tx.ListAttempts(t.ctx, t.tenant, t.key)
}

// listTimeline reads the operation's timeline as stored: never in a
// speculation, whose writes have not happened yet. It is read once per
// transaction (the entries of this one are written at flush, after every
// read): the checks of one transition (a late report's version, the
// duplicates it counts) share it. Callers do not change it.
func (t *txn) listTimeline() ([]*store.TimelineEntry, error) {
	if t.spec != nil {
		return nil, errNotSpeculable
	}
	if t.stored == nil {
		entries, err := t.tx.ListTimeline(t.ctx, t.tenant, t.key)
		if err != nil {
			return nil, err
		}
		t.stored = entries
		if t.stored == nil {
			t.stored = []*store.TimelineEntry{}
		}
	}
	return t.stored, nil
}

// lastTimelineEntry reads the operation's newest timeline entry as
// stored (listTimeline's last, never in a speculation): that row alone,
// unless the timeline has been read in this transaction already. nil
// for an operation without entries.
func (t *txn) lastTimelineEntry() (*store.TimelineEntry, error) {
	if t.spec != nil {
		return nil, errNotSpeculable
	}
	if t.stored != nil {
		if n := len(t.stored); n > 0 {
			return t.stored[n-1], nil
		}
		return nil, nil
	}
	e, err := t.tx.LastTimelineEntry(t.ctx, t.tenant, t.key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return e, err
}

// updateAttempt writes an attempt row.
func (t *txn) updateAttempt(a *store.Attempt) error {
	return t.writeAll([]store.Write{{UpdateAttempt: a}})
}

// writeAll performs ws: in the transaction, or into the speculation.
// The free text it writes is scrubbed of the operation's sensitive values
// first (scrub).
func (t *txn) writeAll(ws []store.Write) error {
	for _, w := range ws {
		switch {
		case w.InsertAttempt != nil:
			t.attempts = append(t.attempts, w.InsertAttempt)
		case w.UpdateAttempt != nil:
			w.UpdateAttempt.Error = t.scrub(w.UpdateAttempt.Error)
			t.attempts = append(t.attempts, w.UpdateAttempt)
		case w.InsertOperation != nil:
			w.InsertOperation.LastError = t.scrub(w.InsertOperation.LastError)
		case w.UpdateOperation != nil:
			w.UpdateOperation.LastError = t.scrub(w.UpdateOperation.LastError)
		case w.AppendTimeline != nil:
			w.AppendTimeline.Evidence = t.scrub(w.AppendTimeline.Evidence)
		}
	}
	if t.spec != nil {
		t.spec.writes = append(t.spec.writes, ws...)
		return nil
	}
	return store.WriteAll(t.ctx, t.tx, ws)
}

// snapshot is an in-progress operation as this ledger wrote it, with its
// current attempt. Snapshots are never modified: a decision works on
// copies.
type snapshot struct {
	op      *store.Operation
	attempt *store.Attempt
	// secrets is what the decision that wrote op built to mask its text,
	// so that the next decision on the snapshot need not build it again.
	secrets secretsMemo
}

type snapshotKey struct{ tenant, key, attemptID string }

// maxSnapshots bounds the snapshots a ledger keeps. Claims that are never
// followed up (a worker that died) would otherwise pile up; past the bound
// an arbitrary snapshot is dropped, which only costs its next transition
// a read.
const maxSnapshots = 4096

// snapshots holds the snapshots of a ledger's claims, by attempt.
type snapshots struct {
	mu sync.Mutex
	m  map[snapshotKey]snapshot
}

func newSnapshots() *snapshots {
	return &snapshots{m: make(map[snapshotKey]snapshot)}
}

// take removes and returns the snapshot of an attempt, if kept.
func (s *snapshots) take(tenant, key, attemptID string) (snapshot, bool) {
	k := snapshotKey{tenant, key, attemptID}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, ok := s.m[k]
	if ok {
		delete(s.m, k)
	}
	return snap, ok
}

// keep stores what t decided as the snapshot of its operation's current
// attempt while the operation stays in progress. prev is the attempt the
// decision started from, if it wrote none.
func (s *snapshots) keep(t *txn, prev *store.Attempt) {
	if t == nil || t.op == nil || State(t.op.State) != StateInProgress {
		return
	}
	a := prev
	for _, w := range t.attempts {
		if w.ID == t.op.CurrentAttemptID {
			a = w
		}
	}
	if a == nil || a.ID != t.op.CurrentAttemptID {
		return
	}
	k := snapshotKey{t.tenant, t.key, a.ID}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSnapshots {
		for old := range s.m {
			delete(s.m, old)
			break
		}
	}
	s.m[k] = snapshot{op: ownRow(t.op), attempt: a, secrets: t.secrets}
}

// ownRow copies op with slices of its own: the row a transition returned
// shares them with its caller (the intent's payload, the Operation
// returned), who may reuse them, and a snapshot is written back whole.
func ownRow(op *store.Operation) *store.Operation {
	c := *op
	c.Payload = bytes.Clone(op.Payload)
	c.Response = bytes.Clone(op.Response)
	c.EarlierPayloads = bytes.Clone(op.EarlierPayloads)
	c.SensitiveFields = slices.Clone(op.SensitiveFields)
	return &c
}

// speculate makes decide on snap (snap.op nil: the key is new) and has the
// store write the result on the condition that snap is still current. ok
// is false when the decision must be made again the ordinary way: the
// store cannot write conditionally, the condition failed, or the decision
// refused or needed a read. A refusal is not trusted here because the
// snapshot may be stale; the ordinary decision gives the current one.
func (l *Ledger) speculate(ctx context.Context, key string, snap snapshot, decide func(t *txn) error) (op *Operation, after error, ok bool, err error) {
	cw, can := l.store.(store.ConditionalWriter)
	if !can {
		return nil, nil, false, nil
	}
	var t *txn
	var refused error
	err = cw.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
		t = &txn{ctx: ctx, tenant: l.tenant, key: key, holdReview: l.opts.HoldReviewAfter, served: l.served, policy: l.policy,
			now: l.clock(now), spec: &speculation{attempt: snap.attempt, base: snap.op}, secrets: snap.secrets}
		if snap.op != nil {
			row := *snap.op
			t.op, t.prevRev = &row, row.Revision
		}
		refused = decide(t)
		if refused == nil {
			refused = t.flush()
		}
		if refused != nil {
			return nil, refused
		}
		return t.spec.writes, nil
	})
	switch {
	case refused != nil, errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNoOperationWrite):
		return nil, nil, false, nil
	case err != nil:
		return nil, nil, false, err
	}
	l.snapshots.keep(t, snap.attempt)
	return toOperation(t.op), t.after, true, nil
}

// transition runs a decision about attempt attemptID of key: on this
// ledger's snapshot of that claim when it kept one, otherwise (or when the
// snapshot turns out stale) on the row read in a transaction.
func (l *Ledger) transition(ctx context.Context, key, attemptID string, decide func(t *txn) error) (*Operation, error) {
	if snap, ok := l.snapshots.take(l.tenant, key, attemptID); ok {
		op, after, done, err := l.speculate(ctx, key, snap, decide)
		if err != nil {
			return nil, err
		}
		if done {
			return op, after
		}
	}
	return l.mutateAttempt(ctx, key, attemptID, decide)
}

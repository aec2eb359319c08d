package chaostest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger"
)

// Destination names, as recorded on the operations and used as URL paths.
const (
	destProtected   = "protected"
	destUnprotected = "unprotected"
)

// Fault rates of the destination, per request.
const (
	// rateUnavailable: 503 before acting (no effect): retryable.
	rateUnavailable = 0.01
	// rateLost: the effect is made, then the connection is closed without
	// an answer: the worker reports uncertain.
	rateLost = 0.01
	// rateLate: the effect is made, and the answer is held back until the
	// ledger shows that the attempt has lost its lease, so that the
	// worker's report arrives stale.
	rateLate = 0.003
)

// destRequest is what a worker sends; see chaosworker.
type destRequest struct {
	Tenant         string `json:"tenant"`
	Key            string `json:"key"`
	AttemptID      string `json:"attempt_id"`
	IdempotencyKey string `json:"idempotency_key"`
	Protected      bool   `json:"protected"`
	PID            int    `json:"pid"`
}

// killPoint is a scheduled SIGKILL: when the destination has received at
// request requests, it kills either the process making that request (after
// the effect is made, before the answer) or a random worker process.
type killPoint struct {
	at        int
	inRequest bool
}

// killer is what the destination needs from the supervisor.
type killer interface {
	// killPID kills the worker process pid (if it is not dying already);
	// false if pid is neither a current worker process nor one that was
	// killed.
	killPID(pid int) bool
	// killRandom kills a randomly chosen worker process.
	killRandom()
}

// destination is the shared test destination: a real HTTP server on
// 127.0.0.1 with two endpoints. POST /protected deduplicates by the
// request's idempotency key (a repeat creates nothing and answers the first
// reference); POST /unprotected makes a new effect for every request. Both
// count effects per operation.
type destination struct {
	mu       sync.Mutex
	rng      *rand.Rand
	requests int
	seq      int
	// effects lists the references made for each operation ("tenant/key").
	effects map[string][]string
	// byIdem maps an idempotency key to the reference it made.
	byIdem map[string]string
	// destOf records which endpoint an operation used.
	destOf map[string]string

	// replays counts requests to /protected whose idempotency key was
	// known (nothing new was made; the first reference was answered);
	// protectedRequests counts requests made by protected retries
	// (Claim.Protected).
	replays, lost, late, unavailable, protectedRequests int
	// protectedUnanswered counts requests to /protected that made (or
	// found) their effect and whose answer never reached the worker: lost,
	// or its sender killed. Each leaves its operation uncertain, and the
	// only way it can then end succeeded is a protected retry, whose
	// request is a replay.
	protectedUnanswered int
	// truncated counts request bodies cut short (their sender was killed).
	truncated                   int
	inRequestKills, randomKills int

	schedule []killPoint
	next     int
	killer   killer
	// lookup reads an operation from the ledger, for late answers.
	lookup func(ctx context.Context, tenant, key string) (*opledger.Operation, error)
	// problems are requests the destination could not make sense of.
	problems []string
}

func newDestination(seed uint64, schedule []killPoint, k killer,
	lookup func(ctx context.Context, tenant, key string) (*opledger.Operation, error)) *destination {
	return &destination{
		rng:     rand.New(rand.NewPCG(seed, 0xde57)),
		effects: map[string][]string{}, byIdem: map[string]string{}, destOf: map[string]string{},
		schedule: schedule, killer: k, lookup: lookup,
	}
}

type answer int

const (
	answerNow answer = iota
	answerUnavailable
	answerLost
	answerLate
	answerKillRequester
)

func (d *destination) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := strings.TrimPrefix(r.URL.Path, "/")
	var req destRequest
	if r.Method != http.MethodPost || (kind != destProtected && kind != destUnprotected) {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		// A worker killed while sending leaves a truncated body.
		d.mu.Lock()
		d.truncated++
		d.mu.Unlock()
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if req.Key == "" || req.Tenant == "" || req.AttemptID == "" {
		d.problem(fmt.Sprintf("request without tenant, key or attempt: %+v", req))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if kind == destProtected && req.IdempotencyKey == "" {
		d.problem("protected request for " + req.Key + " without idempotency key")
		http.Error(w, "idempotency key required", http.StatusBadRequest)
		return
	}
	id := req.Tenant + "/" + req.Key

	d.mu.Lock()
	d.requests++
	var kill *killPoint
	if d.next < len(d.schedule) && d.requests >= d.schedule[d.next].at {
		kill = &d.schedule[d.next]
		d.next++
	}
	fault := d.rng.Float64()
	how := answerNow
	switch {
	case kill != nil && kill.inRequest:
		how = answerKillRequester
	case fault < rateUnavailable:
		how = answerUnavailable
	case fault < rateUnavailable+rateLost:
		how = answerLost
	case fault < rateUnavailable+rateLost+rateLate:
		how = answerLate
	}
	if prev, ok := d.destOf[id]; ok && prev != kind {
		d.problems = append(d.problems, fmt.Sprintf("%s sent to %s and %s", id, prev, kind))
	}
	d.destOf[id] = kind
	if req.Protected {
		d.protectedRequests++
	}
	var ref string
	if how == answerUnavailable {
		d.unavailable++
	} else {
		// The effect is made (or, for a known idempotency key, found)
		// before any answer: a lost answer hides a real effect.
		if kind == destProtected {
			ref = d.byIdem[req.IdempotencyKey]
			if ref != "" {
				d.replays++
			}
		}
		if ref == "" {
			d.seq++
			ref = fmt.Sprintf("%c-%06d", kind[0], d.seq)
			d.effects[id] = append(d.effects[id], ref)
			if kind == destProtected {
				d.byIdem[req.IdempotencyKey] = ref
			}
		}
		switch how {
		case answerLost:
			d.lost++
		case answerLate:
			d.late++
		case answerKillRequester:
			d.inRequestKills++
		}
		if kind == destProtected && (how == answerLost || how == answerKillRequester) {
			d.protectedUnanswered++
		}
	}
	if kill != nil && !kill.inRequest {
		d.randomKills++
	}
	d.mu.Unlock()

	if kill != nil && !kill.inRequest {
		d.killer.killRandom()
	}
	switch how {
	case answerUnavailable:
		http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
		return
	case answerKillRequester:
		if !d.killer.killPID(req.PID) {
			d.problem(fmt.Sprintf("request for %s came from pid %d, which is neither a current worker nor a killed one", id, req.PID))
		}
		hangUp(w)
		return
	case answerLost:
		hangUp(w)
		return
	case answerLate:
		d.waitUntilMovedOn(r.Context(), req)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"ref":%q}`, ref)
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// waitUntilMovedOn holds a late answer back until the ledger shows that
// the attempt no longer holds its operation (its lease ran out and was
// settled), so that the answer is certain to reach the worker too late.
// It polls with a deadline; if the deadline passes it answers anyway.
func (d *destination) waitUntilMovedOn(ctx context.Context, req destRequest) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		op, err := d.lookup(ctx, req.Tenant, req.Key)
		if err == nil && (op.State != opledger.StateInProgress || op.CurrentAttemptID != req.AttemptID) {
			return
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

func (d *destination) problem(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.problems = append(d.problems, s)
}

// Command chaosworker is the worker process that the multi-process crash
// test in package chaostest starts, kills with SIGKILL and restarts. It is
// not a tool for anything else.
//
// By default (-mode work) it opens the ledger named by -dsn and runs
// -goroutines workers that loop
// ClaimNext (across all tenants) → Dispatch → POST to the test destination →
// Report, plus one sweeper that runs ExpireLeases and reconciles uncertain
// operations: a protected retry at the destination that deduplicates by
// idempotency key, held at the one that does not. It stops cleanly, finishing
// the attempts it holds, when its standard input is closed. Unexpected
// errors are written to standard error as lines starting with "ERROR".
//
// The other modes serve the test's reads and writes that are not the race
// itself, so that they run at full speed even when the test process runs
// under the race detector (which slows the pure-Go SQLite engine many
// times): -mode record records the test's -record operations, -mode status
// prints the number of operations in each state, and -mode dump prints
// every operation with the evidence of the unresolved ones (see report.go).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/opledger/opledger"
)

// Destination names as recorded on the operations; the URL path is the same.
const (
	destProtected   = "protected"
	destUnprotected = "unprotected"
)

// protectionRetention is how long the protected destination honours an
// idempotency key (it never forgets one in the test).
const protectionRetention = 24 * time.Hour

type config struct {
	mode       string
	record     int
	dsn        string
	dest       string
	name       string
	goroutines int
	lease      time.Duration
	sweep      time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.mode, "mode", "work", "work, record, status or dump")
	flag.IntVar(&cfg.record, "record", 10000, "number of operations -mode record records")
	flag.StringVar(&cfg.dsn, "dsn", "", "ledger DSN (sqlite:PATH or postgres://…)")
	flag.StringVar(&cfg.dest, "dest", "", "base URL of the test destination")
	flag.StringVar(&cfg.name, "name", "chaos", "worker name prefix")
	flag.IntVar(&cfg.goroutines, "goroutines", 8, "concurrent workers")
	flag.DurationVar(&cfg.lease, "lease", 2*time.Second, "claim lease")
	flag.DurationVar(&cfg.sweep, "sweep", 250*time.Millisecond, "interval of ExpireLeases and reconciliation")
	flag.Parse()
	modes := map[string]func(config) error{"work": run, "record": record, "status": status, "dump": dump}
	do := modes[cfg.mode]
	if cfg.dsn == "" || do == nil || (cfg.mode == "work" && cfg.dest == "") {
		fmt.Fprintln(os.Stderr, "ERROR usage: chaosworker -dsn DSN [-mode work -dest URL | -mode record|status|dump]")
		os.Exit(2)
	}
	if err := do(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "ERROR %s: %v\n", cfg.name, err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	ctx := context.Background()
	l, err := opledger.Open(ctx, cfg.dsn, opledger.Options{
		Worker: cfg.name,
		Lease:  cfg.lease,
		// Short backoff and room for many attempts: the test wants every
		// retryable operation to finish, not to be exhausted.
		RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 100, InitialDelay: 50 * time.Millisecond, MaxDelay: 500 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	defer l.Close()

	// Closing stdin asks for a clean stop: no new claims, finish the
	// attempts in hand.
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()

	w := &worker{cfg: cfg, l: l, stop: stop, client: &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: cfg.goroutines, MaxIdleConns: cfg.goroutines},
	}}
	var wg sync.WaitGroup
	for i := range cfg.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, fmt.Sprintf("%s.%d", cfg.name, i))
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.sweeper(ctx)
	}()
	wg.Wait()
	return nil
}

type worker struct {
	cfg    config
	l      *opledger.Ledger
	stop   chan struct{}
	client *http.Client
}

func (w *worker) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// pause waits for d or until the worker is asked to stop. It paces polling;
// nothing relies on it for ordering.
func (w *worker) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.stop:
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ERROR "+format+"\n", args...)
}

// loop claims and performs operations until asked to stop.
func (w *worker) loop(ctx context.Context, name string) {
	idle := 10 * time.Millisecond
	for !w.stopped() {
		c, err := w.l.ClaimNext(ctx, opledger.ClaimNextOptions{Worker: name, AllTenants: true})
		if errors.Is(err, opledger.ErrNothingDue) {
			w.pause(idle + rand.N(idle))
			idle = min(2*idle, 200*time.Millisecond)
			continue
		}
		if err != nil {
			logf("%s: claim next: %v", name, err)
			w.pause(100 * time.Millisecond)
			continue
		}
		idle = 10 * time.Millisecond
		w.perform(ctx, name, c)
	}
}

// request is what the worker sends to the destination. The idempotency key
// travels in the body, not in an Idempotency-Key header: Go's HTTP client
// transparently resends a request carrying that header when a reused
// connection fails, which would hide from the ledger the lost responses
// this test is about.
type request struct {
	Tenant         string `json:"tenant"`
	Key            string `json:"key"`
	AttemptID      string `json:"attempt_id"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Protected      bool   `json:"protected"`
	PID            int    `json:"pid"`
}

func (w *worker) perform(ctx context.Context, name string, c *opledger.Claim) {
	op := c.Operation
	tl, err := w.l.WithTenant(op.Tenant)
	if err != nil {
		logf("%s: tenant %s: %v", name, op.Tenant, err)
		return
	}
	if _, err := tl.Dispatch(ctx, op.Key, c.AttemptID, c.FencingToken); err != nil {
		// A stale claim, or one the ledger settled instead (a late
		// success of an earlier attempt arrived; a protected retry's
		// window closed): expected refusals, nothing is sent.
		var stale *opledger.StaleError
		var se *opledger.StateError
		if !errors.As(err, &stale) && !errors.As(err, &se) {
			logf("%s: dispatch %s/%s: %v", name, op.Tenant, op.Key, err)
		}
		return // never call the destination without the recovery point
	}
	req := request{Tenant: op.Tenant, Key: op.Key, AttemptID: c.AttemptID, Protected: c.Protected, PID: os.Getpid()}
	if op.Destination == destProtected {
		req.IdempotencyKey = c.IdempotencyKey
	}
	report := w.call(ctx, op.Destination, req)
	// The outcome must be recorded; a store error (a busy SQLite file, a
	// dropped connection) is retried, a refusal by the ledger is final.
	for try := 1; ; try++ {
		_, err := tl.Report(ctx, op.Key, c.AttemptID, c.FencingToken, report)
		var stale *opledger.StaleError
		if err == nil || errors.As(err, &stale) {
			return
		}
		if errors.Is(err, opledger.ErrInvalidState) || errors.Is(err, opledger.ErrInvalidInput) || try == 10 {
			logf("%s: report %s/%s: %v", name, op.Tenant, op.Key, err)
			return
		}
		logf("%s: report %s/%s (try %d, retrying): %v", name, op.Tenant, op.Key, try, err)
		time.Sleep(time.Duration(try) * 20 * time.Millisecond) // backoff before retrying a failed write
	}
}

// call performs the external call and classifies what came back.
func (w *worker) call(ctx context.Context, destination string, req request) opledger.Report {
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.dest+"/"+destination, bytes.NewReader(body))
	if err != nil {
		return opledger.Report{Outcome: opledger.OutcomeRejected, Error: err.Error()}
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(hreq)
	if err != nil {
		// A failed dial never reached the destination (retryable);
		// anything after the request was written may have taken effect.
		outcome, _ := opledger.OutcomeOf(err)
		return opledger.Report{Outcome: outcome, Error: err.Error()}
	}
	defer resp.Body.Close()
	var out struct {
		Ref string `json:"ref"`
	}
	readErr := json.NewDecoder(resp.Body).Decode(&out)
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable:
		return opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "destination answered 503 before acting"}
	case resp.StatusCode/100 == 2 && readErr == nil && out.Ref != "":
		return opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: out.Ref,
			Response: json.RawMessage(fmt.Sprintf(`{"ref":%q}`, out.Ref))}
	default:
		return opledger.Report{Outcome: opledger.OutcomeUncertain,
			Error: fmt.Sprintf("destination answered %d (%v)", resp.StatusCode, readErr)}
	}
}

// sweeper settles expired leases and reconciles uncertain operations, in
// every process at once: both are conditional writes, so racing sweepers
// are safe.
func (w *worker) sweeper(ctx context.Context) {
	for !w.stopped() {
		w.pause(w.cfg.sweep/2 + rand.N(w.cfg.sweep))
		if _, err := w.l.ExpireLeases(ctx); err != nil {
			logf("%s: expire leases: %v", w.cfg.name, err)
		}
		ops, err := w.l.ReconcileQueue(ctx, opledger.ReconcileQueueOptions{Limit: 100, AllTenants: true})
		if err != nil {
			logf("%s: reconcile queue: %v", w.cfg.name, err)
			continue
		}
		for _, op := range ops {
			tl, err := w.l.WithTenant(op.Tenant)
			if err != nil {
				logf("%s: tenant %s: %v", w.cfg.name, op.Tenant, err)
				continue
			}
			f := opledger.Finding{Evidence: "no lookup and no idempotency key at the unprotected destination"}
			if op.Destination == destProtected {
				f = opledger.Finding{ProtectionRetention: protectionRetention,
					Evidence: "the protected destination deduplicates by idempotency key for 24h"}
			}
			if _, _, err := tl.Reconcile(ctx, op.Key, f); err != nil && !errors.Is(err, opledger.ErrInvalidState) {
				logf("%s: reconcile %s/%s: %v", w.cfg.name, op.Tenant, op.Key, err)
			}
		}
	}
}

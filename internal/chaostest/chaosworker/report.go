package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/opledger/opledger"
)

// Tenants of the test's operations.
var tenants = []string{"chaos-a", "chaos-b"}

// intentOf is operation i of the test: alternating tenants, and within each
// tenant alternating destinations. The test checks every recorded
// operation against its own copy of this rule, fingerprint included.
func intentOf(i int) (tenant string, in opledger.Intent) {
	dest := destProtected
	if (i/2)%2 == 1 {
		dest = destUnprotected
	}
	return tenants[i%2], opledger.Intent{Key: fmt.Sprintf("chaos:%05d", i), Action: "crm.create_record", Destination: dest,
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Owner: "chaos-team"}
}

// record records operations 0 … cfg.record-1 with cfg.goroutines writers.
//
// On SQLite it records with synchronous=NORMAL: recording is the test's
// setup, done before any worker runs or dies, and NORMAL spares it one
// fsync per operation. The workers use the default, synchronous=FULL.
func record(cfg config) error {
	ctx := context.Background()
	l, err := opledger.Open(ctx, cfg.dsn, opledger.Options{Worker: cfg.name, SQLiteSynchronousNormal: true})
	if err != nil {
		return err
	}
	defer l.Close()
	errs := make(chan error, cfg.goroutines)
	var wg sync.WaitGroup
	for g := range cfg.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < cfg.record; i += cfg.goroutines {
				tenant, in := intentOf(i)
				tl, err := l.WithTenant(tenant)
				if err != nil {
					errs <- err
					return
				}
				if _, created, err := tl.Record(ctx, in); err != nil || !created {
					errs <- fmt.Errorf("record %s/%s (created %v): %w", tenant, in.Key, created, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when the channel is empty
}

// Report is what -mode status and -mode dump print as JSON. The test
// decodes it with its own copy of these types.
type Report struct {
	// ByState counts the operations of all test tenants by state.
	ByState map[opledger.State]int `json:"by_state"`
	// The rest is filled by -mode dump only.

	// ExpiredLeases is what one more ExpireLeases settled.
	ExpiredLeases int `json:"expired_leases"`
	// ReconcileQueue counts uncertain operations due for reconciliation.
	ReconcileQueue int `json:"reconcile_queue"`
	// Stats are the ledger's own figures for all tenants.
	Stats      *opledger.Stats `json:"stats,omitempty"`
	Operations []Op            `json:"operations,omitempty"`
}

// Op is one operation in a dump.
type Op struct {
	Tenant           string         `json:"tenant"`
	Key              string         `json:"key"`
	Destination      string         `json:"destination"`
	Fingerprint      string         `json:"fingerprint"`
	State            opledger.State `json:"state"`
	FailureKind      string         `json:"failure_kind"`
	LastError        string         `json:"last_error"`
	DestinationRef   string         `json:"destination_ref"`
	DuplicateEffects int            `json:"duplicate_effects"`
	AttemptCount     int            `json:"attempt_count"`
	// Evidence is, for an uncertain or held operation, the last timeline
	// entry that moved it into its state (nil if there is none).
	Evidence *opledger.TimelineEntry `json:"evidence,omitempty"`
}

func status(cfg config) error {
	ctx := context.Background()
	l, err := opledger.Open(ctx, cfg.dsn, opledger.Options{Worker: cfg.name})
	if err != nil {
		return err
	}
	defer l.Close()
	rep, err := countStates(ctx, l)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

func countStates(ctx context.Context, l *opledger.Ledger) (*Report, error) {
	rep := &Report{ByState: map[opledger.State]int{}}
	for _, tenant := range tenants {
		tl, err := l.WithTenant(tenant)
		if err != nil {
			return nil, err
		}
		counts, err := tl.CountByState(ctx)
		if err != nil {
			return nil, err
		}
		for s, n := range counts {
			rep.ByState[s] += n
		}
	}
	return rep, nil
}

func dump(cfg config) error {
	ctx := context.Background()
	l, err := opledger.Open(ctx, cfg.dsn, opledger.Options{Worker: cfg.name})
	if err != nil {
		return err
	}
	defer l.Close()
	rep, err := countStates(ctx, l)
	if err != nil {
		return err
	}
	if rep.ExpiredLeases, err = l.ExpireLeases(ctx); err != nil {
		return err
	}
	queue, err := l.ReconcileQueue(ctx, opledger.ReconcileQueueOptions{Limit: 100, AllTenants: true})
	if err != nil {
		return err
	}
	rep.ReconcileQueue = len(queue)
	if rep.Stats, err = l.Stats(ctx, true); err != nil {
		return err
	}
	for _, tenant := range tenants {
		tl, err := l.WithTenant(tenant)
		if err != nil {
			return err
		}
		cursor := ""
		for {
			page, err := tl.List(ctx, opledger.ListOptions{Limit: opledger.MaxListLimit, Cursor: cursor})
			if err != nil {
				return err
			}
			for _, o := range page.Items {
				op := Op{Tenant: o.Tenant, Key: o.Key, Destination: o.Destination, Fingerprint: o.Fingerprint,
					State: o.State, FailureKind: string(o.FailureKind), LastError: o.LastError,
					DestinationRef: o.DestinationRef, DuplicateEffects: o.DuplicateEffects, AttemptCount: o.AttemptCount}
				if o.State.Unresolved() {
					timeline, err := tl.Timeline(ctx, o.Key)
					if err != nil {
						return err
					}
					for i := len(timeline) - 1; i >= 0; i-- {
						if timeline[i].To == o.State {
							op.Evidence = timeline[i]
							break
						}
					}
				}
				rep.Operations = append(rep.Operations, op)
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

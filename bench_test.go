package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// The benchmarks of the hot paths. The store benchmarks run on both stores
// with their durable defaults; for figures against the plain-INSERT floor
// use opledger bench (docs/performance.md).
//
//	go test -run '^$' -bench . -benchtime 2000x .

var benchPayload = json.RawMessage(`{"units":2,"order":"BENCH","lines":[{"sku":"A-1","qty":1},{"sku":"B-2","qty":3}]}`)

func BenchmarkFingerprint(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := opledger.Fingerprint("crm.create_record", "crm", benchPayload, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := opledger.ValidateKey("order:2026-11-30:ACME-000123:create"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShowOperation encodes an operation as the API, the console and
// opledger ops show it (MarshalJSON, Operation.Masked), with five
// sensitive fields (two of them e-mail addresses, matched in any case)
// and a saved response of 40 strings, a few of which quote them.
func BenchmarkShowOperation(b *testing.B) {
	op := &opledger.Operation{Key: "k:1", Action: "crm.create", Destination: "crm", DestinationRef: "CRM-1",
		Payload:         json.RawMessage(`{"email":"ana@example.invalid","cc":"bo@example.invalid","name":"Ana Perez","phone":"+34 600 000 000","iban":"ES7620770024003102575766","units":2}`),
		SensitiveFields: []string{"email", "cc", "name", "phone", "iban"}}
	resp := map[string]string{}
	for i := range 40 {
		resp[fmt.Sprintf("field%02d", i)] = fmt.Sprintf("value number %d of the destination's answer", i)
	}
	resp["note"], resp["error"] = "created for Ana Perez", "address ANA@example.invalid noted"
	op.Response, _ = json.Marshal(resp)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(op); err != nil {
			b.Fatal(err)
		}
	}
}

func openBenchLedger(b *testing.B, st testdb.Store) *opledger.Ledger {
	b.Helper()
	l, err := opledger.Open(context.Background(), st.NewDSN(b), opledger.Options{Worker: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkClaim claims a new key with its intent inline (record + claim in
// one transaction), serially and from parallel callers.
func BenchmarkClaim(b *testing.B) {
	for _, st := range testdb.Stores() {
		for _, par := range []bool{false, true} {
			name := st.Name
			if par {
				name += "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				l := openBenchLedger(b, st)
				ctx := context.Background()
				var n atomic.Int64
				claim := func() error {
					key := "bench:" + strconv.FormatInt(n.Add(1), 10)
					_, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "noop", Destination: "bench", Payload: benchPayload}})
					return err
				}
				b.ResetTimer()
				if !par {
					for b.Loop() {
						if err := claim(); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(4) // 4 × GOMAXPROCS callers
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := claim(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkReport records a success outcome for a claimed operation; the
// claims are made before the timer starts.
func BenchmarkReport(b *testing.B) {
	for _, st := range testdb.Stores() {
		b.Run(st.Name, func(b *testing.B) {
			l := openBenchLedger(b, st)
			ctx := context.Background()
			type claimed struct {
				key string
				c   *opledger.Claim
			}
			claims := make([]claimed, b.N)
			for i := range claims {
				key := fmt.Sprintf("bench:%d", i)
				c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "noop", Destination: "bench", Payload: benchPayload}})
				if err != nil {
					b.Fatal(err)
				}
				claims[i] = claimed{key, c}
			}
			b.ResetTimer()
			for i := range b.N {
				c := claims[i]
				if _, err := l.Report(ctx, c.key, c.c.AttemptID, c.c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "ref"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLifecycle runs whole protected operations (claim of a new key
// with its intent inline, then a success report) from 16 parallel callers:
// the path opledger bench measures, without its durability settings.
func BenchmarkLifecycle(b *testing.B) {
	benchLifecycle(b, nil)
}

// BenchmarkLifecycleSensitive is BenchmarkLifecycle with every payload
// field sensitive, as the proxy records its requests: each decision masks
// the text it stores.
func BenchmarkLifecycleSensitive(b *testing.B) {
	benchLifecycle(b, []string{"units", "order", "lines"})
}

func benchLifecycle(b *testing.B, sensitive []string) {
	for _, st := range testdb.Stores() {
		b.Run(st.Name, func(b *testing.B) {
			l := openBenchLedger(b, st)
			ctx := context.Background()
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8) // 8 × GOMAXPROCS callers
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := "bench:" + strconv.FormatInt(n.Add(1), 10)
					c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "noop", Destination: "bench", Payload: benchPayload, SensitiveFields: sensitive}})
					if err == nil {
						_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "ref"})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCompact reduces finished operations past Retention to
// tombstones (Ledger.Compact's first step), one run over b.N operations
// of one attempt each; the operations are made before the timer starts.
// A deployment whose operations finish faster than retention compacts
// them grows without end, so this rate bounds the sustained throughput
// a ledger with retention can take.
//
//	go test -run '^$' -bench BenchmarkCompact -benchtime 2000x .
func BenchmarkCompact(b *testing.B) {
	for _, st := range testdb.Stores() {
		b.Run(st.Name, func(b *testing.B) {
			ctx := context.Background()
			var offset atomic.Int64
			l, err := opledger.Open(ctx, st.NewDSN(b), opledger.Options{
				Worker: "bench", Retention: time.Hour,
				Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) },
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			for i := range b.N {
				key := "bench:" + strconv.Itoa(i)
				c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "noop", Destination: "bench", Payload: benchPayload}})
				if err == nil {
					_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "ref"})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			offset.Store(int64(2 * time.Hour))
			b.ReportAllocs()
			b.ResetTimer()
			res, err := l.Compact(ctx)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if res.Tombstoned != b.N {
				b.Fatalf("compacted %d of %d operations", res.Tombstoned, b.N)
			}
		})
	}
}

// BenchmarkReceiveEvent receives events whose rule records two
// operations each (the keys of the second under a prefix, as a
// workflow's steps have), one after the other: an event's transaction
// reads and locks the keys it writes in key order before it plans them.
//
//	go test -run '^$' -bench BenchmarkReceiveEvent -benchtime 2000x .
func BenchmarkReceiveEvent(b *testing.B) {
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: order-paid
    source: shop
    type: order.paid
    operations:
      - key: "order:{data.id}:invoice"
        action: erp.create_invoice
        destination: erp
        payload: {order: "{data.id}"}
      - key: "mail/{data.id}"
        action: mail.send_receipt
        destination: mail
        payload: {order: "{data.id}"}
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range testdb.Stores() {
		b.Run(st.Name, func(b *testing.B) {
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(b), opledger.Options{Worker: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				id := strconv.Itoa(i)
				res, err := l.ReceiveEvent(ctx, rules, opledger.Event{Source: "shop", EventID: "e" + id, Type: "order.paid",
					Payload: json.RawMessage(`{"id":"` + id + `"}`)})
				if err != nil {
					b.Fatal(err)
				}
				if res.Status != opledger.EventApplied || len(res.Operations) != 2 {
					b.Fatalf("event %s: %s (%s), %d operations", id, res.Status, res.Event.Reason, len(res.Operations))
				}
			}
		})
	}
}

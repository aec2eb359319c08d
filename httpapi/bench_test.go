package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// BenchmarkAPILifecycle runs protected operations through the HTTP API on
// loopback, from 8 × GOMAXPROCS parallel callers: a claim with the intent
// inline, then a success outcome, two round trips, as opledger bench
// --mode http does, without a deployment's durability settings. Its
// profile shows what the API adds to the library's cost.
//
//	go test -run '^$' -bench BenchmarkAPILifecycle -benchtime 5000x ./httpapi/
func BenchmarkAPILifecycle(b *testing.B) {
	for _, st := range testdb.Stores() {
		b.Run(st.Name, func(b *testing.B) {
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(b), opledger.Options{})
			if err != nil {
				b.Fatal(err)
			}
			token, _, err := l.CreateToken(ctx, "bench", opledger.ReadWrite)
			if err != nil {
				b.Fatal(err)
			}
			srv := testrig.Serve(b, l, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SweepInterval: time.Hour})
			// One idle connection for each caller (net/http keeps 2 per
			// host by default): the figures are the server's, not connects.
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.Cleanup(hc.CloseIdleConnections)
			c := client.New(srv.URL(), token, hc)
			in := client.Intent{Action: "noop", Destination: "bench", Payload: json.RawMessage(`{"order":"A-1","amount":120}`)}
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := "bench:" + strconv.FormatInt(n.Add(1), 10)
					cl, err := c.Claim(ctx, key, client.ClaimRequest{Intent: &in})
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := c.Report(ctx, key, cl.AttemptID, client.Report{FencingToken: cl.FencingToken,
						Outcome: opledger.OutcomeSucceeded, DestinationRef: "noop"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

package proxy_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
)

// BenchmarkProxy sends protected requests, each with a fresh
// Idempotency-Key, through the proxy on loopback to a fake upstream on
// loopback, from 16 parallel callers: what opledger bench --mode proxy
// measures, without the durability settings of a deployment. Every
// request's payload is sensitive, as the proxy records it, so the figures
// include masking the text the ledger stores.
//
//	go test -run '^$' -bench BenchmarkProxy -benchtime 2000x ./proxy/
func BenchmarkProxy(b *testing.B) {
	for _, st := range testdb.Stores() {
		b.Run(st.Name, func(b *testing.B) {
			bn := setup(b, st, fakedest.Options{}, nil)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.Cleanup(client.CloseIdleConnections)
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8) // 8 × GOMAXPROCS callers
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					req, err := http.NewRequest(http.MethodPost, bn.url+"/records",
						strings.NewReader(`{"external_ref":"bench-`+strconv.FormatInt(i, 10)+`","amount":120}`))
					if err != nil {
						b.Error(err)
						return
					}
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", token)
					req.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(i, 10))
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

package sqlitestore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/bench"
)

// busyWriters is how many goroutines of the busy process write at once.
const busyWriters = 32

// BenchmarkSharedFileLoneWriter measures what a process that writes now
// and then waits for its writes beside another process that writes all
// the time, on one SQLite file: the busy process (TestBusyWriterProcess,
// a process of its own) runs 32 callers of protected operations (a claim
// with its intent inline, then a success report: two write transactions)
// back to back; this process runs one such operation every 50 ms and
// reports the latency of those operations (lone_p50_ms, lone_p99_ms,
// lone_max_ms), the busy process's rate over the same time (busy_ops/s),
// and what the lone process's WriteLockWaits counted per operation of two
// transactions (lone_queued/op, lone_queued_ms/op). Both processes use
// the store as serve does: its own group commit inside each, and the
// file's write lock between them.
//
//	go test -run '^$' -bench BenchmarkSharedFileLoneWriter -benchtime 200x ./internal/store/sqlitestore/
func BenchmarkSharedFileLoneWriter(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{Tenant: benchTenant, Worker: "lone", Lease: time.Hour})
	require.NoError(b, err)
	defer l.Close()

	busy := exec.Command(os.Args[0], "-test.run=^TestBusyWriterProcess$", "-test.count=1")
	busy.Env = append(os.Environ(), "OPLEDGER_BUSY_WRITER_DB="+path)
	stdin, err := busy.StdinPipe()
	require.NoError(b, err)
	stdout, err := busy.StdoutPipe()
	require.NoError(b, err)
	busy.Stderr = os.Stderr
	require.NoError(b, busy.Start())
	defer busy.Process.Kill()
	lines := bufio.NewScanner(stdout)
	// The busy process says "writing" once its first writes committed.
	for lines.Scan() && lines.Text() != "writing" {
	}
	require.NoError(b, lines.Err())

	lats := make([]time.Duration, 0, b.N)
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	b.ResetTimer()
	for i := range b.N {
		<-pace.C
		start := time.Now()
		require.NoError(b, bench.ProtectedOperation(ctx, l, "lone-"+strconv.Itoa(i)))
		lats = append(lats, time.Since(start))
	}
	b.StopTimer()
	// Closing its stdin stops the busy process, which prints its count.
	require.NoError(b, stdin.Close())
	var busyOps int64
	var busyFor time.Duration
	for lines.Scan() {
		if n, ok := strings.CutPrefix(lines.Text(), "ops "); ok {
			f := strings.Fields(n)
			busyOps, _ = strconv.ParseInt(f[0], 10, 64)
			busyFor, _ = time.ParseDuration(f[1])
		}
	}
	require.NoError(b, busy.Wait())
	require.Positive(b, busyOps, "the busy process wrote")

	b.ReportMetric(bench.Quantile(lats, 0.5), "lone_p50_ms")
	b.ReportMetric(bench.Quantile(lats, 0.99), "lone_p99_ms")
	b.ReportMetric(bench.Quantile(lats, 1), "lone_max_ms")
	b.ReportMetric(float64(busyOps)/busyFor.Seconds(), "busy_ops/s")
	// What the lone process's own counters saw (Ledger.WriteLockWaits).
	w, _ := l.WriteLockWaits()
	b.ReportMetric(float64(w.Waits)/float64(b.N), "lone_queued/op")
	b.ReportMetric(float64(w.Waited.Microseconds())/1000/float64(b.N), "lone_queued_ms/op")
	b.ReportMetric(0, "ns/op")
}

// TestBusyWriterProcess is the busy process of
// BenchmarkSharedFileLoneWriter: busyWriters callers of protected
// operations on the ledger it names, until its stdin closes; it then
// prints how many it completed and in how long.
func TestBusyWriterProcess(t *testing.T) {
	path := os.Getenv("OPLEDGER_BUSY_WRITER_DB")
	if path == "" {
		t.Skip("run by BenchmarkSharedFileLoneWriter")
	}
	ctx, stop := context.WithCancel(context.Background())
	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{Tenant: benchTenant, Worker: "busy", Lease: time.Hour})
	require.NoError(t, err)
	defer l.Close()
	var ops atomic.Int64
	var first sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := range busyWriters {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				err := bench.ProtectedOperation(ctx, l, fmt.Sprintf("busy-%d-%d", w, i))
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				ops.Add(1)
				first.Do(func() { fmt.Println("writing") })
			}
		})
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until stdin closes
	stop()
	took := time.Since(start)
	wg.Wait()
	fmt.Printf("ops %d %s\n", ops.Load(), took)
}

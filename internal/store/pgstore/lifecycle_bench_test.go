package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/bench"
	"github.com/opledger/opledger/internal/testdb"
)

// BenchmarkLifecycleWrites runs whole protected operations (a claim of a
// new key with its intent inline, then a success report) from one caller
// and from 32, and reports what each operation costs the server, figures
// that depend far less on the noise of a shared machine than ns/op:
//
//   - wal-bytes/op: the WAL the server wrote (pg_current_wal_lsn before
//     and after; the run is alone on the server, or the figure counts the
//     others too);
//
//   - server-cpu-µs/op: the CPU time (user and system) of the server's
//     processes, read from /proc, where the server runs on this machine
//     (Linux; omitted elsewhere);
//
//   - cpu-µs/op: the CPU time of this process, the client side.
//
//     go test -run '^$' -bench BenchmarkLifecycleWrites -benchtime 20000x ./internal/store/pgstore/
func BenchmarkLifecycleWrites(b *testing.B) {
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d", callers), func(b *testing.B) { benchmarkLifecycleWrites(b, callers) })
	}
}

func benchmarkLifecycleWrites(b *testing.B, callers int) {
	ctx := context.Background()
	dsn := testdb.PostgresDSN(b)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: benchTenant, Worker: "bench", Lease: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var seq atomic.Int64
	op := func() error { return bench.ProtectedOperation(ctx, l, "life:"+strconv.FormatInt(seq.Add(1), 10)) }
	// The pool's connections and the statements they prepare.
	for range 2 * callers {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	walLSN := func() string {
		var lsn string
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	lsnBefore := walLSN()
	serverBefore, serverOK := testdb.PostgresServerCPU()
	testdb.RunCallers(b, callers, op)
	serverAfter, serverAfterOK := testdb.PostgresServerCPU()
	var wal float64
	if err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)`, lsnBefore).Scan(&wal); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(wal/float64(b.N), "wal-bytes/op")
	if serverOK && serverAfterOK {
		b.ReportMetric(float64(serverAfter-serverBefore)/float64(b.N), "server-cpu-µs/op")
	}
}

package sqlitestore_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/bench"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/store/storetest"
	"github.com/opledger/opledger/internal/testdb"
)

// benchTenant owns both the preloaded operations and the claimed ones, so
// that the tenant's due index holds everything the table holds.
const benchTenant = "bench"

// BenchmarkClaim measures claims (storetest.BenchClaim: next,
// next_all_tenants, key and next_parallel, which on SQLite's one writer
// shows queueing, not parallelism) on an empty SQLite file and on one that
// already holds 1,000,000 recorded operations (sqlitestore.SyntheticMix,
// with one attempt and three timeline entries each), loaded with SQL.
//
// sync=full is the default configuration, an fsync per commit;
// sync=normal (Options.SQLiteSynchronousNormal) leaves the fsync to WAL
// checkpoints so that the figures show the work of the statements.
//
//	go test -run '^$' -bench BenchmarkClaim -benchtime 2000x ./internal/store/sqlitestore/
func BenchmarkClaim(b *testing.B) {
	// Both tables are built first.
	storetest.BenchClaim(b, "sync", []string{"full", "normal"},
		[]storetest.ClaimFixture{newClaimFixture(b, 0), newClaimFixture(b, 1_000_000)})
}

type claimFixture struct {
	ctx  context.Context
	path string
	// ledgers by synchronous mode: "full" (the default) and "normal".
	ledgers map[string]*opledger.Ledger
	rows    int
	rounds  int
}

func newClaimFixture(b *testing.B, rows int) *claimFixture {
	b.Helper()
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	f := &claimFixture{ctx: ctx, path: path, ledgers: map[string]*opledger.Ledger{}, rows: rows}
	for mode, normal := range map[string]bool{"full": false, "normal": true} {
		l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{Tenant: benchTenant, Worker: "bench",
			Lease: time.Hour, SQLiteSynchronousNormal: normal})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		f.ledgers[mode] = l
	}
	if rows > 0 {
		start := time.Now()
		if err := sqlitestore.LoadSynthetic(ctx, path, benchTenant, rows, true); err != nil {
			b.Fatal(err)
		}
		b.Logf("loaded %d operations (%s) with attempts and timeline in %s", rows, sqlitestore.SyntheticMix, time.Since(start).Round(time.Millisecond))
	}
	return f
}

func (f *claimFixture) Rows() int { return f.rows }

func (f *claimFixture) Ledger(setting string) *opledger.Ledger { return f.ledgers[setting] }

// Prepare empties the file of earlier rounds' operations, inserts b.N due
// operations and resets the timer. It returns their key prefix.
func (f *claimFixture) Prepare(b *testing.B) string {
	b.Helper()
	b.StopTimer()
	f.rounds++
	db, err := sql.Open("sqlite", "file:"+f.path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`DELETE FROM operations WHERE key LIKE 'claim%'`,
		`DELETE FROM attempts WHERE key LIKE 'claim%'`,
		`DELETE FROM timeline WHERE key LIKE 'claim%'`,
	} {
		if _, err := db.ExecContext(f.ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	prefix := fmt.Sprintf("claim%d:", f.rounds)
	if _, err := sqlitestore.InsertDue(f.ctx, f.path, benchTenant, prefix, b.N); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.StartTimer()
	return prefix
}

// BenchmarkLifecycleWrites measures the write path of one protected
// operation, as opledger bench runs it: Ledger.Claim with the intent inline
// (record and claim in one transaction), then Ledger.Report of a success,
// on a real file with the default synchronous=FULL: c=1 one caller at a
// time (every write its own transaction), c=32 from 32 goroutines (their
// writes share transactions through group commit).
//
// Besides ns/op and allocations it reports wal-bytes/op, the bytes the two
// commits append to the WAL (every page a transaction changes is written
// once per commit, 4 KiB and a 24-byte frame header each), and
// wal-pages/op, and cpu-µs/op, the CPU time the process spent per
// operation (user and system; less sensitive than ns/op to other work on
// the machine, though not immune). A read transaction held open on another connection keeps
// checkpoints from restarting the WAL, so that the growth of its frame
// count is exactly what the operations wrote. Unlike ns/op, these do not
// depend on the noise of a shared machine. It also logs the commits and
// the WAL frames per commit of each b-tree (logFramesByBtree): which
// tables and indexes a commit's pages belong to.
//
//	go test -run '^$' -bench BenchmarkLifecycleWrites -benchtime 4000x ./internal/store/sqlitestore/
func BenchmarkLifecycleWrites(b *testing.B) {
	for _, keys := range []string{"sequential", "random"} {
		for _, callers := range []int{1, 32} {
			b.Run(fmt.Sprintf("keys=%s/c=%d", keys, callers), func(b *testing.B) { benchmarkLifecycleWrites(b, callers, keys == "random") })
		}
	}
}

func benchmarkLifecycleWrites(b *testing.B, callers int, randomKeys bool) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{Tenant: benchTenant, Worker: "bench", Lease: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var seq atomic.Int64
	op := func() error {
		key := "life:" + strconv.FormatInt(seq.Add(1), 10)
		if randomKeys {
			sum := sha256.Sum256([]byte(key))
			key = "life:" + hex.EncodeToString(sum[:24])
		}
		return bench.ProtectedOperation(ctx, l, key)
	}
	pin, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		b.Fatal(err)
	}
	defer pin.Close()
	pin.SetMaxOpenConns(2)
	rtx, err := pin.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rtx.Rollback()
	var n int
	if err := rtx.QueryRowContext(ctx, `SELECT COUNT(*) FROM operations`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	// The first commit after the pin may still restart a WAL that was
	// checkpointed to its end; the reader then reads the database file
	// alone, and no checkpoint can copy pages into it, nor the WAL restart
	// again, until the reader ends.
	if err := op(); err != nil {
		b.Fatal(err)
	}
	// The frames in the WAL, as a passive checkpoint from a third
	// connection reports them (it copies nothing the reader may need).
	frames := func() int64 {
		var busy, log, done int64
		if err := pin.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
			b.Fatal(err)
		}
		return log
	}
	before := frames()
	walStart := walSize(b, path)
	testdb.RunCallers(b, callers, op)
	grown := float64(frames() - before)
	b.ReportMetric(grown*(walPageSize+walFrameHeader)/float64(b.N), "wal-bytes/op")
	b.ReportMetric(grown/float64(b.N), "wal-pages/op")
	logFramesByBtree(b, pin, path, walStart)
}

// A WAL frame is a page of the database and its header.
const walPageSize, walFrameHeader = 4096, 24

// walSize is the size of the WAL of the database at path.
func walSize(b *testing.B, path string) int64 {
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}

// logFramesByBtree logs, in one line, how many commits the frames
// appended to the WAL since offset from (no checkpoint has copied
// them: a reader pins them) and how many frames per commit each b-tree
// wrote, its leaf and interior pages together, naming pages with the
// dbstat table. A page that changed b-tree during the run (freed and
// reused) counts for its b-tree at the end. Runs of fewer than ten
// commits (the benchmark's first, b.N = 1) are not logged: benchmarks keep
// only the last ten lines of their log.
func logFramesByBtree(b *testing.B, db *sql.DB, path string, from int64) {
	rows, err := db.Query(`SELECT name, pageno FROM dbstat`)
	if err != nil {
		b.Fatal(err)
	}
	names := map[uint32]string{}
	for rows.Next() {
		var name string
		var page uint32
		if err := rows.Scan(&name, &page); err != nil {
			b.Fatal(err)
		}
		names[page] = name
	}
	if err := rows.Close(); err != nil {
		b.Fatal(err)
	}
	names[1] = "page 1" // the header: page count, free list
	wal, err := os.ReadFile(path + "-wal")
	if err != nil {
		b.Fatal(err)
	}
	// Frames follow the WAL's 32-byte header back to back; a frame whose
	// second word (the database size) is not zero ends a commit.
	counts := map[string]int{}
	commits, frames := 0, 0
	for off := max(from, 32); off+walFrameHeader+walPageSize <= int64(len(wal)); off += walFrameHeader + walPageSize {
		name, ok := names[binary.BigEndian.Uint32(wal[off:])]
		if !ok {
			name = "free"
		}
		counts[name]++
		frames++
		if binary.BigEndian.Uint32(wal[off+4:]) != 0 {
			commits++
		}
	}
	if commits < 10 {
		return
	}
	keys := slices.SortedFunc(maps.Keys(counts), func(x, y string) int { return cmp.Compare(counts[y], counts[x]) })
	var out strings.Builder
	fmt.Fprintf(&out, "%d commits, %.1f frames each:", commits, float64(frames)/float64(commits))
	for _, k := range keys {
		fmt.Fprintf(&out, " %s %.2f", k, float64(counts[k])/float64(commits))
	}
	b.Log(out.String())
}

// BenchmarkStats measures Ledger.Stats, which /metrics, /v1/stats and the
// console read, across every tenant of a file holding 100,000 and then
// 1,000,000 operations (sqlitestore.SyntheticMix, one attempt each). It
// reads every live operation and attempt, so its time grows with the
// ledger (docs/scaling.md).
// Each size runs with one caller and with 16 at once
// (storetest.BenchStats), whose concurrent calls share reads.
//
//	go test -run '^$' -bench BenchmarkStats -benchtime 3x ./internal/store/sqlitestore/
func BenchmarkStats(b *testing.B) {
	for _, rows := range []int{100_000, 1_000_000} {
		storetest.BenchStats(b, newClaimFixture(b, rows).ledgers["full"], rows)
	}
}

// BenchmarkCompactEvents measures the first retention run over a backlog of
// inbound events: each round loads events and twice as many deliveries
// (half of them duplicates), all received 500 days ago, with SQL, then
// times one Ledger.Compact, which deletes the deliveries (past Retention)
// and the events (past TombstoneRetention) in transactions of 1,000 rows
// and carries their counts. It fails unless EventStats is the same before
// and after.
//
//	go test -run '^$' -bench BenchmarkCompactEvents -benchtime 1x ./internal/store/sqlitestore/
func BenchmarkCompactEvents(b *testing.B) {
	for _, events := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			ctx := context.Background()
			for range b.N {
				b.StopTimer()
				path := filepath.Join(b.TempDir(), "ledger.db")
				l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{})
				if err != nil {
					b.Fatal(err)
				}
				db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
				if err != nil {
					b.Fatal(err)
				}
				old := time.Now().Add(-500 * 24 * time.Hour).UnixMicro()
				for _, q := range []string{
					`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < ?)
					INSERT INTO events (tenant, source, event_id, type, payload_sha256, status, received_at)
					SELECT 'default', 'bench', 'evt-' || i, 'bench', 'h', 'applied', ? + i FROM n`,
					`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2 * ?)
					INSERT INTO deliveries (tenant, source, event_id, received_at, duplicate, payload_sha256)
					SELECT 'default', 'bench', 'evt-' || ((i - 1) % ?1 + 1), ?2 + i, i > ?1, 'h' FROM n`,
				} {
					if _, err := db.ExecContext(ctx, q, events, old); err != nil {
						b.Fatal(err)
					}
				}
				db.Close()
				storetest.TimeCompactEvents(b, l, events)
				l.Close()
			}
		})
	}
}

// BenchmarkOldestDue measures Ledger.OldestDue (the read behind
// Stats.OldestDueSeconds, opledger_oldest_due_seconds and the exception
// queue's "Waiting for a worker"). It reads the tenant's pending
// operations oldest first until no later one can have waited longer, and
// when more than store.OldestDueScanRows of them wait for their retry,
// the due ones by their index instead: "due=N" is a backlog of N due
// operations (it reads two of them, whatever N), "backoff=N" a ledger
// (sqlitestore.SyntheticMix, 20 times N operations) whose N pending ones
// all wait a day for their retry, then one due operation.
//
//	go test -run '^$' -bench BenchmarkOldestDue -benchtime 5x ./internal/store/sqlitestore/
func BenchmarkOldestDue(b *testing.B) {
	ctx := context.Background()
	measure := func(b *testing.B, l *opledger.Ledger) {
		b.ResetTimer()
		for b.Loop() {
			op, waited, err := l.OldestDue(ctx)
			if err != nil || op == nil || waited < 0 {
				b.Fatalf("%v %v %v", op, waited, err)
			}
		}
	}
	for _, due := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("due=%d", due), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "ledger.db")
			l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{Tenant: benchTenant})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			if _, err := sqlitestore.InsertDue(ctx, path, benchTenant, "due:", due); err != nil {
				b.Fatal(err)
			}
			measure(b, l)
		})
	}
	for _, rows := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("backoff=%d", rows*5/100), func(b *testing.B) {
			f := newClaimFixture(b, rows)
			if _, err := sqlitestore.InsertDue(ctx, f.path, benchTenant, "due:", 1); err != nil {
				b.Fatal(err)
			}
			measure(b, f.ledgers["full"])
		})
	}
}

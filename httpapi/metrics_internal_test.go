package httpapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// scrapeClock is the collector's clock in these tests: it moves only when
// a test advances it.
type scrapeClock struct{ ns atomic.Int64 }

func (c *scrapeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *scrapeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// scraped is what one scrape of the ledger's figures showed.
type scraped struct {
	up, age    float64
	inProgress float64
}

// scrape gathers reg once, as a Prometheus scrape does, and picks out the
// figures the tests follow.
func scrape(t *testing.T, reg *prometheus.Registry) scraped {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var s scraped
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "opledger_store_up":
				s.up = m.GetGauge().GetValue()
			case "opledger_figures_age_seconds":
				s.age = m.GetGauge().GetValue()
			case "opledger_operations":
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "state" && lp.GetValue() == string(opledger.StateInProgress) {
						s.inProgress = m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	return s
}

// newTestCollector registers a collector with maxAge and the test's clock
// over a fresh SQLite ledger.
func newTestCollector(t *testing.T, maxAge time.Duration) (*opledger.Ledger, *ledgerCollector, *scrapeClock, *prometheus.Registry) {
	t.Helper()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	clock := &scrapeClock{}
	clock.advance(time.Hour)
	c := newLedgerCollector(l, slog.New(slog.NewTextHandler(io.Discard, nil)), maxAge)
	c.now = clock.now
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return l, c, clock, reg
}

func claimNew(t *testing.T, l *opledger.Ledger, key string) {
	t.Helper()
	_, err := l.Claim(context.Background(), key, opledger.ClaimOptions{
		Intent: &opledger.Intent{Key: key, Action: "create", Destination: "crm", Payload: []byte(`{"n":1}`)}})
	require.NoError(t, err)
}

// TestMetricsShareReads: scrapes within the max age of a read serve its
// figures (and say how old they are); the first scrape after it reads
// again; scrapes arriving together share one read.
func TestMetricsShareReads(t *testing.T) {
	t.Parallel()
	l, c, clock, reg := newTestCollector(t, 10*time.Second)

	claimNew(t, l, "metrics:1")
	require.Equal(t, scraped{up: 1, age: 0, inProgress: 1}, scrape(t, reg))
	require.Equal(t, 1, c.reads)

	claimNew(t, l, "metrics:2")
	clock.advance(9 * time.Second)
	require.Equal(t, scraped{up: 1, age: 9, inProgress: 1}, scrape(t, reg), "within the max age: the last read's figures")
	require.Equal(t, 1, c.reads)

	clock.advance(time.Second)
	require.Equal(t, scraped{up: 1, age: 0, inProgress: 2}, scrape(t, reg), "at the max age: read again")
	require.Equal(t, 2, c.reads)

	// Sixteen scrapes released at once, after the figures have expired:
	// one reads, the others wait for its figures.
	claimNew(t, l, "metrics:3")
	clock.advance(time.Minute)
	start := make(chan struct{})
	results := make([]scraped, 16)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			results[i] = scrape(t, reg)
		})
	}
	close(start)
	wg.Wait()
	for _, r := range results {
		require.Equal(t, scraped{up: 1, age: 0, inProgress: 3}, r)
	}
	require.Equal(t, 3, c.reads, "concurrent scrapes share one read")
}

// TestMetricsMaxAgeNegative: a negative max age reads on every scrape.
func TestMetricsMaxAgeNegative(t *testing.T) {
	t.Parallel()
	l, c, _, reg := newTestCollector(t, -1)
	claimNew(t, l, "metrics:1")
	require.Equal(t, scraped{up: 1, age: 0, inProgress: 1}, scrape(t, reg))
	claimNew(t, l, "metrics:2")
	require.Equal(t, scraped{up: 1, age: 0, inProgress: 2}, scrape(t, reg))
	require.Equal(t, 2, c.reads)
}

// TestMetricsFailedReadNotKept: a scrape whose read fails reports the store
// down and keeps nothing, so the next scrape reads again, even within the
// max age.
func TestMetricsFailedReadNotKept(t *testing.T) {
	t.Parallel()
	l, c, clock, reg := newTestCollector(t, 10*time.Second)
	claimNew(t, l, "metrics:1")
	require.Equal(t, scraped{up: 1, age: 0, inProgress: 1}, scrape(t, reg))

	require.NoError(t, l.Close())
	clock.advance(time.Minute)
	require.Equal(t, scraped{up: 0}, scrape(t, reg))
	require.Equal(t, scraped{up: 0}, scrape(t, reg))
	require.Equal(t, 3, c.reads, "a failed read is tried again at the next scrape")
}

// TestSQLiteMetricsOnSQLiteOnly: /metrics of a SQLite ledger counts the
// process's waits for the file's write lock (Ledger.WriteLockWaits, whose
// counting TestWriteLockWaits checks) and its writer's work
// (Ledger.WriterWork, checked by TestWriterWork): the figures the ledger
// gives at the scrape; PostgreSQL's has no such series.
func TestSQLiteMetricsOnSQLiteOnly(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			l, err := opledger.Open(context.Background(), st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			claimNew(t, l, "metrics:writer")
			rec := httptest.NewRecorder()
			metricsHandler(l, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			require.Equal(t, http.StatusOK, rec.Code)
			body := rec.Body.String()
			work, _ := l.WriterWork()
			for name, want := range map[string]string{
				"opledger_sqlite_write_lock_waits_total":        "0",
				"opledger_sqlite_write_lock_timeouts_total":     "0",
				"opledger_sqlite_write_lock_wait_seconds_total": "0",
				"opledger_sqlite_write_batches_total":           strconv.FormatInt(work.Batches, 10),
				"opledger_sqlite_writes_total":                  strconv.FormatInt(work.Writes, 10),
				"opledger_sqlite_writer_busy_seconds_total":     strconv.FormatFloat(work.Busy.Seconds(), 'g', -1, 64),
			} {
				if st.Name == "sqlite" {
					require.Contains(t, body, "\n"+name+" "+want+"\n")
				} else {
					require.NotContains(t, body, name)
				}
			}
			if st.Name == "sqlite" {
				require.Positive(t, work.Writes, "the claim's write at least")
				require.Positive(t, work.Busy)
			}
		})
	}
}

// TestAbandonedMetrics: /metrics reports the destination calls the
// process's executor abandoned (Options.AbandonedCalls) and the lookups
// its reconciler abandoned (Options.AbandonedLookups) that still run,
// read at each scrape; a server without an executor or a reconciler has
// no such series.
func TestAbandonedMetrics(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	scrapeAPI := func(opts Options) string {
		t.Helper()
		opts.Auth, opts.Logger = l, slog.New(slog.NewTextHandler(io.Discard, nil))
		h, err := New(l, opts)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		return rec.Body.String()
	}
	calls, lookups := 2, 3
	both := scrapeAPI(Options{AbandonedCalls: func() int { return calls }, AbandonedLookups: func() int { return lookups }})
	require.Contains(t, both, "\nopledger_executor_abandoned_calls 2\n")
	require.Contains(t, both, "\nopledger_reconciler_abandoned_lookups 3\n")
	calls, lookups = 0, 1
	both = scrapeAPI(Options{AbandonedCalls: func() int { return calls }, AbandonedLookups: func() int { return lookups }})
	require.Contains(t, both, "\nopledger_executor_abandoned_calls 0\n", "read at the scrape")
	require.Contains(t, both, "\nopledger_reconciler_abandoned_lookups 1\n")
	none := scrapeAPI(Options{})
	require.NotContains(t, none, "opledger_executor_abandoned_calls")
	require.NotContains(t, none, "opledger_reconciler_abandoned_lookups")
}

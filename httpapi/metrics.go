package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/opledger/opledger"
)

// ledgerCollector reads the ledger's figures from the store, so every
// server sharing a store reports the same durable totals. A read counts
// every operation still in the ledger, so scrapes share one: a scrape
// within maxAge of the last successful read serves its figures, and
// concurrent scrapes wait for the one read in progress. Labels carry
// destination names, outcomes and states only: never keys or payload.
type ledgerCollector struct {
	ledger *opledger.Ledger
	log    *slog.Logger
	maxAge time.Duration
	now    func() time.Time

	// mu is held across a read, so that scrapes arriving meanwhile use
	// its figures instead of reading again.
	mu   sync.Mutex
	last *ledgerFigures
	// reads counts the reads of the store (under mu), for tests.
	reads int

	// destinations are known before any attempt of theirs (Options.Destinations).
	destinations []string

	attempts, attemptsOpen, confirmed, duplicates, operations, recovery, up, age       *prometheus.Desc
	reviewsOverdue, oldestDue, oldestApproval, events, deliveries, duplicateDeliveries *prometheus.Desc
	stuckWorkflows                                                                     *prometheus.Desc
	processes, processesOtherSettings                                                  *prometheus.Desc
}

// ledgerFigures is one read of the ledger's figures.
type ledgerFigures struct {
	stats     *opledger.Stats
	events    *opledger.EventStats
	processes []*opledger.Process
	readAt    time.Time
}

func newLedgerCollector(l *opledger.Ledger, log *slog.Logger, maxAge time.Duration) *ledgerCollector {
	return &ledgerCollector{
		ledger: l,
		log:    log,
		maxAge: maxAge,
		now:    time.Now,
		attempts: prometheus.NewDesc("opledger_attempts_total",
			"Technical attempts that ended, by destination and outcome.", []string{"destination", "outcome"}, nil),
		attemptsOpen: prometheus.NewDesc("opledger_attempts_open",
			"Technical attempts still running (claimed, no outcome yet), by destination.", []string{"destination"}, nil),
		confirmed: prometheus.NewDesc("opledger_confirmed_effects_total",
			"Operations whose external effect is confirmed (succeeded).", nil, nil),
		duplicates: prometheus.NewDesc("opledger_duplicate_effects_total",
			"Duplicate effects detected: late successes carrying a second destination reference.", nil, nil),
		operations: prometheus.NewDesc("opledger_operations",
			"Operations in the ledger by state.", []string{"state"}, nil),
		reviewsOverdue: prometheus.NewDesc("opledger_reviews_overdue",
			"Held operations whose review time has passed: their owners have not decided in time.", nil, nil),
		oldestDue: prometheus.NewDesc("opledger_oldest_due_seconds",
			"How long the longest-waiting due pending operation has waited for a worker to claim it (0 when none is due): "+
				"growing, nothing serves its destination, or the workers are down or behind.", nil, nil),
		oldestApproval: prometheus.NewDesc("opledger_oldest_approval_wait_seconds",
			"How long the operation awaiting approval the longest has waited for an approver, since it began to wait (0 when none awaits): "+
				"nothing sends it before someone approves it.", nil, nil),
		stuckWorkflows: prometheus.NewDesc("opledger_workflows_stuck",
			"Workflows that cannot go on by themselves: a step succeeded and the next cannot be recorded until a person revises it. They hold no operation, so no other figure counts them.", nil, nil),
		recovery: prometheus.NewDesc("opledger_operator_recovery_seconds",
			"Time from an operation entering uncertain or held to an operator's decision.", nil, nil),
		events: prometheus.NewDesc("opledger_events_received_total",
			"Distinct inbound events received, by status (applied, out_of_order, conflict, unmapped).", []string{"status"}, nil),
		deliveries: prometheus.NewDesc("opledger_deliveries_total",
			"Every arrival of an inbound event, first ones included.", nil, nil),
		duplicateDeliveries: prometheus.NewDesc("opledger_duplicate_deliveries_total",
			"Arrivals of an event already received: recorded, never acted on again.", nil, nil),
		processes: prometheus.NewDesc("opledger_processes",
			"Processes that maintain the ledger (serve, proxy, or a program running Maintain), this one included, as they announce themselves every 15 s; a killed one counts for a minute.", nil, nil),
		processesOtherSettings: prometheus.NewDesc("opledger_processes_with_other_settings",
			"Processes that maintain the ledger with settings that act on the whole ledger (retention, retry policies, require_approval, owners, the destinations and rules files) other than this one's: "+
				"every process sharing a store must have the same; the log names the settings.", nil, nil),
		up: prometheus.NewDesc("opledger_store_up",
			"1 when the ledger's figures in this scrape could be read from the store, 0 when reading them failed.", nil, nil),
		age: prometheus.NewDesc("opledger_figures_age_seconds",
			"Age of the ledger's figures in this scrape: scrapes share one read for up to the server's metrics max age.", nil, nil),
	}
}

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.attempts, c.attemptsOpen, c.confirmed, c.duplicates, c.operations, c.reviewsOverdue, c.oldestDue, c.oldestApproval, c.stuckWorkflows, c.recovery, c.processes, c.processesOtherSettings,
		c.up, c.age, c.events, c.deliveries, c.duplicateDeliveries} {
		ch <- d
	}
}

// figures returns the last read's figures if they are younger than maxAge,
// and otherwise reads them again. A failed read is not kept: the next
// scrape tries again.
func (c *ledgerCollector) figures() (*ledgerFigures, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && c.now().Sub(c.last.readAt) < c.maxAge {
		return c.last, nil
	}
	c.last = nil
	c.reads++
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	readAt := c.now()
	st, err := c.ledger.Stats(ctx, true)
	if err != nil {
		return nil, err
	}
	ev, err := c.ledger.EventStats(ctx, true)
	if err != nil {
		return nil, err
	}
	ps, err := c.ledger.Processes(ctx)
	if err != nil {
		return nil, err
	}
	c.last = &ledgerFigures{stats: st, events: ev, processes: ps, readAt: readAt}
	return c.last, nil
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	f, err := c.figures()
	if err != nil {
		c.log.Error("metrics: read stats", "error", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	st, ev := f.stats, f.events
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, c.now().Sub(f.readAt).Seconds())
	for status, n := range ev.EventsByStatus {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(n), string(status))
	}
	differing := 0
	for _, p := range f.processes {
		if len(p.OtherSettings) > 0 {
			differing++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.processes, prometheus.GaugeValue, float64(len(f.processes)))
	ch <- prometheus.MustNewConstMetric(c.processesOtherSettings, prometheus.GaugeValue, float64(differing))
	ch <- prometheus.MustNewConstMetric(c.deliveries, prometheus.CounterValue, float64(ev.Deliveries))
	ch <- prometheus.MustNewConstMetric(c.duplicateDeliveries, prometheus.CounterValue, float64(ev.DuplicateDeliveries))
	// An attempt is counted once it has ended: a counter must never go
	// down, and an attempt leaves "open" when it ends. Every destination
	// the server knows or that has had an attempt has a series of each
	// outcome and of its open attempts, at 0 until one counts: a series that first appears
	// at 1 is not an increase to Prometheus, so an alert on the first
	// lease expiry of a destination would never fire, and an open count
	// that vanished instead of going to 0 would look like missing data.
	counted := map[[2]string]int{}
	var destinations []string
	for _, d := range c.destinations {
		if _, ok := counted[[2]string{d, opledger.AttemptOpen}]; !ok {
			destinations = append(destinations, d)
			counted[[2]string{d, opledger.AttemptOpen}] = 0
		}
	}
	for _, a := range st.Attempts {
		if _, ok := counted[[2]string{a.Destination, opledger.AttemptOpen}]; !ok {
			destinations = append(destinations, a.Destination)
			counted[[2]string{a.Destination, opledger.AttemptOpen}] = 0
		}
		counted[[2]string{a.Destination, a.Outcome}] += a.Count
	}
	for _, d := range destinations {
		ch <- prometheus.MustNewConstMetric(c.attemptsOpen, prometheus.GaugeValue, float64(counted[[2]string{d, opledger.AttemptOpen}]), d)
		for _, outcome := range attemptOutcomes {
			ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.CounterValue, float64(counted[[2]string{d, outcome}]), d, outcome)
		}
	}
	// Outcomes of other names (none today), summed as the others are.
	var other [][2]string
	for _, a := range st.Attempts {
		k := [2]string{a.Destination, a.Outcome}
		if a.Outcome != opledger.AttemptOpen && !slices.Contains(attemptOutcomes, a.Outcome) && !slices.Contains(other, k) {
			other = append(other, k)
		}
	}
	for _, k := range other {
		ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.CounterValue, float64(counted[k]), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(c.confirmed, prometheus.CounterValue, float64(st.ConfirmedEffects))
	ch <- prometheus.MustNewConstMetric(c.duplicates, prometheus.CounterValue, float64(st.DuplicateEffects))
	for _, s := range opledger.States {
		ch <- prometheus.MustNewConstMetric(c.operations, prometheus.GaugeValue, float64(st.OperationsByState[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(c.reviewsOverdue, prometheus.GaugeValue, float64(st.ReviewsOverdue))
	ch <- prometheus.MustNewConstMetric(c.oldestDue, prometheus.GaugeValue, st.OldestDueSeconds)
	ch <- prometheus.MustNewConstMetric(c.oldestApproval, prometheus.GaugeValue, st.OldestApprovalWaitSeconds)
	ch <- prometheus.MustNewConstMetric(c.stuckWorkflows, prometheus.GaugeValue, float64(st.StuckWorkflows))
	buckets := map[float64]uint64{}
	for i, b := range opledger.RecoveryBuckets {
		buckets[b.Seconds()] = uint64(st.RecoveryBuckets[i])
	}
	ch <- prometheus.MustNewConstHistogram(c.recovery, uint64(st.Recoveries), st.RecoveryTotalSeconds, buckets)
}

// attemptOutcomes are the outcomes an attempt ends with: the four a
// caller reports and the two the ledger sets.
var attemptOutcomes = []string{string(opledger.OutcomeSucceeded), string(opledger.OutcomeRejected),
	string(opledger.OutcomeRetryable), string(opledger.OutcomeUncertain), opledger.AttemptAbandoned, opledger.AttemptLeaseExpired}

// sqliteCollector reports the work of this process's SQLite writer
// (Ledger.WriterWork) and its waits for other processes' writes to the
// file (Ledger.WriteLockWaits): unlike the ledger's figures, counts of
// this process alone, as the Go runtime's are.
type sqliteCollector struct {
	ledger                  *opledger.Ledger
	waits, timedOut, waited *prometheus.Desc
	batches, writes, busy   *prometheus.Desc
}

func newSQLiteCollector(l *opledger.Ledger) *sqliteCollector {
	return &sqliteCollector{
		ledger: l,
		batches: prometheus.NewDesc("opledger_sqlite_write_batches_total",
			"Shared write transactions this process's SQLite writer ran (group commit).", nil, nil),
		writes: prometheus.NewDesc("opledger_sqlite_writes_total",
			"Write calls this process's SQLite writer ran in its shared transactions, failed ones too.", nil, nil),
		busy: prometheus.NewDesc("opledger_sqlite_writer_busy_seconds_total",
			"Time this process's SQLite writer spent on its batches, from taking one to answering its callers; a rate near 1 means the writer limits the process's writes.", nil, nil),
		waits: prometheus.NewDesc("opledger_sqlite_write_lock_waits_total",
			"Write transactions of this process that queued for another process's write lock on the SQLite file.", nil, nil),
		timedOut: prometheus.NewDesc("opledger_sqlite_write_lock_timeouts_total",
			"Write transactions of this process that gave up at the busy timeout (store_busy) waiting for another process's write lock on the SQLite file.", nil, nil),
		waited: prometheus.NewDesc("opledger_sqlite_write_lock_wait_seconds_total",
			"Time write transactions of this process spent queued for another process's write lock on the SQLite file.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *sqliteCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.waits
	ch <- c.timedOut
	ch <- c.waited
	ch <- c.batches
	ch <- c.writes
	ch <- c.busy
}

// Collect implements prometheus.Collector.
func (c *sqliteCollector) Collect(ch chan<- prometheus.Metric) {
	w, _ := c.ledger.WriteLockWaits()
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(w.Waits))
	ch <- prometheus.MustNewConstMetric(c.timedOut, prometheus.CounterValue, float64(w.TimedOut))
	ch <- prometheus.MustNewConstMetric(c.waited, prometheus.CounterValue, w.Waited.Seconds())
	work, _ := c.ledger.WriterWork()
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(work.Batches))
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(work.Writes))
	ch <- prometheus.MustNewConstMetric(c.busy, prometheus.CounterValue, work.Busy.Seconds())
}

// eventsRoute is the route label of events posted to POST /v1/events;
// a webhook's is webhookRoute(source).
const eventsRoute = "/v1/events"

// webhookRoute is the route label of a webhook source's events.
func webhookRoute(source string) string { return "/v1/webhooks/" + source }

// newRefusedEvents returns the counter of events refused because a rule
// could not map them. Nothing of such an event is recorded, so unlike the
// ledger's figures it counts this process's refusals only, since it
// started. Its labels are the rule's name and the route, both from the
// server's configuration; each pair starts at 0, so that a first refusal
// is an increase to Prometheus.
func newRefusedEvents(opts Options) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_events_refused_total",
		Help: "Events refused (422 mapping_failed) because their rule could not map them, by rule and route: counted by this process since it started; nothing of them is recorded.",
	}, []string{"rule", "route"})
	routes := []string{eventsRoute}
	for source := range opts.Webhooks {
		routes = append(routes, webhookRoute(source))
	}
	for _, rule := range opts.Rules.List() {
		for _, route := range routes {
			c.WithLabelValues(rule.Name, route)
		}
	}
	return c
}

// unknownWebhookSource is the source label of a delivery to a webhook
// source the server does not configure: not a name in the key syntax, so
// no configured source's.
const unknownWebhookSource = "(unknown)"

// newRefusedWebhooks returns the counter of webhook deliveries refused
// before they became events, by source and reason (the problem type
// answered: invalid_signature, invalid_input, payload_too_large,
// unsupported_media, request_timeout; or unknown_source, under the source
// unknownWebhookSource, for a delivery to a source not configured).
// Nothing of them is recorded, so it counts this process's refusals since
// it started. Each source's invalid_signature starts at 0: a rotated
// secret refuses every delivery, and the first is an increase to
// Prometheus; so does unknown_source (a provider pointed at a misspelt or
// removed endpoint).
func newRefusedWebhooks(opts Options) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_webhooks_refused_total",
		Help: "Webhook deliveries refused before they became events (a bad signature, no event id or type, a body too large or compressed, a source not configured: source \"(unknown)\", reason unknown_source), by source and reason: counted by this process since it started; nothing of them is recorded.",
	}, []string{"source", "reason"})
	for source := range opts.Webhooks {
		c.WithLabelValues(source, "invalid_signature")
	}
	c.WithLabelValues(unknownWebhookSource, "unknown_source")
	return c
}

// refusedEventReasons are the reasons a request to POST /v1/events is
// refused before it becomes an event: the problem types answered, but
// invalid_key, counted as invalid_input (as a webhook's event id is).
// unauthorized and forbidden (and invalid_input for a query parameter)
// refuse it before its body is read.
var refusedEventReasons = []string{"invalid_json", "invalid_input", "payload_too_large", "unsupported_media", "request_timeout", "unauthorized", "forbidden"}

// newRefusedEventRequests returns the counter of requests to
// POST /v1/events refused before they became events, by reason (the
// problem type answered, refusedEventReasons): the body of such a request
// is no event (malformed JSON, an unknown member, no event id or one not
// in the key syntax), or is too large, compressed or late; or the request
// was refused before its body was read (no token or an unknown one, a
// read-only token, a query parameter). Nothing of them
// is recorded, so it counts this process's refusals since it started; its
// one label comes from that fixed list, never from the request (a source
// or event id is the sender's text). Each reason starts at 0, so that a
// first refusal is an increase to Prometheus.
func newRefusedEventRequests() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_event_requests_refused_total",
		Help: "Requests to POST /v1/events refused before they became events (no token or a read-only one, a body that is no JSON event, no event id or type, a body too large or compressed), by reason: counted by this process since it started; nothing of them is recorded.",
	}, []string{"reason"})
	for _, reason := range refusedEventReasons {
		c.WithLabelValues(reason)
	}
	return c
}

// processGauge is a gauge of this process's own, read from n at each
// scrape (the executor's abandoned calls, the reconciler's lookups).
func processGauge(name, help string, n func() int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(n()) })
}

// metricsHandler serves /metrics: the ledger's figures, read at most once
// per maxAge (negative: on every scrape), this process's own figures
// (refused events, event requests and webhook deliveries, abandoned calls
// and lookups), the Go
// runtime's figures and, on SQLite, the process's waits for the file's
// write lock.
func metricsHandler(l *opledger.Ledger, log *slog.Logger, maxAge time.Duration, destinations []string, own ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	lc := newLedgerCollector(l, log, maxAge)
	lc.destinations = slices.Clone(destinations)
	reg.MustRegister(lc, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range own {
		reg.MustRegister(c)
	}
	if _, ok := l.WriteLockWaits(); ok {
		reg.MustRegister(newSQLiteCollector(l))
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)})
}

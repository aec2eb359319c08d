package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/server"
)

// frozenClock is a ledger clock that stands still between advances, so
// that a recovery time is exactly the advance made.
type frozenClock struct {
	start time.Time
	d     atomic.Int64
}

func (c *frozenClock) advance(d time.Duration) { c.d.Add(int64(d)) }
func (c *frozenClock) now(time.Time) time.Time { return c.start.Add(time.Duration(c.d.Load())) }

// figuresServer is a server over one store that a test can stop and
// start again on the same store.
type figuresServer struct {
	url    string
	ledger *opledger.Ledger
	stop   func()
}

func startFigures(t *testing.T, dsn string, clock *frozenClock) *figuresServer {
	t.Helper()
	l, err := opledger.Open(context.Background(), dsn, opledger.Options{Clock: clock.now, Lease: time.Hour,
		Retention: 24 * time.Hour, TombstoneRetention: 48 * time.Hour,
		RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 5, InitialDelay: time.Second, MaxDelay: time.Second}})
	require.NoError(t, err)
	srv, err := server.New(l, server.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		SweepInterval: time.Hour, CompactInterval: time.Hour, API: httpapi.Options{MetricsMaxAge: -1}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, l.Close())
	}
	t.Cleanup(stop)
	return &figuresServer{url: srv.URL(), ledger: l, stop: stop}
}

// scrape reads /metrics and returns each sample's value by its name and
// labels as written ("opledger_operations{state=\"held\"}") and each
// family's type.
func scrape(t *testing.T, url string) (samples map[string]float64, types map[string]string, text string) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	samples, types = map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			types[name] = typ
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		samples[line[:i]] = v
	}
	return samples, types, string(data)
}

// TestFiguresScenario drives a scenario with known numbers through the
// API on both stores and checks every figure of DESIGN.md section 10 in
// /v1/stats (the tenant's) and /metrics (every tenant's), then again
// after a restart and after retention has compacted and forgotten what
// the scenario made: totals never go down.
func TestFiguresScenario(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			clock := &frozenClock{start: time.Now().UTC().Truncate(time.Second)}
			s := startFigures(t, dsn, clock)
			tokens := map[string]string{}
			for _, tenant := range []string{"acme", "other"} {
				l, err := s.ledger.WithTenant(tenant)
				require.NoError(t, err)
				tokens[tenant], _, err = l.CreateToken(ctx, "test", opledger.ReadWrite)
				require.NoError(t, err)
			}
			acme := client.New(s.url, tokens["acme"], nil)
			other := client.New(s.url, tokens["other"], nil)

			const secret = "ana.perez@example.invalid"
			in := client.Intent{Action: "crm.create", Destination: "crm", Owner: "ops",
				Payload: json.RawMessage(`{"units":2,"email":"` + secret + `"}`), SensitiveFields: []string{"email"}}
			event := func(c *client.Client, id string) {
				t.Helper()
				_, err := c.ReceiveEvent(ctx, opledger.Event{Source: "forms", EventID: id, Type: "signup",
					Payload: json.RawMessage(`{"email":"` + secret + `"}`)})
				require.NoError(t, err)
			}
			send := func(c *client.Client, key string, r client.Report) *opledger.Claim {
				t.Helper()
				claim, err := c.Claim(ctx, key, client.ClaimRequest{Intent: &in, Dispatch: true, Worker: "w"})
				require.NoError(t, err, key)
				r.FencingToken = claim.FencingToken
				_, err = c.Report(ctx, key, claim.AttemptID, r)
				require.NoError(t, err, key)
				return claim
			}
			uncertain := client.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"}

			// acme: 3 events, one delivered twice.
			event(acme, "evt-1")
			event(acme, "evt-1")
			event(acme, "evt-2")
			event(acme, "evt-3")
			// acme: pay:1 takes 2 attempts (retryable, then succeeded) and
			// has one effect; its attempt reports again with a second
			// reference: one duplicate effect.
			send(acme, "pay:1", client.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
			clock.advance(time.Minute)
			second := send(acme, "pay:1", client.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
			res, err := acme.Report(ctx, "pay:1", second.AttemptID, client.Report{FencingToken: second.FencingToken, Outcome: opledger.OutcomeSucceeded, DestinationRef: "R2"})
			require.NoError(t, err)
			require.Equal(t, 1, res.DuplicateEffects)
			// acme: unc:1 is uncertain for 10 min, then marked succeeded.
			send(acme, "unc:1", uncertain)
			clock.advance(10 * time.Minute)
			_, _, err = acme.Resolve(ctx, "unc:1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "R3", Reason: "found it"})
			require.NoError(t, err)
			// acme: held:1 is uncertain, held at once, and cancelled 30 min
			// later: 30 min from entering uncertain.
			send(acme, "held:1", uncertain)
			_, _, err = acme.Reconcile(ctx, "held:1", client.Finding{Evidence: "no lookup"})
			require.NoError(t, err)
			clock.advance(30 * time.Minute)
			_, _, err = acme.Resolve(ctx, "held:1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted"})
			require.NoError(t, err)
			// acme: left uncertain, left held, left pending.
			send(acme, "left:1", uncertain)
			send(acme, "left:2", uncertain)
			_, _, err = acme.Reconcile(ctx, "left:2", client.Finding{Evidence: "no lookup"})
			require.NoError(t, err)
			_, _, err = acme.Record(ctx, "left:3", in)
			require.NoError(t, err)

			// other: 1 event, 1 operation with 1 attempt and 1 effect.
			event(other, "evt-1")
			send(other, "pay:1", client.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "X1"})

			checkTenant := func(t *testing.T, byState bool) {
				t.Helper()
				a, err := acme.Stats(ctx)
				require.NoError(t, err)
				require.Equal(t, 3, a.Events.Events, "acme events received")
				require.Equal(t, 4, a.Events.Deliveries, "acme deliveries")
				require.Equal(t, 1, a.Events.DuplicateDeliveries, "acme duplicate deliveries")
				require.Equal(t, 6, a.AttemptsTotal, "acme attempts")
				require.ElementsMatch(t, []opledger.AttemptCount{{Destination: "crm", Outcome: "retryable", Count: 1},
					{Destination: "crm", Outcome: "succeeded", Count: 1}, {Destination: "crm", Outcome: "uncertain", Count: 4}}, a.Attempts)
				require.Equal(t, 2, a.ConfirmedEffects, "acme confirmed effects: pay:1 and unc:1")
				require.Equal(t, 1, a.DuplicateEffects, "acme duplicate effects")
				require.Equal(t, 2, a.Recoveries)
				require.Equal(t, 1200.0, a.RecoveryMeanSeconds)
				require.Equal(t, 1800.0, a.RecoveryP90Seconds)
				require.Equal(t, 2400.0, a.RecoveryTotalSeconds)
				require.Equal(t, []int{0, 0, 1, 2, 2, 2, 2}, a.RecoveryBuckets)
				if byState {
					require.Equal(t, 2, a.Unresolved)
					require.Equal(t, map[opledger.State]int{opledger.StateAwaitingApproval: 0, opledger.StatePending: 1, opledger.StateInProgress: 0,
						opledger.StateUncertain: 1, opledger.StateHeld: 1, opledger.StateSucceeded: 2, opledger.StateFailed: 1}, a.OperationsByState)
				}

				o, err := other.Stats(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, o.Events.Events, "other events")
				require.Equal(t, 1, o.Events.Deliveries)
				require.Zero(t, o.Events.DuplicateDeliveries)
				require.Equal(t, 1, o.AttemptsTotal, "other's token sees none of acme's attempts")
				require.Equal(t, 1, o.ConfirmedEffects)
				require.Zero(t, o.DuplicateEffects)
				require.Zero(t, o.Recoveries)
				require.Zero(t, o.Unresolved)
			}
			checkMetrics := func(t *testing.T, byState bool) {
				t.Helper()
				m, types, text := scrape(t, s.url)
				want := map[string]float64{
					`opledger_events_received_total{status="unmapped"}`:                  4,
					`opledger_deliveries_total`:                                          5,
					`opledger_duplicate_deliveries_total`:                                1,
					`opledger_attempts_total{destination="crm",outcome="retryable"}`:     1,
					`opledger_attempts_total{destination="crm",outcome="succeeded"}`:     2,
					`opledger_attempts_total{destination="crm",outcome="uncertain"}`:     4,
					`opledger_attempts_total{destination="crm",outcome="rejected"}`:      0,
					`opledger_attempts_total{destination="crm",outcome="lease_expired"}`: 0,
					`opledger_attempts_open{destination="crm"}`:                          0,
					`opledger_confirmed_effects_total`:                                   3,
					`opledger_duplicate_effects_total`:                                   1,
					`opledger_operator_recovery_seconds_count`:                           2,
					`opledger_operator_recovery_seconds_sum`:                             2400,
					`opledger_operator_recovery_seconds_bucket{le="300"}`:                0,
					`opledger_operator_recovery_seconds_bucket{le="900"}`:                1,
					`opledger_operator_recovery_seconds_bucket{le="3600"}`:               2,
					`opledger_operator_recovery_seconds_bucket{le="+Inf"}`:               2,
				}
				if byState {
					want[`opledger_operations{state="uncertain"}`] = 1
					want[`opledger_operations{state="held"}`] = 1
					want[`opledger_operations{state="pending"}`] = 1
					want[`opledger_operations{state="succeeded"}`] = 3
					want[`opledger_operations{state="failed"}`] = 1
				}
				for k, v := range want {
					got, ok := m[k]
					require.True(t, ok, "%s missing from /metrics:\n%s", k, text)
					require.Equal(t, v, got, k)
				}
				// Prometheus conventions: counters end in _total, nothing
				// else does; durations are in seconds and say so.
				for name, typ := range types {
					if !strings.HasPrefix(name, "opledger_") {
						continue
					}
					require.Equal(t, typ == "counter", strings.HasSuffix(name, "_total"), "%s is a %s", name, typ)
					require.NotRegexp(t, `_(ms|milliseconds|minutes|hours)(_|$)`, name)
				}
				// No keys, payload values or event ids in any label.
				for _, leak := range []string{secret, "ana.perez", "pay:1", "unc:1", "held:1", "left:", "evt-"} {
					require.NotContains(t, text, leak)
				}
				labels := regexp.MustCompile(`\{[^}]*\}`).FindAllString(text, -1)
				for _, l := range labels {
					require.NotContains(t, l, "@", "a label value like an address: %s", l)
				}
			}

			checkTenant(t, true)
			checkMetrics(t, true)

			// A restart counts the same.
			s.stop()
			s = startFigures(t, dsn, clock)
			acme, other = client.New(s.url, tokens["acme"], nil), client.New(s.url, tokens["other"], nil)
			checkTenant(t, true)
			checkMetrics(t, true)

			// Retention compacts the final operations and then forgets
			// their tombstones, the events and their deliveries: every
			// total stays as it was.
			clock.advance(25 * time.Hour)
			res1, err := s.ledger.Compact(ctx)
			require.NoError(t, err)
			require.Equal(t, 4, res1.Tombstoned, "the 4 final operations compacted")
			checkTenant(t, false)
			checkMetrics(t, false)
			clock.advance(49 * time.Hour)
			res2, err := s.ledger.Compact(ctx)
			require.NoError(t, err)
			require.Positive(t, res2.Forgotten, "tombstones forgotten")
			require.Positive(t, res2.EventsForgotten, "events forgotten")
			checkTenant(t, false)
			checkMetrics(t, false)
		})
	}
}

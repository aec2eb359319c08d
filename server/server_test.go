package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

const destinationsYAML = `
destinations:
  - name: crm
    url: @URL@/records
    body: '{"external_ref": {{json .Key}}, "units": {{json .Payload.units}}}'
    ref: /id
    lookup:
      url: @URL@/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 1ms
      match:
        - record: /external_ref
          value: "{{.Key}}"
    retry: {max_attempts: 3, initial_delay: 10ms, max_delay: 20ms, deadline: 1h}
`

// waitState polls the operation until it reaches want or the deadline.
func waitState(t *testing.T, c *client.Client, key string, want opledger.State) *client.OperationDetail {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		d, err := c.Get(context.Background(), key)
		require.NoError(t, err)
		if d.State == want {
			return d
		}
		require.True(t, time.Now().Before(deadline), "%s is %s, waited for %s", key, d.State, want)
		<-tick.C
	}
}

// TestServeExecutesDestinations: with destinations configured, the server's
// executor performs recorded operations, and its reconciler settles a lost
// response by lookup instead of sending again.
func TestServeExecutesDestinations(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			crm := fakedest.New(t, fakedest.Options{Unique: true})
			dir := t.TempDir()
			path := filepath.Join(dir, "destinations.yaml")
			require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(destinationsYAML, "@URL@", crm.URL())), 0o644))
			set, err := destination.LoadFile(path, destination.LoadOptions{})
			require.NoError(t, err)
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{DestinationRetryPolicies: set.RetryPolicies()})
			require.NoError(t, err)
			token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
			require.NoError(t, err)
			srv := testrig.Serve(t, l, server.Config{Destinations: set, SweepInterval: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			c := client.New(srv.URL(), token, nil)

			_, _, err = c.Record(ctx, "order:1:create", client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":2}`)})
			require.NoError(t, err)
			d := waitState(t, c, "order:1:create", opledger.StateSucceeded)
			require.NotEmpty(t, d.DestinationRef)
			require.Equal(t, 1, crm.Effects())

			crm.Fail(fakedest.LoseResponse)
			_, _, err = c.Record(ctx, "order:2:create", client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":3}`)})
			require.NoError(t, err)
			d = waitState(t, c, "order:2:create", opledger.StateSucceeded)
			require.Equal(t, 2, crm.Effects(), "the lost response was found by lookup, nothing sent twice")
			require.Equal(t, 2, crm.Creates())
			var events []string
			for _, e := range d.Timeline {
				events = append(events, e.Event)
			}
			require.Contains(t, events, "lookup found the effect")

			// Its executor's abandoned calls are counted on /metrics.
			resp, err := http.Get(srv.URL() + "/metrics")
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Contains(t, string(body), "\nopledger_executor_abandoned_calls 0\n")
		})
	}
}

// signalOn is a slog.Handler that discards every record and closes done
// at the first whose message is msg.
type signalOn struct {
	msg  string
	done chan struct{}
	once *sync.Once
}

func (h signalOn) Enabled(context.Context, slog.Level) bool { return true }
func (h signalOn) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h signalOn) WithGroup(string) slog.Handler            { return h }
func (h signalOn) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.done) })
	}
	return nil
}

// TestShutdownStopsExecutorFirst: when the server is told to stop, its
// executor stops claiming at once, while requests in flight still finish,
// rather than only after them (a slow request used to keep the executor
// claiming and calling for up to the shutdown timeout).
func TestShutdownStopsExecutorFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	crm := fakedest.New(t, fakedest.Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "destinations.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(destinationsYAML, "@URL@", crm.URL())), 0o644))
	set, err := destination.LoadFile(path, destination.LoadOptions{})
	require.NoError(t, err)
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	stopped := signalOn{msg: "executor stopped", done: make(chan struct{}), once: &sync.Once{}}
	srv, err := server.New(l, server.Config{Addr: "127.0.0.1:0", Destinations: set, Logger: slog.New(stopped),
		ShutdownTimeout: time.Minute})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()

	// A request in flight: its handler is reading a body that is still
	// arriving (the server asked for it with 100 Continue).
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	const body = `{"action":"crm.create","destination":"crm","payload":{"units":1}}`
	conn, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "PUT /v1/operations/order:9 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", token, len(body))
	require.NoError(t, err)
	answer := bufio.NewReader(conn)
	status, err := answer.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, status, "100 Continue", "the handler is reading the body")
	_, err = answer.ReadString('\n') // the blank line after it
	require.NoError(t, err)

	stop()
	began := time.Now()
	select {
	case <-stopped.done:
		t.Logf("executor stopped after %s", time.Since(began))
	case <-time.After(30 * time.Second): // a guard: before the fix it came only after the request
		t.Fatal("the executor was still claiming while a request was in flight")
	}
	select {
	case err := <-done:
		t.Fatalf("the server stopped before the request in flight finished: %v", err)
	default:
	}
	_, err = io.WriteString(conn, body) // the request ends, and is answered
	require.NoError(t, err)
	status, err = answer.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, status, "201", "the request in flight finished")
	require.NoError(t, <-done)
	t.Logf("server stopped after %s", time.Since(began))
}

// TestShutdownTimeoutEnds: a request still in flight when the shutdown
// timeout ends is cut off, and Run says so, and what becomes of an
// operation whose outcome was not recorded, rather than a bare "context
// deadline exceeded".
func TestShutdownTimeoutEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	srv, err := server.New(l, server.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ShutdownTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()

	// A request in flight: its handler waits for a body never sent.
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "PUT /v1/operations/order:9 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n", token)
	require.NoError(t, err)
	answer := bufio.NewReader(conn)
	status, err := answer.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, status, "100 Continue", "the handler is reading the body")
	_, err = answer.ReadString('\n')
	require.NoError(t, err)

	stop()
	err = <-done
	require.ErrorContains(t, err, "API requests were still in flight when the shutdown timeout (100ms) ended, and were cut off")
	require.ErrorContains(t, err, "stays in_progress until its lease ends")
	_, err = answer.ReadString('\n')
	require.Error(t, err, "the request was cut off")
}

// TestNegativeSettingsRefused: a negative duration or count is refused by
// New (and CheckConfig) with an error naming it, never replaced by the
// default; 0 is the default.
func TestNegativeSettingsRefused(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	for _, tc := range []struct {
		cfg  server.Config
		want string
	}{
		{server.Config{Workers: -1}, "server: Workers is -1: it must be positive (0 means the default, 4)"},
		{server.Config{Lease: -time.Second}, "server: Lease is -1s: it must be positive (0 means the default, 30s)"},
		{server.Config{SweepInterval: -time.Second}, "server: SweepInterval is -1s: it must be positive (0 means the default, 5s)"},
		{server.Config{CompactInterval: -time.Second}, "server: CompactInterval is -1s: it must be positive (0 means the default, 1h0m0s)"},
		{server.Config{SampleInterval: -time.Second}, "server: SampleInterval is -1s"},
		{server.Config{ShutdownTimeout: -time.Second}, "server: ShutdownTimeout is -1s"},
		{server.Config{ReadHeaderTimeout: -time.Second}, "server: ReadHeaderTimeout is -1s"},
		{server.Config{ReadTimeout: -time.Second}, "server: ReadTimeout is -1s"},
		{server.Config{WriteTimeout: -time.Second}, "server: WriteTimeout is -1s"},
		{server.Config{IdleTimeout: -time.Second}, "server: IdleTimeout is -1s: it must be positive (0 means the default, 2m0s)"},
	} {
		tc.cfg.Addr = "127.0.0.1:0"
		require.ErrorContains(t, server.CheckConfig(tc.cfg), tc.want)
		srv, err := server.New(l, tc.cfg)
		require.ErrorContains(t, err, tc.want)
		require.Nil(t, srv)
	}
	require.NoError(t, server.CheckConfig(server.Config{}), "0 is the default")
}

// TestDestinationTimeoutAboveCallLimit: a destination whose timeout the
// executor's call limit (two thirds of Lease) would cut is refused by
// CheckConfig, before a ledger is needed, and by New.
func TestDestinationTimeoutAboveCallLimit(t *testing.T) {
	t.Parallel()
	yaml := strings.ReplaceAll(destinationsYAML, "@URL@", "http://127.0.0.1:1") + "    timeout: 25s\n"
	set, err := destination.Load([]byte(yaml), destination.LoadOptions{})
	require.NoError(t, err)
	defer set.Close()
	cfg := server.Config{Addr: "127.0.0.1:0", Destinations: set, Logger: slog.New(slog.DiscardHandler)}
	const want = "executor: destination crm: its timeout 25s is not shorter than the executor's call limit 20s (two thirds of the lease 30s)"
	require.ErrorContains(t, server.CheckConfig(cfg), want)
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	_, err = server.New(l, cfg)
	require.ErrorContains(t, err, want)
	cfg.Lease = 38 * time.Second
	require.NoError(t, server.CheckConfig(cfg), "the lease the error suggests")
}

// TestRetentionLogNamesPeriods: the retention log line names the periods
// this process applied. They are its own flags (--retention,
// --tombstone-retention) but act on the whole shared ledger, so a server
// started with the wrong one must be told by its log.
func TestRetentionLogNamesPeriods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var offset atomic.Int64
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{Retention: time.Hour, TombstoneRetention: 48 * time.Hour,
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "k:done", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "k:done", Action: "crm.create",
		Destination: "crm", Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = l.Report(ctx, "k:done", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
	require.NoError(t, err)
	offset.Add(int64(2 * time.Hour)) // past its retention

	var logs testrig.LogBuffer
	testrig.Serve(t, l, server.Config{CompactInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "compacted.tombstoned=1") }, 10*time.Second,
		5*time.Millisecond, "the operation is compacted")
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "compacted.tombstoned=1") {
			require.Contains(t, line, "retention=1h0m0s tombstone_retention=48h0m0s")
		}
	}
}

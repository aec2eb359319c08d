// Package testrig wires a ledger, a simulated destination server
// (internal/fakedest), destinations loaded from YAML, an executor and a
// reconciler for tests that drive them step by step on a test clock, on
// SQLite and PostgreSQL alike.
//
// Every rig captures the executor's and reconciler's logs and fails its
// test if they ever contain an operation key, an idempotency key or a
// credential.
//
// Allowed imports: opledger and its packages, internal test helpers,
// testing helpers.
package testrig

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/store/storetest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/reconciler"
	"github.com/opledger/opledger/server"
)

// Token is the credential the destinations send; it must never be logged.
const Token = "rig-s3cret-token"

// Destinations is the YAML of the rig's destinations; @URL@ stands for the
// fake server's URL.
//
//   - crm: authoritative lookup, visibility delay 30 s;
//   - crm-key: idempotency key kept 1 h, no lookup;
//   - crm-search: a lookup that is not authoritative, no key;
//   - tickets: unique external reference (409) and an authoritative lookup;
//   - email: nothing declared.
//
// All retry up to 3 attempts, backoff from 1 s capped at 10 s, within 1 h,
// and time out after 5 s: shorter than the call timeout of the rig's
// executor (two thirds of its 10 s lease), as executor.New requires.
const Destinations = `
destinations:
  - name: crm
    url: @URL@/records
    headers:
      Authorization: Bearer ${RIG_TOKEN}
    body: '{"external_ref": {{json .Key}}, "units": {{json .Payload.units}}}'
    ref: /id
    timeout: 5s
    lookup:
      url: @URL@/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 30s
      match:
        - record: /external_ref
          value: "{{.Key}}"
        - record: /units
          payload: /units
    retry: {max_attempts: 3, initial_delay: 1s, max_delay: 10s, deadline: 1h}

  - name: crm-key
    url: @URL@/records
    headers:
      Authorization: Bearer ${RIG_TOKEN}
    body: '{"external_ref": {{json .Key}}, "units": {{json .Payload.units}}}'
    ref: /id
    timeout: 5s
    idempotency:
      header: Idempotency-Key
      retention: 1h
    retry: {max_attempts: 3, initial_delay: 1s, max_delay: 10s, deadline: 1h}

  - name: crm-search
    url: @URL@/records
    body: '{"external_ref": {{json .Key}}, "units": {{json .Payload.units}}}'
    ref: /id
    timeout: 5s
    lookup:
      url: @URL@/records?external_ref={{urlquery .Key}}
      results: /items
      visibility_delay: 30s
      match:
        - record: /units
          payload: /units
    retry: {max_attempts: 3, initial_delay: 1s, max_delay: 10s, deadline: 1h}

  - name: tickets
    url: @URL@/records
    body: '{"external_ref": {{json .Key}}, "units": {{json .Payload.units}}}'
    ref: /id
    timeout: 5s
    unique_reference:
      conflict_status: 409
    lookup:
      url: @URL@/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 30s
      match:
        - record: /units
          payload: /units
    retry: {max_attempts: 3, initial_delay: 1s, max_delay: 10s, deadline: 1h}

  - name: email
    url: @URL@/records
    headers:
      Authorization: Bearer ${RIG_TOKEN}
    ref: /id
    timeout: 5s
    retry: {max_attempts: 3, initial_delay: 1s, max_delay: 10s, deadline: 1h}
`

// Options tune a rig.
type Options struct {
	// Server configures the fake destination (Dedup is always on).
	Server fakedest.Options
	// YAML replaces Destinations.
	YAML string
	// Executor and Reconciler are adjusted before they are built; their
	// Destinations and Logger are filled in.
	Executor   executor.Config
	Reconciler reconciler.Config
	// Extra destinations implemented in Go, added to the YAML ones.
	Extra []destination.Destination
}

// Rig is a ledger with everything around it.
type Rig struct {
	t      *testing.T
	Ctx    context.Context
	Ledger *opledger.Ledger
	Clock  *storetest.Clock
	Server *fakedest.Server
	Set    *destination.Set
	Exec   *executor.Executor
	Rec    *reconciler.Reconciler

	logs    *LogBuffer
	mu      sync.Mutex
	secrets []string
}

// ForEachStore runs fn as a parallel subtest on SQLite and on PostgreSQL.
func ForEachStore(t *testing.T, fn func(t *testing.T, newDSN func(testing.TB) string)) {
	t.Helper()
	for _, s := range testdb.Stores() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, s.NewDSN)
		})
	}
}

// New builds a rig on a fresh store from newDSN.
func New(t *testing.T, newDSN func(testing.TB) string, adjust ...func(*Options)) *Rig {
	t.Helper()
	var o Options
	for _, a := range adjust {
		a(&o)
	}
	ctx := context.Background()
	o.Server.Dedup = true
	srv := fakedest.New(t, o.Server)
	yaml := o.YAML
	if yaml == "" {
		yaml = Destinations
	}
	set, err := destination.Load([]byte(strings.ReplaceAll(yaml, "@URL@", srv.URL())), destination.LoadOptions{
		LookupEnv: func(name string) (string, bool) { return Token, name == "RIG_TOKEN" },
	})
	require.NoError(t, err)
	if len(o.Extra) > 0 {
		all := o.Extra
		for _, n := range set.Names() {
			d, _ := set.Get(n)
			all = append(all, d)
		}
		set, err = destination.NewSet(all...)
		require.NoError(t, err)
	}
	t.Cleanup(func() { require.NoError(t, set.Close()) })

	clock := &storetest.Clock{}
	policies := set.RetryPolicies()
	// Tests need no durability across power cuts: spare SQLite the fsyncs.
	// DestinationTenants is left unset, unlike opledger serve's: the rig
	// records what a ledger without the list would, so that the executor's
	// and reconciler's own checks of a destination's tenants are tested.
	l, err := opledger.Open(ctx, newDSN(t), opledger.Options{Worker: "rig", Lease: 10 * time.Second, Clock: clock.Func,
		DestinationRetryPolicies: policies, SQLiteSynchronousNormal: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })

	logs := &LogBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ec := o.Executor
	ec.Destinations, ec.Logger = set, logger
	if ec.Worker == "" {
		ec.Worker = "rig-executor"
	}
	if ec.Workers == 0 {
		ec.Workers = 1
	}
	if ec.Lease == 0 {
		ec.Lease = 10 * time.Second
	}
	if ec.SweepInterval == 0 {
		ec.SweepInterval = -1
	}
	exec, err := executor.New(l, ec)
	require.NoError(t, err)
	rc := o.Reconciler
	rc.Destinations, rc.Logger = set, logger
	if rc.RecheckInterval == 0 {
		rc.RecheckInterval = 10 * time.Second
	}
	rec, err := reconciler.New(l, rc)
	require.NoError(t, err)

	r := &Rig{t: t, Ctx: ctx, Ledger: l, Clock: clock, Server: srv, Set: set, Exec: exec, Rec: rec, logs: logs,
		secrets: []string{Token}}
	t.Cleanup(func() {
		out := logs.String()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.secrets {
			require.NotContains(t, out, s, "logs must never carry keys or credentials")
		}
	})
	return r
}

// Record records an operation for destination with payload and returns it.
// Its key and idempotency key join the strings the logs must not contain.
func (r *Rig) Record(key, dest, payload string) *opledger.Operation {
	r.t.Helper()
	op, created, err := r.Ledger.Record(r.Ctx, opledger.Intent{Key: key, Action: "create", Destination: dest,
		Payload: json.RawMessage(payload), Owner: "ops-team"})
	require.NoError(r.t, err)
	require.True(r.t, created)
	r.mu.Lock()
	r.secrets = append(r.secrets, key, op.IdempotencyKey())
	r.mu.Unlock()
	return op
}

// Step makes one executor attempt; nil when nothing was due.
func (r *Rig) Step() *opledger.Operation {
	r.t.Helper()
	op, err := r.Exec.RunOnce(r.Ctx)
	require.NoError(r.t, err)
	return op
}

// Reconcile runs one reconciler pass.
func (r *Rig) Reconcile() reconciler.Pass {
	r.t.Helper()
	pass, err := r.Rec.RunOnce(r.Ctx)
	require.NoError(r.t, err)
	require.Zero(r.t, pass.Errors)
	return pass
}

// Get returns the stored operation.
func (r *Rig) Get(key string) *opledger.Operation {
	r.t.Helper()
	op, err := r.Ledger.Get(r.Ctx, key)
	require.NoError(r.t, err)
	return op
}

// Attempts returns the operation's attempts.
func (r *Rig) Attempts(key string) []*opledger.Attempt {
	r.t.Helper()
	a, err := r.Ledger.Attempts(r.Ctx, key)
	require.NoError(r.t, err)
	return a
}

// Events lists the timeline events of key.
func (r *Rig) Events(key string) []string {
	r.t.Helper()
	tl, err := r.Ledger.Timeline(r.Ctx, key)
	require.NoError(r.t, err)
	out := make([]string, len(tl))
	for i, e := range tl {
		out[i] = e.Event
	}
	return out
}

// Evidence returns the evidence of the last timeline entry with event.
func (r *Rig) Evidence(key, event string) string {
	r.t.Helper()
	tl, err := r.Ledger.Timeline(r.Ctx, key)
	require.NoError(r.t, err)
	for i := len(tl) - 1; i >= 0; i-- {
		if tl[i].Event == event {
			return tl[i].Evidence
		}
	}
	r.t.Fatalf("no %q in the timeline of %s", event, key)
	return ""
}

// Logs returns what was logged so far.
func (r *Rig) Logs() string { return r.logs.String() }

// LogBuffer is a concurrency-safe log sink: a process or logger writes to
// it while the test reads what was written.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Serve runs a server on l (cfg; "127.0.0.1:0" when cfg.Addr is empty)
// until the test ends, then stops it, requiring a clean stop, and closes
// l.
func Serve(t testing.TB, l *opledger.Ledger, cfg server.Config) *server.Server {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	srv, err := server.New(l, cfg)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
		require.NoError(t, l.Close())
	})
	return srv
}

// RecordSink is a slog handler that keeps every record for a test to
// read (Drain), and hands each record whose message is Wait's to a
// channel, so a test can wait for a line a server writes as it ends a
// request.
type RecordSink struct {
	records chan slog.Record
	waited  chan slog.Record
	wait    string
}

// NewRecordSink returns a sink whose Waited channel gets each record of
// message wait; it keeps up to 1000 records.
func NewRecordSink(wait string) *RecordSink {
	return &RecordSink{records: make(chan slog.Record, 1000), waited: make(chan slog.Record, 10), wait: wait}
}

func (s *RecordSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *RecordSink) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s *RecordSink) WithGroup(string) slog.Handler            { return s }
func (s *RecordSink) Handle(_ context.Context, r slog.Record) error {
	s.records <- r.Clone()
	if r.Message == s.wait {
		s.waited <- r.Clone()
	}
	return nil
}

// Waited returns the next record of the sink's wait message, failing t
// after a minute without one.
func (s *RecordSink) Waited(t testing.TB) slog.Record {
	t.Helper()
	select {
	case r := <-s.waited:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("no %q line was logged", s.wait)
		return slog.Record{}
	}
}

// Drain returns the records kept so far.
func (s *RecordSink) Drain() []slog.Record {
	var out []slog.Record
	for {
		select {
		case r := <-s.records:
			out = append(out, r)
		default:
			return out
		}
	}
}

// RecordChan is a slog handler that hands each record to the test, one
// at a time: the goroutine that logs waits until the test takes it from
// Records, or until Done is closed, after which records are dropped.
// A test that reads every line a loop logs, in order, waits for it so.
type RecordChan struct {
	Records chan slog.Record
	Done    chan struct{}
}

// NewRecordChan returns a RecordChan; close its Done when the test no
// longer reads Records.
func NewRecordChan() RecordChan {
	return RecordChan{Records: make(chan slog.Record), Done: make(chan struct{})}
}

func (h RecordChan) Enabled(context.Context, slog.Level) bool { return true }
func (h RecordChan) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h RecordChan) WithGroup(string) slog.Handler            { return h }
func (h RecordChan) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.Records <- r.Clone():
	case <-h.Done:
	}
	return nil
}

// Attr returns the value of rec's attribute key, failing t when rec has
// none.
func Attr(t testing.TB, rec slog.Record, key string) slog.Value {
	t.Helper()
	var v slog.Value
	found := false
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	require.True(t, found, "%s has no %s", rec.Message, key)
	return v
}

package proxy_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// smallBuffers fixes the kernel buffers of a connection at 256 KiB each
// way (more than loopback's segment size, less than what autotuning
// grows to), so that the relay of a 4 MiB answer proceeds at the pace of
// its slowest side, not after megabytes of kernel buffers.
func smallBuffers(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(256 << 10)
		_ = tc.SetWriteBuffer(256 << 10)
	}
	return c
}

// smallListener gives every connection it accepts small buffers.
type smallListener struct{ net.Listener }

func (l smallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return smallBuffers(c), nil
}

// smallTransport dials connections with small buffers.
func smallTransport(t *testing.T) *http.Transport {
	dialer := &net.Dialer{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return smallBuffers(c), nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// recorded is a slog.Handler that discards everything and closes done
// at the first record with the message "forwarded": the proxy logs it
// once it has recorded a forward's outcome.
type recorded struct {
	done chan struct{}
	once *sync.Once
}

func (h recorded) Enabled(context.Context, slog.Level) bool { return true }
func (h recorded) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recorded) WithGroup(string) slog.Handler            { return h }
func (h recorded) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "forwarded" {
		h.once.Do(func() { close(h.done) })
	}
	return nil
}

// slowRelaySetup starts an upstream answering 201 with a 2xx answer of
// size bytes and some, whose reference is at its start, and a proxy with
// a small max_response_bytes and the timeout, all on small buffers. It
// returns the proxy's bundle, a client on small buffers, and a channel
// closed once the proxy has recorded the outcome of a forward.
func slowRelaySetup(t *testing.T, size int, timeout time.Duration) (*bundle, *http.Client, <-chan struct{}) {
	t.Helper()
	up := httptest.NewUnstartedServer(largeAnswer(size))
	up.Listener = smallListener{up.Listener}
	up.Start()
	t.Cleanup(up.Close)
	u := proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 1 << 10, Timeout: destination.Duration(timeout)}
	l := openLedger(t, testdb.Stores()[0])
	rec := recorded{done: make(chan struct{}), once: &sync.Once{}}
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, Transport: smallTransport(t), Logger: slog.New(rec)})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewUnstartedServer(p)
	srv.Listener = smallListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	return &bundle{ledger: l, proxy: p, url: srv.URL}, &http.Client{Transport: smallTransport(t)}, rec.done
}

// largeAnswer answers 201 with a JSON answer of size bytes and some,
// whose reference, BIG-1, is at its start.
func largeAnswer(size int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		chunk := strings.Repeat("x", 64<<10)
		_, _ = io.WriteString(w, `{"id":"BIG-1","pad":"`)
		for n := 0; n < size; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}`)
	}
}

// largeAnswerSize is the length of largeAnswer(size)'s answer.
func largeAnswerSize(size int) int { return size + len(`{"id":"BIG-1","pad":""}`) }

// readPaced reads body as a steady caller does: chunk bytes every
// interval (fewer only at the end), until Read fails. It returns the
// bytes read and Read's error: io.EOF when the answer ended.
func readPaced(body io.Reader, interval time.Duration, chunk int) (int, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	buf := make([]byte, chunk)
	n := 0
	for {
		<-tick.C
		for got := 0; got < chunk; {
			k, err := body.Read(buf[got:])
			got, n = got+k, n+k
			if err != nil {
				return n, err
			}
		}
	}
}

func postLarge(t *testing.T, b *bundle, client *http.Client, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.url+"/records", strings.NewReader(body1))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	return resp
}

// A caller that takes a large 2xx answer more slowly than the upstream's
// timeout allows gets it whole, and the operation succeeds with its
// reference: the timeout bounds the upstream, not the caller.
func TestSlowCallerLargeAnswer(t *testing.T) {
	t.Parallel()
	const size = 4 << 20
	// The route's timeout bounds the time spent waiting for the
	// upstream's 4 MiB (its clock runs while a read of the answer
	// waits) and each write to the caller (this server has no
	// ConnContext); not the caller's whole download. With 1 s, under
	// -race on a loaded machine, the upstream's reads used it up once
	// in 16 runs and the answer broke off. With 5 s they use under
	// 0.5 s and a write waits at most about 1 s.
	const timeout = 5 * time.Second
	b, client, _ := slowRelaySetup(t, size, timeout)
	resp := postLarge(t, b, client, "key-1")
	defer resp.Body.Close()
	// The caller takes at most 4 KiB every 2 timeouts/1024 (a ticker
	// never runs ahead; load only slows it): the whole answer takes it
	// over twice the timeout, and the relay, which ends once the rest
	// fits in the kernel buffers (about 1 MiB), over 1.5 times.
	const chunk = 4 << 10
	n, err := readPaced(resp.Body, 2*timeout/(size/chunk), chunk)
	require.Equal(t, io.EOF, err, "the answer ended, not broke off")
	require.Equal(t, largeAnswerSize(size), n, "the caller got the whole answer")
	op := b.only(t)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Equal(t, "BIG-1", op.DestinationRef)
}

// A caller that stops taking a large 2xx answer cannot hold the proxy:
// its connection is broken off once it has taken nothing for the
// upstream's timeout, while the upstream's answer is still read to its
// end and the operation succeeds with the reference.
func TestStalledCallerLargeAnswer(t *testing.T) {
	t.Parallel()
	const size = 4 << 20
	// The route's timeout bounds the caller's stall and, as well, the
	// time spent waiting for the upstream's 4 MiB, which under -race on
	// a loaded machine took over half a second (the operation then ended
	// uncertain, its answer cut by the timeout), as in
	// TestStalledCallerReplay.
	b, client, recorded := slowRelaySetup(t, size, 10*time.Second)
	resp := postLarge(t, b, client, "key-1")
	defer resp.Body.Close()
	// The caller reads nothing until the proxy has recorded the outcome,
	// which it can only do once it gave up on the caller.
	select {
	case <-recorded:
	case <-time.After(time.Minute): // a guard: without a write deadline it never comes
		t.Fatal("the proxy is still held by a caller that takes nothing")
	}
	n, err := io.Copy(io.Discard, resp.Body)
	require.Error(t, err, "the caller's answer is broken off after %d bytes", n)
	require.Less(t, n, int64(size))
	op := b.only(t)
	require.Equal(t, opledger.StateSucceeded, op.State, "the upstream's 2xx decided the outcome: %s", op.LastError)
	require.Equal(t, "BIG-1", op.DestinationRef)

	again := b.send(t, http.MethodPost, "/records", "key-1", "", body1)
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, "true", again.header.Get(proxy.HeaderBodyOmitted))
}

// A saved answer replayed to a caller that takes nothing does not hold
// the handler forever: each write has the route's timeout as deadline, as
// the relay of a large answer has.
func TestStalledCallerReplay(t *testing.T) {
	t.Parallel()
	const size = 4 << 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"BIG-1","pad":"`+strings.Repeat("x", size)+`"}`)
	}))
	t.Cleanup(up.Close)
	// The route's timeout bounds both the first call, which reads and
	// saves 4 MiB (over 2 s once, under -race on a loaded machine), and
	// each write of the replay.
	u := proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 2 * size, Timeout: destination.Duration(10 * time.Second)}
	l := openLedger(t, testdb.Stores()[0])
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	handled := make(chan struct{}, 2)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { handled <- struct{}{} }()
		p.ServeHTTP(w, r)
	}))
	srv.Listener = smallListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	b := &bundle{ledger: l, proxy: p, url: srv.URL}

	first := b.send(t, http.MethodPost, "/records", "key-1", "", body1) // read whole: saved
	require.Equal(t, http.StatusCreated, first.status)
	<-handled

	client := &http.Client{Transport: smallTransport(t)}
	resp := postLarge(t, b, client, "key-1") // the replay, whose body the caller does not read
	defer resp.Body.Close()
	require.Equal(t, "true", resp.Header.Get(proxy.HeaderReplayed))
	select {
	case <-handled:
	case <-time.After(time.Minute): // a guard: without a write deadline it never comes
		t.Fatal("the proxy is still held by a caller that takes nothing")
	}
	n, err := io.Copy(io.Discard, resp.Body)
	require.Error(t, err, "the replay is broken off after %d bytes", n)
}

// TestLedgerTimeNotUpstreamTime: recording the outcome of a large answer
// that is not a 2xx (done before it is relayed) is the proxy's own work,
// not time spent waiting for the upstream: a store slow to take the
// write (another process holds SQLite's lock for longer than the route's
// timeout) does not cut off an answer the upstream sent whole.
func TestLedgerTimeNotUpstreamTime(t *testing.T) {
	t.Parallel()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(t.Context(), dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	other, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(dsn, "sqlite:")+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	const timeout = 300 * time.Millisecond
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// After the claim, before the answer: the store is busy for
		// three times the route's timeout.
		conn, err := other.Conn(context.Background())
		if err != nil {
			panic(err)
		}
		if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
			panic(err)
		}
		time.AfterFunc(3*timeout, func() {
			_, _ = conn.ExecContext(context.Background(), "COMMIT")
			_ = conn.Close()
		})
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, strings.Repeat("e", 64<<10)) // the whole answer, at once
	}))
	t.Cleanup(up.Close)
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "crm", URL: up.URL, MaxResponseBytes: 1 << 10,
		Timeout: destination.Duration(timeout)}}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/records", strings.NewReader(`{"n":1}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the answer was cut off after %d bytes", len(got))
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Len(t, got, 64<<10)
}

// leaseRelaySetup is a proxy in front of an upstream that answers 201
// with 4 MiB (over max_response_bytes), on small buffers, with the
// upstream's idempotency key declared and the route timeout given, on a
// ledger whose clock runs ahead by *offset. It counts the upstream's
// POSTs; head, when set, runs in the upstream's handler before it
// answers.
func leaseRelaySetup(t *testing.T, timeout time.Duration, offset *atomic.Int64, head func()) (*bundle, *http.Client, *atomic.Int32) {
	t.Helper()
	var posts atomic.Int32
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		if head != nil {
			head()
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"BIG-1","pad":"`+strings.Repeat("x", 4<<20)+`"}`)
	}))
	up.Listener = smallListener{up.Listener}
	up.Start()
	t.Cleanup(up.Close)
	l, err := opledger.Open(t.Context(), testdb.SQLiteDSN(t), opledger.Options{
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	u := proxy.Upstream{Name: "crm", URL: up.URL, MaxResponseBytes: 1 << 10, Timeout: destination.Duration(timeout),
		Idempotency: &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(24 * time.Hour)}}
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, Transport: smallTransport(t), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewUnstartedServer(p)
	srv.Listener = smallListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	return &bundle{ledger: l, proxy: p, url: srv.URL}, &http.Client{Transport: smallTransport(t)}, &posts
}

// leaseExtendedPast waits until the only operation's lease ends after at.
func leaseExtendedPast(t *testing.T, b *bundle, at time.Time) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; { // a guard, not a wait
		op := b.only(t)
		if op.LeaseExpiresAt != nil && op.LeaseExpiresAt.After(at) {
			return
		}
		require.True(t, time.Now().Before(deadline), "the lease was never extended")
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLeaseKeptWhileRelaying: relaying a large answer to a caller slower
// than the claim's lease (the upstream's timeout and a minute) extends
// the lease: the operation stays in progress, a repeat gets 409, and the
// request is forwarded once. Before, the lease ran out under the relay,
// the operation turned uncertain, and the reconciler, finding the
// upstream's idempotency key kept, let a repeat be forwarded again. Not
// parallel: it sets how often leases are extended for the package.
func TestLeaseKeptWhileRelaying(t *testing.T) {
	var offset atomic.Int64                                              // the ledger's clock runs ahead by it
	b, client, posts := leaseRelaySetup(t, 10*time.Second, &offset, nil) // the lease: 70 s
	t.Cleanup(proxy.SetLeaseRenewal(20 * time.Millisecond))

	resp := postLarge(t, b, client, "key-1") // not read yet: the relay waits on the caller
	defer resp.Body.Close()
	first := b.only(t)
	require.Equal(t, opledger.StateInProgress, first.State)
	// The ledger's clock goes 60 s on (within the lease), then, once the
	// lease has been extended from there, 60 s more: past the lease the
	// claim took.
	offset.Add(int64(60 * time.Second))
	leaseExtendedPast(t, b, first.LeaseExpiresAt.Add(50*time.Second))
	offset.Add(int64(60 * time.Second))
	n, err := b.ledger.ExpireLeases(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "the lease holds while the answer is relayed")
	_, err = b.proxy.ReconcileOnce(t.Context())
	require.NoError(t, err)
	now, err := b.ledger.Now(t.Context())
	require.NoError(t, err)
	leaseExtendedPast(t, b, now.Add(69*time.Second)) // extended since the clock moved on
	again := b.send(t, http.MethodPost, "/records", "key-1", "", body1)
	require.Equal(t, http.StatusConflict, again.status, "%s", again.body)
	require.Equal(t, "1", again.header.Get("Retry-After"), "the forward is running: its lease was just extended")

	got, err := io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.Greater(t, got, int64(4<<20))
	require.Eventually(t, func() bool { return b.only(t).State == opledger.StateSucceeded }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, int32(1), posts.Load(), "forwarded once")
}

// TestLeaseExtendedAtTheRelaysStart: the wait for the upstream's answer
// may use most of the lease; the relay extends it at once, not a third of
// a lease later, when it may have run out. Not parallel, as above.
func TestLeaseExtendedAtTheRelaysStart(t *testing.T) {
	var offset atomic.Int64
	// The head arrives 65 s into a lease of 70 s, by the ledger's clock.
	b, client, _ := leaseRelaySetup(t, 10*time.Second, &offset, func() { offset.Add(int64(65 * time.Second)) })
	t.Cleanup(proxy.SetLeaseRenewal(time.Hour)) // no extension but the first

	resp := postLarge(t, b, client, "key-1")
	defer resp.Body.Close()
	now, err := b.ledger.Now(t.Context())
	require.NoError(t, err)
	leaseExtendedPast(t, b, now.Add(60*time.Second)) // the claim's lease ends 5 s after now

	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.only(t).State == opledger.StateSucceeded }, 30*time.Second, 5*time.Millisecond)
}

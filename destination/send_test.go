package destination_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// newClient returns a client with a transport of its own, closed when t
// ends, that returns redirects as answers.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func post(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/records?email=someone%40example.com", strings.NewReader(`{"name":"Ada"}`))
	require.NoError(t, err)
	return req
}

func status(code int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			if header[i+1] == "" {
				w.Header()[header[i]] = nil // suppress, e.g. the server's Date
				continue
			}
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
	}
}

func TestSendHTTPStatuses(t *testing.T) {
	t.Parallel()
	date := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name       string
		handler    http.HandlerFunc
		policy     destination.HTTPPolicy
		want       opledger.Outcome // "" means success
		retryAfter time.Duration
		exists     bool
	}{
		{"200", status(200), destination.HTTPPolicy{}, "", 0, false},
		{"201", status(201), destination.HTTPPolicy{}, "", 0, false},
		{"400", status(400), destination.HTTPPolicy{}, opledger.OutcomeRejected, 0, false},
		{"401", status(401), destination.HTTPPolicy{}, opledger.OutcomeRejected, 0, false},
		{"403", status(403), destination.HTTPPolicy{}, opledger.OutcomeRejected, 0, false},
		{"404", status(404), destination.HTTPPolicy{}, opledger.OutcomeRejected, 0, false},
		{"409 without unique reference", status(409), destination.HTTPPolicy{}, opledger.OutcomeRejected, 0, false},
		{"409 with unique reference", status(409), destination.HTTPPolicy{ExistsStatus: 409}, opledger.OutcomeUncertain, 0, true},
		{"422", status(422), destination.HTTPPolicy{}, opledger.OutcomeRejected, 0, false},
		{"429 seconds", status(429, "Retry-After", "2"), destination.HTTPPolicy{}, opledger.OutcomeRetryable, 2 * time.Second, false},
		{"429 date", status(429, "Retry-After", date.Add(7*time.Second).Format(http.TimeFormat), "Date", date.Format(http.TimeFormat)),
			destination.HTTPPolicy{}, opledger.OutcomeRetryable, 7 * time.Second, false},
		{"429 date without Date header", status(429, "Retry-After", date.Add(90*time.Second).Format(http.TimeFormat), "Date", ""),
			destination.HTTPPolicy{Now: func() time.Time { return date }}, opledger.OutcomeRetryable, 90 * time.Second, false},
		{"429 garbage", status(429, "Retry-After", "soon"), destination.HTTPPolicy{}, opledger.OutcomeRetryable, 0, false},
		{"503", status(503), destination.HTTPPolicy{}, opledger.OutcomeRetryable, 0, false},
		{"503 Retry-After", status(503, "Retry-After", "120"), destination.HTTPPolicy{}, opledger.OutcomeRetryable, 2 * time.Minute, false},
		{"408", status(408), destination.HTTPPolicy{}, opledger.OutcomeRetryable, 0, false},
		{"421", status(421), destination.HTTPPolicy{}, opledger.OutcomeRetryable, 0, false},
		{"421 Retry-After", status(421, "Retry-After", "30"), destination.HTTPPolicy{}, opledger.OutcomeRetryable, 30 * time.Second, false},
		{"500", status(500), destination.HTTPPolicy{}, opledger.OutcomeUncertain, 0, false},
		{"502", status(502), destination.HTTPPolicy{}, opledger.OutcomeUncertain, 0, false},
		{"504", status(504), destination.HTTPPolicy{}, opledger.OutcomeUncertain, 0, false},
		{"507", status(507), destination.HTTPPolicy{}, opledger.OutcomeUncertain, 0, false},
		{"501", status(501), destination.HTTPPolicy{}, opledger.OutcomeRejected, 0, false},
		{"303 not followed", status(303, "Location", "/elsewhere"), destination.HTTPPolicy{}, opledger.OutcomeUncertain, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			resp, err := destination.SendHTTP(newClient(t), post(t, context.Background(), srv.URL), tc.policy)
			require.NotNil(t, resp, "an answer always comes back with its response")
			require.NoError(t, resp.Body.Close())
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			got, after := opledger.OutcomeOf(err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.retryAfter, after)
			require.Equal(t, tc.exists, errors.Is(err, destination.ErrExists))
			var se *destination.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, resp.StatusCode, se.StatusCode)
			require.NotContains(t, err.Error(), "example.com", "the query (payload data) stays out of errors")
			require.NotContains(t, err.Error(), "/records")
		})
	}
}

// connServer is a TLS server, over HTTP/2 or HTTP/1.1, that answers its
// requests with the given statuses in turn (then 201) and records the
// client address of each: one address per connection.
type connServer struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	remotes  []string
}

func newConnServer(t *testing.T, h2 bool, statuses ...int) *connServer {
	t.Helper()
	s := &connServer{statuses: statuses}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		code := http.StatusCreated
		if len(s.statuses) > 0 {
			code, s.statuses = s.statuses[0], s.statuses[1:]
		}
		s.remotes = append(s.remotes, r.RemoteAddr)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"id": "r-1"}`)
	}))
	s.EnableHTTP2 = h2
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// Remotes are the client addresses of the requests served so far.
func (s *connServer) Remotes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.remotes)
}

// A 421 (Misdirected Request) says the server that got the request
// cannot answer for it; a retry may succeed over another connection
// (RFC 9110 section 15.5.20). net/http would send the retry on the same
// connection, HTTP/1.1 or HTTP/2: once the 421's body is closed,
// SendHTTP has closed it, and the retry opens a new one. A 503, retried
// on the connection that answered it, shows that the test sees reuse.
func TestSendHTTPMisdirectedRetryOpensNewConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		h2      bool
		status  int
		newConn bool
	}{
		{"HTTP/2/421", true, http.StatusMisdirectedRequest, true},
		{"HTTP/1.1/421", false, http.StatusMisdirectedRequest, true},
		{"HTTP/2/503", true, http.StatusServiceUnavailable, false},
		{"HTTP/1.1/503", false, http.StatusServiceUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newConnServer(t, tc.h2, tc.status)
			client := srv.Client()
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			send := func() (*http.Response, error) {
				t.Helper()
				resp, err := destination.SendHTTP(client, post(t, context.Background(), srv.URL), destination.HTTPPolicy{})
				require.NotNil(t, resp)
				_, readErr := io.ReadAll(resp.Body) // as a destination reads it, to the end
				require.NoError(t, readErr)
				require.NoError(t, resp.Body.Close())
				return resp, err
			}
			resp, err := send()
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, map[bool]int{true: 2, false: 1}[tc.h2], resp.ProtoMajor)
			got, _ := opledger.OutcomeOf(err)
			require.Equal(t, opledger.OutcomeRetryable, got, "%v", err)
			resp, err = send()
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			remotes := srv.Remotes()
			require.Len(t, remotes, 2)
			if tc.newConn {
				require.NotEqual(t, remotes[0], remotes[1], "the retry went out on the connection that answered 421")
			} else {
				require.Equal(t, remotes[0], remotes[1], "net/http keeps the connection for the next request")
			}
		})
	}
}

func TestSendHTTPTransportErrors(t *testing.T) {
	t.Parallel()

	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		resp, err := destination.SendHTTP(newClient(t), post(t, context.Background(), "http://"+addr), destination.HTTPPolicy{})
		require.Nil(t, resp)
		requireOutcome(t, err, opledger.OutcomeRetryable, false)
	})

	t.Run("DNSFailure", func(t *testing.T) {
		t.Parallel()
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "crm.invalid", IsNotFound: true}}
		}
		resp, err := destination.SendHTTP(&http.Client{Transport: tr}, post(t, context.Background(), "http://crm.invalid"), destination.HTTPPolicy{})
		require.Nil(t, resp)
		requireOutcome(t, err, opledger.OutcomeRetryable, false)
		var dns *net.DNSError
		require.ErrorAs(t, err, &dns, "the transport's error stays reachable")
	})

	t.Run("CancelledBeforeSend", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(status(200))
		t.Cleanup(srv.Close)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := destination.SendHTTP(newClient(t), post(t, ctx, srv.URL), destination.HTTPPolicy{})
		requireOutcome(t, err, opledger.OutcomeRetryable, false)
	})

	t.Run("ResetAfterWrite", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = r.Body.Read(make([]byte, 64))
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}))
		t.Cleanup(srv.Close)
		resp, err := destination.SendHTTP(newClient(t), post(t, context.Background(), srv.URL), destination.HTTPPolicy{})
		require.Nil(t, resp)
		requireOutcome(t, err, opledger.OutcomeUncertain, true)
	})

	t.Run("TimeoutAfterWrite", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{})
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-arrived
			cancel() // the caller gives up once the destination has the request
		}()
		resp, err := destination.SendHTTP(newClient(t), post(t, ctx, srv.URL), destination.HTTPPolicy{})
		require.Nil(t, resp)
		requireOutcome(t, err, opledger.OutcomeUncertain, true)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// untracedTransport stands for a RoundTripper of the caller's that does
// not pass the request's httptrace hooks on (it sends the request with a
// context of its own): the request reaches the destination, then the
// answer is lost.
type untracedTransport struct{ err error }

func (u untracedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if u.err != nil {
		return nil, u.err
	}
	resp, err := http.DefaultTransport.RoundTrip(r.Clone(context.Background()))
	if err == nil {
		resp.Body.Close()
	}
	return nil, errors.New("stream reset by peer")
}

// TestSendHTTPUntracedTransport: with a transport that does not report its
// connections, seeing no connection proves nothing: a failure after the
// request may have left is uncertain (it used to be retryable, and the
// retry a second effect); only an error that comes before any connection
// (a failed dial, a name that does not resolve) is retryable.
func TestSendHTTPUntracedTransport(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	t.Cleanup(srv.Close)
	_, err := destination.SendHTTP(&http.Client{Transport: untracedTransport{}}, post(t, context.Background(), srv.URL), destination.HTTPPolicy{})
	require.EqualValues(t, 1, got.Load(), "the destination had the request")
	requireOutcome(t, err, opledger.OutcomeUncertain, true)

	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	_, err = destination.SendHTTP(&http.Client{Transport: untracedTransport{err: dial}}, post(t, context.Background(), srv.URL), destination.HTTPPolicy{})
	requireOutcome(t, err, opledger.OutcomeRetryable, false)
	dns := &net.DNSError{Err: "no such host", Name: "crm.invalid", IsNotFound: true}
	_, err = destination.SendHTTP(&http.Client{Transport: untracedTransport{err: dns}}, post(t, context.Background(), srv.URL), destination.HTTPPolicy{})
	requireOutcome(t, err, opledger.OutcomeRetryable, false)
	require.EqualValues(t, 1, got.Load())
}

// A bodyless request whose reused connection dies after the destination
// read it is not sent again behind the ledger's back: net/http would for a
// GET or DELETE (with an idempotency header) it deems replayable, and for
// any method with an idempotency header, even an empty one.
func TestSendHTTPNeverResendsBodyless(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ method, header, value string }{
		{http.MethodGet, "Idempotency-Key", "opl-k1-v1"},
		{http.MethodDelete, "Idempotency-Key", "opl-k1-v1"},
		{http.MethodHead, "Idempotency-Key", "opl-k1-v1"},
		{http.MethodOptions, "Idempotency-Key", "opl-k1-v1"},
		{http.MethodPost, "Idempotency-Key", "opl-k1-v1"},
		{http.MethodPost, "X-Idempotency-Key", ""},
		{http.MethodPatch, "Idempotency-Key", ""},
	} {
		method := tc.method
		t.Run(method+"/"+tc.header+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			var drops atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/warm" {
					w.WriteHeader(http.StatusOK)
					return
				}
				drops.Add(1)
				if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
					_ = conn.Close()
				}
			}))
			t.Cleanup(srv.Close)
			client := newClient(t)
			warm, err := http.NewRequest(method, srv.URL+"/warm", nil)
			require.NoError(t, err)
			resp, err := destination.SendHTTP(client, warm, destination.HTTPPolicy{})
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close()) // the connection goes back to the pool

			req, err := http.NewRequest(method, srv.URL+"/act/k1", nil)
			require.NoError(t, err)
			req.Header.Set(tc.header, tc.value)
			resp, err = destination.SendHTTP(client, req, destination.HTTPPolicy{})
			require.Nil(t, resp)
			requireOutcome(t, err, opledger.OutcomeUncertain, true)
			require.Equal(t, int32(1), drops.Load(), "sent once, on the reused connection")
		})
	}
}

func requireOutcome(t *testing.T, err error, want opledger.Outcome, written bool) {
	t.Helper()
	require.Error(t, err)
	got, _ := opledger.OutcomeOf(err)
	require.Equal(t, want, got, "error: %v", err)
	var se *destination.SendError
	require.ErrorAs(t, err, &se)
	require.Equal(t, written, se.Written)
	require.NotContains(t, err.Error(), "example.com", "the query (payload data) stays out of errors")
	require.NotContains(t, err.Error(), "/records")
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"absent", h(), 0},
		{"seconds", h("Retry-After", "2"), 2 * time.Second},
		{"zero", h("Retry-After", "0"), 0},
		{"negative", h("Retry-After", "-5"), 0},
		{"huge", h("Retry-After", "999999999999999999"), 366 * 24 * time.Hour},
		{"date from now", h("Retry-After", now.Add(30*time.Second).Format(http.TimeFormat)), 30 * time.Second},
		{"date from the Date header", h("Retry-After", now.Add(time.Hour+30*time.Second).Format(http.TimeFormat),
			"Date", now.Add(time.Hour).Format(http.TimeFormat)), 30 * time.Second},
		{"past date", h("Retry-After", now.Add(-time.Minute).Format(http.TimeFormat)), 0},
		{"garbage", h("Retry-After", "tomorrow"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, destination.ParseRetryAfter(tc.header, now))
		})
	}
}

package destination_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// h2Server is an HTTP/2 server over TLS on a raw socket, written frame by
// frame so that it can do what net/http's server never does: reset a
// stream it has acted on with PROTOCOL_ERROR, as a reverse proxy does when
// the answer of the server behind it is malformed. It acts on every
// request it reads whole (END_STREAM); the first one it resets, the others
// it answers 200 without a body.
type h2Server struct {
	ln   net.Listener
	cert *x509.Certificate
	// refuse, when set, is how the server turns the first request down
	// as soon as its HEADERS arrive, without acting on it: h2RSTStream
	// (RST_STREAM REFUSED_STREAM), h2GoAway (GOAWAY, last stream 0,
	// NO_ERROR) or h2GoAwayErr (the same with ENHANCE_YOUR_CALM). It then
	// answers the others 200 without resetting any.
	refuse byte
	wg     sync.WaitGroup
	mu     sync.Mutex
	acted  int
	seen   int
	conns  []net.Conn
}

const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2Ping         = 0x6
	h2EndStream    = 0x1
	h2Ack          = 0x1
	h2EndHeaders   = 0x4
	h2GoAway       = 0x7
	h2GoAwayErr    = 0xff // not a frame type: GOAWAY with ENHANCE_YOUR_CALM
	h2ProtocolErr  = 0x1
	h2RefusedErr   = 0x7
	h2Status200HPK = 0x88 // HPACK: indexed field 8, ":status: 200"
)

func newH2Server(t *testing.T) *h2Server { return newH2ServerRefusing(t, 0) }

func newH2ServerRefusing(t *testing.T, refuse byte) *h2Server {
	t.Helper()
	// Borrow httptest's certificate for 127.0.0.1.
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	certs := ts.TLS.Certificates
	cert := ts.Certificate()
	ts.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: certs, NextProtos: []string{"h2"}})
	require.NoError(t, err)
	s := &h2Server{ln: ln, cert: cert, refuse: refuse}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *h2Server) URL() string { return "https://" + s.ln.Addr().String() }

// client returns a client whose transport trusts the server and speaks
// HTTP/2 as net/http's default transport does.
func (s *h2Server) client(t *testing.T) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.cert)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (s *h2Server) Acted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acted
}

// firstSeen counts a request's HEADERS and reports whether it is the
// first the server has seen.
func (s *h2Server) firstSeen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen++
	return s.seen == 1
}

func (s *h2Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.serve(c)
		}()
	}
}

func h2Frame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	var hdr [9]byte
	hdr[0], hdr[1], hdr[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	hdr[3], hdr[4] = typ, flags
	binary.BigEndian.PutUint32(hdr[5:], stream&0x7fffffff)
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func (s *h2Server) serve(c net.Conn) {
	r := bufio.NewReader(c)
	preface := make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	if _, err := io.ReadFull(r, preface); err != nil {
		return
	}
	if h2Frame(c, h2Settings, 0, 0, nil) != nil {
		return
	}
	refused := map[uint32]bool{}
	for {
		var hdr [9]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		stream := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		var err error
		switch {
		case typ == h2Settings && flags&h2Ack == 0:
			err = h2Frame(c, h2Settings, h2Ack, 0, nil)
		case typ == h2Ping && flags&h2Ack == 0:
			err = h2Frame(c, h2Ping, h2Ack, 0, payload)
		case typ == h2Headers && s.refuse != 0 && s.firstSeen():
			refused[stream] = true
			var code [8]byte
			switch s.refuse {
			case h2GoAway, h2GoAwayErr: // last stream 0
				if s.refuse == h2GoAwayErr {
					binary.BigEndian.PutUint32(code[4:], 0xb)
				}
				err = h2Frame(c, h2GoAway, 0, 0, code[:])
			default:
				binary.BigEndian.PutUint32(code[:], h2RefusedErr)
				err = h2Frame(c, h2RSTStream, 0, stream, code[:4])
			}
		case (typ == h2Headers || typ == h2Data) && !refused[stream]:
			if flags&h2EndStream == 0 {
				continue
			}
			// The whole request arrived: act on it.
			s.mu.Lock()
			s.acted++
			first := s.acted == 1 && s.refuse == 0
			s.mu.Unlock()
			if first {
				var code [4]byte
				binary.BigEndian.PutUint32(code[:], h2ProtocolErr)
				err = h2Frame(c, h2RSTStream, 0, stream, code[:])
			} else {
				err = h2Frame(c, h2Headers, h2EndHeaders|h2EndStream, stream, []byte{h2Status200HPK})
			}
		}
		if err != nil {
			return
		}
	}
}

// TestSendHTTPNeverResendsOverHTTP2: over HTTP/2, net/http resends a
// request without a body (nil or NoBody) on a new connection when the
// server resets its stream with PROTOCOL_ERROR, whatever its method, and
// such a reset may come after the server acted. SendHTTP must send it
// once and call the outcome uncertain.
func TestSendHTTPNeverResendsOverHTTP2(t *testing.T) {
	t.Parallel()
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodGet} {
		for _, noBody := range []bool{false, true} {
			name := method + "/nil"
			if noBody {
				name = method + "/NoBody"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := newH2Server(t)
				var body io.Reader
				if noBody {
					body = http.NoBody
				}
				req, err := http.NewRequest(method, srv.URL()+"/records/act", body)
				require.NoError(t, err)
				resp, err := destination.SendHTTP(srv.client(t), req, destination.HTTPPolicy{})
				if resp != nil {
					_ = resp.Body.Close()
				}
				require.Equal(t, 1, srv.Acted(), "sent once: net/http must not resend it behind the ledger's back")
				require.Nil(t, resp)
				requireOutcome(t, err, opledger.OutcomeUncertain, true)
			})
		}
	}
}

// An HTTP destination whose body template renders nothing, over HTTP/2:
// its call is made once, and the reset leaves it uncertain.
func TestHTTPCallNeverResentOverHTTP2(t *testing.T) {
	t.Parallel()
	srv := newH2Server(t)
	h, err := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: srv.URL() + "/records", Ref: "/id",
		Body: `{{if false}}nothing{{end}}`}, destination.LoadOptions{Transport: srv.client(t).Transport})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	_, err = h.Call(context.Background(), call(operation("order:1", `{"name":"Ada"}`)))
	require.Equal(t, 1, srv.Acted(), "sent once")
	require.Error(t, err)
	outcome, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeUncertain, outcome, "error: %v", err)
}

// The empty body that keeps a bodyless POST from being resent changes
// nothing a server sees but the framing: over HTTP/2 and over HTTP/1.1
// with TLS, the server reads an empty body.
func TestSendHTTPBodylessPostOverTLS(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{true, false} {
		t.Run(map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2], func(t *testing.T) {
			t.Parallel()
			var proto, body string
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				proto, body = r.Proto, string(b)
				w.WriteHeader(http.StatusCreated)
			}))
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			t.Cleanup(srv.Close)
			req, err := http.NewRequest(http.MethodPost, srv.URL, nil)
			require.NoError(t, err)
			resp, err := destination.SendHTTP(srv.Client(), req, destination.HTTPPolicy{})
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Equal(t, map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2], proto)
			require.Empty(t, body)
		})
	}
}

// TestSendHTTPHTTP2RefusalIsRetryable: an HTTP/2 server that refuses a
// stream (REFUSED_STREAM) or announces with GOAWAY that it will not
// process it says that it did nothing; net/http would resend such a
// request on its own if it could rewind the body, and gives it up with
// that error otherwise. It is retryable, whatever the body's size: not
// uncertain, which would leave it to a lookup or a person.
func TestSendHTTPHTTP2RefusalIsRetryable(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name   string
		refuse byte
	}{{"REFUSED_STREAM", h2RSTStream}, {"GOAWAY", h2GoAway}, {"GOAWAY with an error", h2GoAwayErr}} {
		for _, size := range []int{10, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", mode.name, size), func(t *testing.T) {
				t.Parallel()
				srv := newH2ServerRefusing(t, mode.refuse)
				req, err := http.NewRequest(http.MethodPost, srv.URL()+"/records", bytes.NewReader(bytes.Repeat([]byte("a"), size)))
				require.NoError(t, err)
				resp, err := destination.SendHTTP(srv.client(t), req, destination.HTTPPolicy{})
				require.Nil(t, resp)
				require.Zero(t, srv.Acted())
				requireOutcome(t, err, opledger.OutcomeRetryable, false)
			})
		}
	}
}

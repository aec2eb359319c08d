package fakedest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
)

// Dropper is an upstream on a raw socket that answers the first request
// of every connection with 201 {"id":"A"} and, from the second request of
// a connection on, reads the request whole and closes the connection
// without an answer: it acted, then the connection broke. A client that
// sent such a request again on a new connection would be answered (and
// counted by Answered) again.
type Dropper struct {
	ln    net.Listener
	mu    sync.Mutex
	reqs  []Request
	conns []net.Conn
	wg    sync.WaitGroup
}

// Request is one request a Dropper read whole.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         string
	// Dropped: read after the first of its connection, and never answered.
	Dropped bool
}

// NewDropper starts a Dropper on 127.0.0.1; it stops when t's test ends.
func NewDropper(t interface {
	Cleanup(func())
	Fatalf(string, ...any)
}) *Dropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dropper: %v", err)
	}
	d := &Dropper{ln: ln}
	t.Cleanup(d.close)
	d.wg.Add(1)
	go d.accept()
	return d
}

// URL is the Dropper's base URL.
func (d *Dropper) URL() string { return "http://" + d.ln.Addr().String() }

// Requests returns the requests read so far, in order.
func (d *Dropper) Requests() []Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Request(nil), d.reqs...)
}

// Answered counts the requests answered (the first of each connection).
func (d *Dropper) Answered() int {
	n := 0
	for _, r := range d.Requests() {
		if !r.Dropped {
			n++
		}
	}
	return n
}

func (d *Dropper) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
		d.wg.Add(1)
		go d.serve(c)
	}
}

func (d *Dropper) serve(c net.Conn) {
	defer d.wg.Done()
	defer c.Close()
	rd := bufio.NewReader(c)
	for i := 0; ; i++ {
		req, err := http.ReadRequest(rd)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		d.mu.Lock()
		d.reqs = append(d.reqs, Request{Method: req.Method, Path: req.URL.Path, Header: req.Header, Body: string(body), Dropped: i > 0})
		d.mu.Unlock()
		if i > 0 {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"id\":\"A\"}"); err != nil {
			return
		}
	}
}

func (d *Dropper) close() {
	_ = d.ln.Close()
	d.mu.Lock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

package fakedest

import (
	"bufio"
	"net"
	"sync/atomic"
)

// HeaderActor is a destination on a raw socket that acts on a request as
// soon as it has read its headers, as HTTP allows (an upload that
// creates its record first, an endpoint that ignores the body), and goes
// away without reading the body: it writes Answer first when it is set,
// and otherwise resets the connection (it crashed after it committed).
type HeaderActor struct {
	ln    net.Listener
	acted atomic.Int32
	done  chan struct{}
}

// NewHeaderActor starts a HeaderActor on 127.0.0.1 that writes answer
// ("" for none); it stops when t's test ends.
func NewHeaderActor(t interface {
	Cleanup(func())
	Fatalf(string, ...any)
}, answer string) *HeaderActor {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("header actor: %v", err)
	}
	h := &HeaderActor{ln: ln, done: make(chan struct{})}
	go h.serve(answer)
	t.Cleanup(func() {
		_ = ln.Close()
		<-h.done
	})
	return h
}

// URL is the HeaderActor's base URL.
func (h *HeaderActor) URL() string { return "http://" + h.ln.Addr().String() }

// Acted counts the requests whose headers it read, each of which it
// acted on.
func (h *HeaderActor) Acted() int { return int(h.acted.Load()) }

func (h *HeaderActor) serve(answer string) {
	defer close(h.done)
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				break
			}
			if line == "\r\n" {
				h.acted.Add(1) // committed
				break
			}
		}
		if answer != "" {
			_, _ = c.Write([]byte(answer))
		} else {
			_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a close
		}
		_ = c.Close()
	}
}

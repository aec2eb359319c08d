package proxy

import (
	"context"
	"net"
	"time"
)

// connKey is the context key of the connection a request came on.
type connKey struct{}

// ConnContext is an http.Server's ConnContext that lets the proxy see
// the connection each request came on, so that a caller taking an answer
// counts as stalled only when it acknowledges nothing of it for the
// route's timeout, however much the connection's kernel buffers hold.
// Without it, each write of an answer to the caller must finish within
// the timeout: a caller reading a large answer slowly but steadily may
// be cut off while a write waits for megabytes of kernel buffer to
// drain. Run's server sets it; a program serving a Proxy with a server
// of its own should set it too. It acts on HTTP/1 connections only: an
// HTTP/2 connection is shared by other requests, and each write to a
// caller there must end within the timeout.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// progress moves a connection's write deadline on, to the timeout from
// now, whenever the peer has acknowledged more bytes since it last
// looked, until stopped or its context ends.
type progress struct {
	stopped chan struct{}
	done    chan struct{}
}

// watchProgress starts watching c, or returns nil when the bytes c's peer
// acknowledged cannot be read (not TCP, or not Linux).
func watchProgress(ctx context.Context, c net.Conn, timeout time.Duration) *progress {
	last, ok := bytesAcked(c)
	if !ok {
		return nil
	}
	p := &progress{stopped: make(chan struct{}), done: make(chan struct{})}
	every := min(max(timeout/4, 10*time.Millisecond), time.Second)
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-p.stopped:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			acked, ok := bytesAcked(c)
			if !ok {
				return
			}
			if acked > last {
				_ = c.SetWriteDeadline(time.Now().Add(timeout))
				last = acked
			}
		}
	}()
	return p
}

// stop stops the watch and waits for it to end; a nil watch is none.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.stopped)
	<-p.done
}

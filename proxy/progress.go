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
// counts as stalled only when it acknowledges less than 1 KiB a second
// of it for the route's timeout, however much the connection's kernel
// buffers hold.
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

// minCallerRate is the slowest a caller may take an answer, in bytes a
// second: a caller that acknowledges less, on average since its progress
// last counted, is stalled once the timeout passes. However slowly it
// may read, a caller that acknowledged one segment per timeout would
// otherwise hold a handler, an upstream connection and a lease for as
// long as it liked.
const minCallerRate = 1 << 10

// progress moves a connection's write deadline on, to the timeout from
// now, whenever the peer has acknowledged more bytes since the deadline
// last moved, at minCallerRate or more, until stopped or its context
// ends.
type progress struct {
	stopped chan struct{}
	done    chan struct{}
}

// watchProgress starts watching c, or returns nil when the bytes c's peer
// acknowledged cannot be read (not TCP, or not Linux).
func watchProgress(ctx context.Context, c net.Conn, timeout time.Duration) *progress {
	return watchAcked(ctx, c, func() (uint64, bool) { return bytesAcked(c) }, timeout)
}

// watchAcked is watchProgress with the count of acknowledged bytes read
// by acked.
func watchAcked(ctx context.Context, c net.Conn, acked func() (uint64, bool), timeout time.Duration) *progress {
	last, ok := acked()
	if !ok {
		return nil
	}
	moved := time.Now() // the relay's last write set the deadline from about now
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
			n, ok := acked()
			if !ok {
				return
			}
			now := time.Now()
			if n > last && keepsPace(n-last, now.Sub(moved)) {
				_ = c.SetWriteDeadline(now.Add(timeout))
				last, moved = n, now
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

// keepsPace reports whether a caller that acknowledged n bytes over
// elapsed takes the answer at minCallerRate or more.
func keepsPace(n uint64, elapsed time.Duration) bool {
	return float64(n) >= minCallerRate*elapsed.Seconds()
}

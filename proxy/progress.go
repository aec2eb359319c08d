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
// counts as stalled only when a write to it has waited the route's
// timeout and it acknowledged less than 1 KiB a second of the answer
// over the last four timeouts (paceWindows), however much the
// connection's kernel buffers hold: a caller that reads in bursts and
// pauses longer than the timeout between them is not cut off.
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
// second, on average over the last paceWindows timeouts: a caller that
// acknowledges less is stalled once its write has waited the timeout.
// However slowly it may read, a caller that acknowledged one segment per
// timeout would otherwise hold a handler, an upstream connection and a
// lease for as long as it liked.
const minCallerRate = 1 << 10

// paceWindows is how many of the route's timeouts the pace of a caller is
// measured over. A caller that reads in bursts (curl --limit-rate takes
// megabytes of kernel buffer at once, then pauses to keep its average)
// acknowledges nothing during a pause; measured over one timeout, a pause
// longer than it cut the caller off whatever its average. Over four, a
// caller is kept while its pauses are shorter than four timeouts and it
// keeps minCallerRate over them, and one that stops for good is cut off
// about five timeouts after its last acknowledged byte (at most five and
// an eighth, and a look).
const paceWindows = 4

// progress moves a connection's write deadline on, to the timeout from
// now, whenever the peer has acknowledged, over the last paceWindows
// timeouts, bytes at minCallerRate or more, until stopped or its context
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

// ackSample is the count of acknowledged bytes at a moment.
type ackSample struct {
	at time.Time
	n  uint64
}

// watchAcked is watchProgress with the count of acknowledged bytes read
// by acked.
func watchAcked(ctx context.Context, c net.Conn, acked func() (uint64, bool), timeout time.Duration) *progress {
	first, ok := acked()
	if !ok {
		return nil
	}
	window := paceWindows * timeout
	// The counts the pace is measured from: the oldest is the newest
	// taken at or before the window's start (or the first). A count that
	// moved is kept at most every window/32, so that a long timeout keeps
	// few; one not kept yet is kept at the next look that may.
	samples := []ackSample{{time.Now(), first}} // the relay's last write set the deadline from about now
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
			for len(samples) > 1 && !samples[1].at.After(now.Add(-window)) {
				samples = samples[1:]
			}
			// The average since base, which is exact: a sample is the
			// count at its moment.
			if base := samples[0]; n > base.n && keepsPace(n-base.n, now.Sub(base.at)) {
				_ = c.SetWriteDeadline(now.Add(timeout))
			}
			if last := samples[len(samples)-1]; n != last.n && now.Sub(last.at) >= window/32 {
				samples = append(samples, ackSample{now, n})
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

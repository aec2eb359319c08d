package proxy

import (
	"context"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A caller that acknowledges a little of the answer within every
// timeout, but at less than minCallerRate, counts as stalled: the write
// waiting on it ends with a timeout. One at the rate or above keeps its
// write waiting as long as it keeps up. The acknowledgements are counted
// by hand here (the kernel's count, bytesAcked, is exercised by
// TestSteadyCallerLargeBuffers); the write is a real one, on one end of a
// pipe nobody reads, with the watch moving its deadline.
func TestProgressFloor(t *testing.T) {
	t.Parallel()
	const timeout = 400 * time.Millisecond
	every := min(max(timeout/4, 10*time.Millisecond), time.Second) // the watch's tick
	for _, tc := range []struct {
		name    string
		perTick uint64 // bytes acknowledged between two looks
		stalled bool
	}{
		// 40 bytes every 100 ms: 400 bytes a second, something within
		// every timeout. Before the floor, the deadline moved on for ever.
		{"below the floor", 40, true},
		// 4 KiB every 100 ms: 40 KiB a second.
		{"above the floor", 4 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, r := net.Pipe()
			t.Cleanup(func() { w.Close(); r.Close() })
			var n atomic.Uint64
			looked := make(chan struct{}, 1)
			acked := func() (uint64, bool) {
				select {
				case looked <- struct{}{}:
				default:
				}
				return n.Add(tc.perTick), true
			}
			require.NoError(t, w.SetWriteDeadline(time.Now().Add(timeout)))
			p := watchAcked(context.Background(), w, acked, timeout)
			defer p.stop()
			wrote := make(chan error, 1)
			go func() {
				_, err := w.Write([]byte("x"))
				wrote <- err
			}()
			if tc.stalled {
				select {
				case err := <-wrote:
					require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the write timed out")
				case <-time.After(20 * timeout): // a bound, not a synchronisation
					t.Fatal("the watch kept moving the deadline of a caller below the floor")
				}
				return
			}
			// Kept up: after the watch has looked for three timeouts, the
			// write still waits, and ends only when the pipe is closed.
			for range 3 * int(timeout/every) {
				<-looked
			}
			require.NoError(t, r.Close())
			require.ErrorIs(t, <-wrote, io.ErrClosedPipe, "the write waited, its deadline moved on")
		})
	}
}

// TestProgressBurstThenPause: a caller that takes a burst of the answer
// and then pauses for longer than the timeout (curl --limit-rate reads
// megabytes of kernel buffer, then waits to keep its average) keeps its
// write waiting while its pace over the last paceWindows timeouts is
// kept; one that never takes more is cut off once the burst has left
// that window. Before, the pace was measured since the deadline last
// moved: the write ended a timeout into the pause. The acknowledgements
// are counted by hand, each look of the watch handing on the next count.
func TestProgressBurstThenPause(t *testing.T) {
	t.Parallel()
	const timeout = 400 * time.Millisecond
	every := min(max(timeout/4, 10*time.Millisecond), time.Second) // the watch's tick
	for _, resume := range []bool{true, false} {
		t.Run(map[bool]string{true: "resumes", false: "stops for good"}[resume], func(t *testing.T) {
			t.Parallel()
			w, r := net.Pipe()
			t.Cleanup(func() { w.Close(); r.Close() })
			var n atomic.Uint64
			looks := make(chan struct{})
			ended := make(chan struct{})
			acked := func() (uint64, bool) {
				select {
				case looks <- struct{}{}:
				case <-ended:
				}
				return n.Load(), true
			}
			require.NoError(t, w.SetWriteDeadline(time.Now().Add(timeout)))
			// The first count, at the watch's start.
			go func() { <-looks }()
			p := watchAcked(context.Background(), w, acked, timeout)
			defer p.stop()
			defer close(ended) // before the stop, which waits for a look
			wrote := make(chan error, 1)
			go func() {
				_, err := w.Write([]byte("x"))
				wrote <- err
			}()
			// A burst of 1 MiB, then nothing for twice the timeout.
			n.Store(1 << 20)
			for range 2 * int(timeout/every) {
				select {
				case <-looks:
				case err := <-wrote:
					t.Fatalf("the write ended during the pause: %v", err)
				}
			}
			if resume {
				// Another burst: the write still waits, and ends only
				// when the pipe is closed.
				n.Add(1 << 20)
				<-looks
				<-looks
				require.NoError(t, r.Close())
				require.ErrorIs(t, <-wrote, io.ErrClosedPipe, "the write waited, its deadline moved on")
				return
			}
			// Never more: cut off once the burst is older than the window.
			for {
				select {
				case <-looks:
					continue
				case err := <-wrote:
					require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the write timed out")
				case <-time.After(20 * timeout): // a bound, not a synchronisation
					t.Fatal("the watch kept moving the deadline of a caller that stopped")
				}
				break
			}
		})
	}
}

package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFrozenClockStaysStopped: a clock frozen once the answer came is not
// restarted by a late resume (the transport's report that the request
// was written, after a full-duplex upstream answered early), which would
// cut off the answer's relay a timeout later.
func TestFrozenClockStaysStopped(t *testing.T) {
	t.Parallel()
	ctx, c := startClock(context.Background(), time.Hour)
	defer c.stop()
	c.freeze()
	c.resume()
	c.mu.Lock()
	paused, frozen := c.paused, c.frozen
	c.mu.Unlock()
	require.True(t, paused, "still paused after a resume")
	require.True(t, frozen)
	require.NoError(t, ctx.Err())

	// An unfrozen clock does resume.
	_, other := startClock(context.Background(), time.Hour)
	defer other.stop()
	other.pause()
	other.resume()
	require.False(t, other.paused)
}

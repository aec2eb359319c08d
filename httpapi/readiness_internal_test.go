package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadinessSharesProbes: requests arriving together run one write
// probe and all take its result, a failed one included; a request after
// the interval runs the next.
func TestReadinessSharesProbes(t *testing.T) {
	t.Parallel()
	rd := &readiness{every: time.Hour}
	var probes atomic.Int32
	release := make(chan struct{})
	failing := errors.New("read-only")
	probe := func(ctx context.Context) error {
		probes.Add(1)
		<-release
		return failing
	}
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() { errs[i] = rd.check(context.Background(), probe) })
	}
	close(release)
	wg.Wait()
	require.Equal(t, int32(1), probes.Load(), "one probe for requests that arrived together")
	for _, err := range errs {
		require.ErrorIs(t, err, failing)
	}

	rd.every = time.Nanosecond // the interval has passed
	require.NoError(t, rd.check(context.Background(), func(context.Context) error { probes.Add(1); return nil }))
	require.Equal(t, int32(2), probes.Load())

	// A probe is not cut short by the request that started it going away.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	probeCtx := make(chan error, 1)
	_ = rd.check(gone, func(ctx context.Context) error { probeCtx <- ctx.Err(); return nil })
	require.NoError(t, <-probeCtx)
}

// TestReadinessProbeTimeout: a probe whose commit does not return answers
// errProbeTimeout after the timeout to the request that started it and to
// those that came meanwhile, which wait for it rather than start another
// probe or wait on a lock; once it ends, the next request runs a probe of
// its own (TestReadinessTimedOutProbeNotShared). Before,
// every /readyz request waited behind a PostgreSQL COMMIT for up to a
// minute, and behind SQLite's busy timeout for 10 s.
func TestReadinessProbeTimeout(t *testing.T) {
	t.Parallel()
	rd := &readiness{every: time.Hour, timeout: 50 * time.Millisecond}
	var probes atomic.Int32
	release := make(chan struct{})
	ended := make(chan struct{})
	stuck := func(ctx context.Context) error {
		probes.Add(1)
		<-release // a commit that does not heed its context
		defer close(ended)
		return errors.New("commit failed")
	}
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() { errs[i] = rd.check(context.Background(), stuck) })
	}
	wg.Wait()
	for _, err := range errs {
		require.ErrorIs(t, err, errProbeTimeout)
	}
	require.ErrorIs(t, rd.check(context.Background(), stuck), errProbeTimeout, "still waiting for the same probe")
	require.Equal(t, int32(1), probes.Load(), "one probe")

	close(release)
	<-ended
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.EqualError(c, rd.check(context.Background(), func(context.Context) error {
			probes.Add(1)
			return errors.New("read-only")
		}), "read-only")
	}, 10*time.Second, time.Millisecond, "a new probe's result once it ends")
	require.Equal(t, int32(2), probes.Load())
}

// TestReadinessTimedOutProbeNotShared: a probe that outlived its wait (a
// write lock held elsewhere, then freed) says how the store was when it
// started, not how it is: the request after it ends runs a probe of its
// own and answers ready when the store is. Before, the timed-out probe's
// failure was answered to every request for a second after it ended.
func TestReadinessTimedOutProbeNotShared(t *testing.T) {
	t.Parallel()
	rd := &readiness{every: time.Hour, timeout: 50 * time.Millisecond}
	release := make(chan struct{})
	ended := make(chan struct{})
	stuck := func(ctx context.Context) error {
		<-release // a commit waiting for a lock, past the timeout
		defer close(ended)
		return fmt.Errorf("commit: %w", context.DeadlineExceeded)
	}
	require.ErrorIs(t, rd.check(context.Background(), stuck), errProbeTimeout)
	close(release)
	<-ended
	var probes atomic.Int32
	healthy := func(context.Context) error { probes.Add(1); return nil }
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, rd.check(context.Background(), healthy))
	}, 10*time.Second, time.Millisecond, "the store as it is now")
	require.Equal(t, int32(1), probes.Load(), "one probe of its own")

	// A probe that ended in time is shared as before.
	require.NoError(t, rd.check(context.Background(), healthy))
	require.Equal(t, int32(1), probes.Load())
}

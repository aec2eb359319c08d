package httpapi

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

	// A probe is not cut short by the request that runs it going away.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, rd.check(gone, func(ctx context.Context) error { return ctx.Err() }))
}

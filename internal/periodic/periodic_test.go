package periodic_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/periodic"
	"github.com/opledger/opledger/internal/testrig"
)

// TestRunAtOnceThenAtInterval: the first run does not wait for the
// interval, the next ones come at it, an error is logged under the job's
// name, and Run returns once ctx ends.
func TestRunAtOnceThenAtInterval(t *testing.T) {
	t.Parallel()
	var logs testrig.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	runs := make(chan int)
	returned := make(chan struct{})
	n := 0
	go func() {
		periodic.Run(ctx, time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)), "the job", func(ctx context.Context) error {
			n++
			select {
			case runs <- n:
			case <-ctx.Done():
				return ctx.Err()
			}
			if n == 2 {
				return errors.New("disk full")
			}
			return nil
		})
		close(returned)
	}()
	require.Equal(t, 1, <-runs)
	require.Equal(t, 2, <-runs)
	require.Equal(t, 3, <-runs) // an error does not stop the job
	cancel()
	<-returned
	require.Contains(t, logs.String(), `level=ERROR msg="the job" error="disk full"`)
	require.Equal(t, 1, strings.Count(logs.String(), "level=ERROR"))

	// With an interval far longer than the test, the first run still
	// happens at once.
	once := make(chan struct{})
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go periodic.Run(ctx, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)), "hourly", func(context.Context) error {
		close(once)
		return nil
	})
	<-once
}

// TestRunQuietAfterCancel: an error a run returns because ctx ended is
// not logged.
func TestRunQuietAfterCancel(t *testing.T) {
	t.Parallel()
	var logs testrig.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	periodic.Run(ctx, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)), "the job", func(ctx context.Context) error {
		cancel()
		return ctx.Err()
	})
	require.Empty(t, logs.String())
}

package periodic_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/periodic"
	"github.com/opledger/opledger/internal/store"
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

// TestBounded: a run that fails at its deadline is a store_busy failure
// that still wraps its own error; one that fails because its caller's
// context ended, or for a reason of its own before the deadline, is
// left as it is, and a run that succeeds is not touched.
func TestBounded(t *testing.T) {
	t.Parallel()
	waits := func(ctx context.Context) error {
		<-ctx.Done()
		return fmt.Errorf("sweep: %w", ctx.Err())
	}
	err := periodic.Bounded(time.Millisecond, waits)(context.Background())
	require.ErrorIs(t, err, store.ErrBusy)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, "store_busy", periodic.StoreProblem(err))
	require.ErrorContains(t, err, "no answer from the store within 1ms")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = periodic.Bounded(time.Hour, waits)(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, store.ErrBusy, "the caller's end is no store problem")

	own := errors.New("refused")
	require.Equal(t, own, periodic.Bounded(time.Hour, func(context.Context) error { return own })(context.Background()))
	require.NoError(t, periodic.Bounded(time.Hour, func(context.Context) error { return nil })(context.Background()))
}

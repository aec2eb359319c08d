package opledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedReads: callers arriving while a read is in progress share the
// next read, never the one in progress, so each is answered with what was
// there when it called; a read's error is not kept; a caller that gives
// up leaves the others their read; other keys read on their own.
func TestSharedReads(t *testing.T) {
	t.Parallel()
	var s sharedReads[int]
	var writes atomic.Int64
	started := make(chan string, 16)
	release := map[string]chan error{"a": make(chan error), "b": make(chan error)}
	read := func(key string) func(context.Context) (int, error) {
		return func(context.Context) (int, error) {
			seen := int(writes.Load()) // what the read sees: everything written before it began
			started <- key
			if err := <-release[key]; err != nil {
				return 0, err
			}
			return seen, nil
		}
	}
	waiters := make(chan int, 64)
	s.waiting = func(key string, n int) {
		if key == "a" {
			waiters <- n
		}
	}
	ctx := context.Background()

	first := make(chan int, 1)
	go func() {
		v, err := s.do(ctx, "a", read("a"))
		assert.NoError(t, err)
		first <- v
	}()
	require.Equal(t, "a", <-started)
	require.Equal(t, 1, <-waiters)

	writes.Add(1) // a write the next callers made before calling
	const n = 8
	results := make(chan int, n)
	errs := make(chan error, n)
	gaveUp, giveUp := context.WithCancel(ctx)
	for i := range n {
		go func() {
			c := ctx
			if i == 0 {
				c = gaveUp
			}
			v, err := s.do(c, "a", read("a"))
			if err != nil {
				errs <- err
				return
			}
			results <- v
		}()
	}
	for range n {
		<-waiters // each of the n is now waiting for the next read
	}
	giveUp()
	require.ErrorIs(t, <-errs, context.Canceled, "a caller that gives up leaves at once")

	// Another key reads on its own, while "a" is in progress.
	other := make(chan int, 1)
	go func() {
		v, err := s.do(ctx, "b", read("b"))
		assert.NoError(t, err)
		other <- v
	}()
	require.Equal(t, "b", <-started)
	release["b"] <- nil
	require.Equal(t, 1, <-other)

	release["a"] <- nil
	require.Equal(t, 0, <-first, "the first caller gets the read it started")
	select {
	case v := <-results:
		t.Fatalf("a caller that came during a read was answered by it (%d)", v)
	case key := <-started:
		require.Equal(t, "a", key, "the waiting callers' read starts once the first ends")
	}
	release["a"] <- nil
	for range n - 1 {
		require.Equal(t, 1, <-results, "callers that came during a read see the write made before they called")
	}
	s.mu.Lock()
	require.Equal(t, 3, s.started, "1 + n callers of a read 2 times, b once")
	require.Empty(t, s.byKey, "nothing left once every read is done")
	s.mu.Unlock()

	// A failed read answers its callers with its error and is not kept.
	failed := make(chan error, 1)
	go func() {
		_, err := s.do(ctx, "a", read("a"))
		failed <- err
	}()
	require.Equal(t, "a", <-started)
	require.Equal(t, 1, <-waiters)
	release["a"] <- errors.New("store unreachable")
	require.EqualError(t, <-failed, "store unreachable")
	go func() {
		v, err := s.do(ctx, "a", read("a"))
		assert.NoError(t, err)
		first <- v
	}()
	require.Equal(t, "a", <-started, "the next call reads again")
	<-waiters
	release["a"] <- nil
	require.Equal(t, 1, <-first)
}

// TestStatsReadYourWrites: many callers recording operations and reading
// Stats at once, on a real SQLite ledger: every Stats call counts at least
// every operation recorded before it was made.
func TestStatsReadYourWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := Open(ctx, "sqlite:"+t.TempDir()+"/stats.db", Options{Tenant: "acme"})
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	var recorded atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 10 {
				key := fmt.Sprintf("stats:%02d:%02d", g, i)
				if _, _, err := l.Record(ctx, Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: []byte(`{}`)}); err != nil {
					errs <- err
					return
				}
				before := recorded.Add(1)
				st, err := l.Stats(ctx, false)
				if err != nil {
					errs <- err
					return
				}
				if got := st.OperationsByState[StatePending]; int64(got) < before {
					errs <- fmt.Errorf("Stats counted %d pending operations, %d were recorded before the call", got, before)
					return
				}
				ev, err := l.EventStats(ctx, true)
				if err != nil {
					errs <- err
					return
				}
				if ev.Events != 0 {
					errs <- fmt.Errorf("%d events, none received", ev.Events)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st, err := l.Stats(ctx, true)
	require.NoError(t, err)
	require.Equal(t, 160, st.OperationsByState[StatePending])
}

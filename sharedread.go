package opledger

import (
	"context"
	"sync"
	"time"
)

// sharedReadTimeout bounds one shared read, which runs apart from the
// callers waiting for it (each of whom gives up with its own context).
const sharedReadTimeout = time.Minute

// sharedReads lets concurrent callers share reads of the same figures
// (Stats and EventStats count every row still in the ledger) while each
// caller still gets a read that started after its call did: a caller
// that finds a read of its key in progress waits for the next one, which
// every caller arriving meanwhile shares. So each key has at most one read
// running and one waiting, however many callers poll it, and no caller is
// answered with figures older than its call (a write it made just before
// is counted).
type sharedReads[T any] struct {
	mu    sync.Mutex
	byKey map[string]*readSlot[T]
	// started counts the reads begun (under mu), for tests.
	started int
	// waiting, if set (by tests), is called once a caller waits for a
	// flight, with how many wait for it now.
	waiting func(key string, waiters int)
}

// readSlot is the read of one key in progress and the one after it.
type readSlot[T any] struct {
	running, next *readFlight[T]
}

// readFlight is one read, shared by every caller waiting for it.
type readFlight[T any] struct {
	// ctx carries the values of the call that asked for the read first,
	// without its cancellation.
	ctx  context.Context
	done chan struct{}
	val  T
	err  error
	// waiters counts the callers given this flight (under mu).
	waiters int
}

// do returns the result of a read of key that started after do was
// called, sharing it with concurrent callers of the same key.
func (s *sharedReads[T]) do(ctx context.Context, key string, read func(context.Context) (T, error)) (T, error) {
	s.mu.Lock()
	if s.byKey == nil {
		s.byKey = map[string]*readSlot[T]{}
	}
	slot := s.byKey[key]
	var f *readFlight[T]
	switch {
	case slot == nil:
		f = newReadFlight[T](ctx)
		s.byKey[key] = &readSlot[T]{running: f}
		s.started++
		go s.run(key, f, read)
	case slot.next == nil:
		f = newReadFlight[T](ctx)
		slot.next = f
	default:
		f = slot.next
	}
	f.waiters++
	waiters, waiting := f.waiters, s.waiting
	s.mu.Unlock()
	if waiting != nil {
		waiting(key, waiters)
	}
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func newReadFlight[T any](ctx context.Context) *readFlight[T] {
	return &readFlight[T]{ctx: context.WithoutCancel(ctx), done: make(chan struct{})}
}

// run reads for f, answers its callers and starts the read that waited
// for it, if any.
func (s *sharedReads[T]) run(key string, f *readFlight[T], read func(context.Context) (T, error)) {
	for f != nil {
		ctx, cancel := context.WithTimeout(f.ctx, sharedReadTimeout)
		f.val, f.err = read(ctx)
		cancel()
		close(f.done)
		s.mu.Lock()
		slot := s.byKey[key]
		f, slot.running, slot.next = slot.next, slot.next, nil
		if f == nil {
			delete(s.byKey, key)
		} else {
			s.started++
		}
		s.mu.Unlock()
	}
}

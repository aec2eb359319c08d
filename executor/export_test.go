package executor

import (
	"context"
	"time"
)

// SetBeforeDispatch installs a hook that runs between claim and dispatch.
func (e *Executor) SetBeforeDispatch(f func(stop context.Context)) { e.beforeDispatch = f }

// SetAfterSweep installs a hook that runs after each lease sweep.
func (e *Executor) SetAfterSweep(f func(settled int, err error)) { e.afterSweep = f }

// StopBegun is closed once Stop has stopped the claiming.
func (e *Executor) StopBegun() <-chan struct{} { return e.stopping }

// SetAbandonedEnded installs a hook that runs when an abandoned call has
// returned and its late report was made.
func (e *Executor) SetAbandonedEnded(f func()) { e.abandonedEnded = f }

// SetLeaseKept installs a hook that runs after each extension of the
// lease of an abandoned call still running.
func (e *Executor) SetLeaseKept(f func()) { e.leaseKept = f }

// SetLeaseRenewal sets how often the lease of an abandoned call still
// running is extended.
func (e *Executor) SetLeaseRenewal(d time.Duration) { e.leaseRenewal = d }

// SetClaimNotKept installs a hook that runs when the executor stops
// keeping the claim of an abandoned call still running (lost, or the
// ledger closed).
func (e *Executor) SetClaimNotKept(f func()) { e.claimNotKept = f }

// SetKeepStopped installs a hook that runs when an abandoned call has
// returned and its claim is no longer being kept, before its outcome is
// reported.
func (e *Executor) SetKeepStopped(f func()) { e.keepStopped = f }

// SetMaxAbandoned sets how many abandoned calls of one destination may
// run before its operations are no longer claimed.
func (e *Executor) SetMaxAbandoned(n int) { e.maxAbandoned = n }

// SetPause installs a hook that replaces a worker's wait between polls:
// it is given the pause, and the worker goes on when it returns.
func (e *Executor) SetPause(f func(stop context.Context, d time.Duration)) { e.pause = f }

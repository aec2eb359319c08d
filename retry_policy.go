package opledger

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides when a retryable outcome is tried again and when the
// operation is exhausted. Only OutcomeRetryable is ever retried
// automatically.
//
// A field left zero is not taken from DefaultRetryPolicy (unlike a
// destinations file's retry, whose unset fields are): a policy given as
// RetryPolicy{MaxAttempts: 10} retries at once, with no backoff at all,
// and without a deadline. Start from DefaultRetryPolicy and change the
// fields that differ.
type RetryPolicy struct {
	// MaxAttempts is the most attempts an operation gets, counting the
	// first: at least 1 (Open refuses a policy with less).
	MaxAttempts int
	// InitialDelay is the backoff ceiling after the first attempt. Zero
	// means no backoff: every retry is due at once (a destination's
	// Retry-After still applies).
	InitialDelay time.Duration
	// MaxDelay caps the backoff ceiling. Zero means no cap.
	MaxDelay time.Duration
	// Deadline bounds the whole life of the operation from its recording: no
	// attempt is scheduled after created_at + Deadline. Zero means none.
	Deadline time.Duration
}

// DefaultRetryPolicy: 5 attempts, backoff from 1 s capped at 5 min, within 24 h.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 5, InitialDelay: time.Second, MaxDelay: 5 * time.Minute, Deadline: 24 * time.Hour}

func (p *RetryPolicy) validate() error {
	if p.MaxAttempts < 1 {
		return invalidInput("retry policy: max attempts must be at least 1")
	}
	if p.InitialDelay < 0 || p.MaxDelay < 0 || p.Deadline < 0 {
		return invalidInput("retry policy: delays must not be negative")
	}
	return nil
}

// Ceiling is the exponential backoff ceiling after attempt n (1-based):
// InitialDelay·2^(n-1), capped at MaxDelay (no cap when it is 0, short of
// overflowing a Duration).
func (p RetryPolicy) Ceiling(n int) time.Duration {
	d := p.InitialDelay
	for i := 1; i < n && (p.MaxDelay <= 0 || d < p.MaxDelay) && d <= math.MaxInt64/2; i++ {
		d *= 2
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
	}
	return d
}

// Backoff is the delay before the attempt after attempt n: "full jitter",
// uniformly random in [0, Ceiling(n)], never less than retryAfter (the
// destination's Retry-After).
func (p RetryPolicy) Backoff(n int, retryAfter time.Duration) time.Duration {
	var d time.Duration
	if c := p.Ceiling(n); c > 0 {
		d = rand.N(min(c, math.MaxInt64-1) + 1) // c+1 would overflow at the largest Duration
	}
	return max(d, retryAfter)
}

// next decides the fate of an operation after its attempt n was retryable:
// the time of the next attempt, or exhausted with the reason.
func (p RetryPolicy) next(n int, created, now time.Time, retryAfter time.Duration) (notBefore time.Time, exhausted string) {
	at := storeTime(now.Add(p.Backoff(n, retryAfter)))
	if why := p.limit(n, created, at); why != "" {
		return time.Time{}, why
	}
	return at, ""
}

// limit says why no attempt may follow attempt n at time at, of an
// operation recorded at created; empty when one may.
func (p RetryPolicy) limit(n int, created, at time.Time) string {
	if n >= p.MaxAttempts {
		return fmt.Sprintf("attempt limit %d reached", p.MaxAttempts)
	}
	if p.Deadline > 0 && at.After(created.Add(p.Deadline)) {
		return fmt.Sprintf("next attempt would pass the deadline of %s", p.Deadline)
	}
	return ""
}

func (l *Ledger) retryPolicy(destination string) RetryPolicy {
	if p, ok := l.opts.DestinationRetryPolicies[destination]; ok {
		return p
	}
	return *l.opts.RetryPolicy
}

// MaxRetryAfter is the longest wait a destination's Retry-After is taken
// for, by an HTTP destination reading the header and by the HTTP API
// reading a report's retry_after_seconds: a longer one (an absurd value,
// a date years ahead) is taken as this, never refused, since the report
// of a call without effect must not be lost; the retry policy's deadline
// decides whether such a wait is acceptable.
const MaxRetryAfter = 366 * 24 * time.Hour

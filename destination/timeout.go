package destination

import "time"

// Timed is implemented by destinations that bound each call themselves,
// as an HTTP destination does with its timeout. An executor refuses a
// destination whose bound is not shorter than its own call timeout: the
// executor's deadline would end the call first, cutting the destination's
// timeout short and leaving a call that may have had its effect uncertain.
type Timed interface {
	// Timeout is the longest one call may take.
	Timeout() time.Duration
}

// Timeout is the longest one call or lookup of h may take: its configured
// timeout, or DefaultTimeout.
func (h *HTTP) Timeout() time.Duration { return h.timeout }

var _ Timed = (*HTTP)(nil)

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

// TimeoutTooShort reports whether d, a configured timeout, is set (above
// zero: zero is unset and takes a default) and shorter than MinTimeout.
// It is the one floor check of a configured timeout: NewHTTP and a
// destinations file refuse such a timeout with it, and so does the
// proxy for an upstream's, each in its own words and with its own
// default.
func TimeoutTooShort(d time.Duration) bool { return d > 0 && d < MinTimeout }
